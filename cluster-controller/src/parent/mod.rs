//! The floor every parent kind of ValkeyNodes stands on (a ValkeyCluster, a ValkeyReplication).

pub mod access;
pub mod apply;
pub mod auth;
pub mod conditions;
pub mod context;
pub mod error;
pub mod labels;
pub mod members;
pub mod monitoring;
pub mod node;
pub mod pass;
pub mod placement;
pub mod progress;
pub mod secrets;
pub mod serving;
pub mod stop;
pub mod tls;

pub use context::Settings;
