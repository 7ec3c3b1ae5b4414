//! Pure planning: rebalancing, and the step-by-step slot migration machines. Every function here
//! maps observed state to a decision and is deterministic. Imports only [`crate::valkey`].

pub mod migration;
pub mod rebalance;
