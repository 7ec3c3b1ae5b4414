//! The cluster-controller, in layers:
//! - [`valkey`]: what Valkey says, parsed (pure, tested from captured replies);
//! - [`plan`]: slot sets, rebalancing and the per-slot migration machines (pure);
//! - [`client`]: the one small trait the engine talks to Valkey through, and its redis impl;
//! - [`engine`]: observe every member, decide one step with a pure function, take it (tested
//!   against real valkey-server processes, no Kubernetes);
//! - [`controller`]: the Kubernetes side: ValkeyClusters in, ValkeyNodes, Secrets, status out.

pub mod client;
pub mod controller;
pub mod engine;
pub mod plan;
pub mod valkey;
