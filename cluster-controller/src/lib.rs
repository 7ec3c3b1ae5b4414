//! The cluster-controller's pure core: what Valkey says, parsed ([`valkey`]), and the decisions
//! built on it ([`plan`]). Nothing here does I/O, so all of it is tested from captured replies.

pub mod client;
pub mod controller;
pub mod engine;
pub mod plan;
pub mod valkey;
