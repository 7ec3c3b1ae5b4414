//! The operational surface both controller binaries share: flags, logs, metrics, health
//! endpoints, leader election, graceful shutdown, status conditions, events and server-side
//! apply. [`Runtime::start`] wires them together.

pub mod apply;
pub mod backoff;
pub mod cli;
pub mod conditions;
pub mod events;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod runtime;
pub mod shutdown;
pub mod telemetry;

pub use cli::CommonArgs;
pub use metrics::Metrics;
pub use runtime::{Exit, Handles, Names, Runtime, RuntimeError};
pub use shutdown::Shutdown;
