//! The floor every parent kind of ValkeyNodes stands on (a ValkeyCluster, a ValkeyReplication).

pub mod access;
pub mod auth;
pub mod error;
pub mod labels;
pub mod members;
pub mod monitoring;
pub mod placement;
pub mod progress;
pub mod secrets;
pub mod stop;
pub mod tls;
