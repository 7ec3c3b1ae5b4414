//! The operational surface both controller binaries share: flags, logs, metrics, health
//! endpoints, leader election, graceful shutdown, status conditions, events and server-side
//! apply, and the shell a reconciler runs in (watch caches with their readiness, the error
//! policy, per-object back-off and forgetting). [`runtime::main`] wires them together.

pub mod api_requests;
pub mod apply;
pub mod backoff;
pub mod cache;
pub mod cli;
pub mod conditions;
pub mod events;
pub mod health;
pub mod index;
pub mod key;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod reconcile;
pub mod runtime;
pub mod secret_cache;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod valkey_tls;

pub use cache::Cache;
pub use cli::CommonArgs;
pub use key::ObjectKey;
pub use metrics::Metrics;
pub use reconcile::{ReconcileError, Reconciler};
pub use runtime::{Exit, Handles, Names, Runtime, RuntimeError};
pub use shutdown::Shutdown;
