//! Lease-based leader election (coordination.k8s.io/v1).
//!
//! Each replica campaigns under a unique identity ([`default_identity`]). A candidate takes the
//! Lease when it is missing, has no holder, or has expired; every write carries the
//! resourceVersion it read, so two candidates can never both win. The leader renews every 5 s
//! (leaseDurationSeconds 15) and gives up if it cannot renew for 10 s. On graceful shutdown it
//! clears holderIdentity so a standby takes over at its next poll (2 s) instead of after expiry.
//!
//! Chosen contract: **once lost, leadership is never regained by the same process.** The binary
//! awaits [`Leadership::acquired`] before it starts its controllers, stops them when
//! [`Leadership::lost_owned`] resolves, and exits non-zero, so Kubernetes restarts it as a
//! fresh standby with empty caches. This avoids reasoning about a controller that pauses and
//! resumes with stale state.
//!
//! RBAC: `coordination.k8s.io` `leases` with verbs `get`, `create`, `update` in the Lease's
//! namespace.
//!
//! [`Claims`] applies the same rules to one Lease per reconciled object, so that releases whose
//! watch scopes overlap never drive one object from two controllers.

mod claim;
mod decide;
mod elector;
mod record;

pub use claim::{CLAIM_DURATION, Claim, Claims, claim_identity, heartbeat_name};
pub use decide::{AcquireReason, Decision, decide, expiry_confirmed, lease_duration};
pub use elector::{LeaderElector, LeaderError, LeaderState, Leadership, LeaseTiming};
pub use record::{POD_NAME_ENV, default_identity};
