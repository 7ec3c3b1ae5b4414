//! Pure planning: slot arithmetic, rebalancing, and the step-by-step slot migration machines.
//! Every function here maps observed state to a decision and is deterministic.

pub mod migration;
pub mod rebalance;
pub mod slots;
