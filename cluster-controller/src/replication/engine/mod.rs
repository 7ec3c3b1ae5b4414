//! The replication engine: each pass observes every member's Valkey (INFO replication, DBSIZE),
//! decides the one next step with a pure function ([`decide`]), and takes it ([`execute`]). No
//! Kubernetes here: the Kubernetes side passes the members (the cluster engine's [`Member`],
//! with shard 0) and the primary it recorded, records a newly chosen primary before the command
//! that makes it one runs, and carries out the Kubernetes actions.
//!
//! What the engine expects of every member's configuration (the Kubernetes side writes it):
//! - `replicaof 127.0.0.1 0` ([`server::PARKED_HOST`]): every member starts as a replica of
//!   nothing, so a restarted server takes no write and feeds no replica until the engine has
//!   judged its data;
//! - `masteruser`/`masterauth` of the replication user, which the ACL file starts disabled;
//! - the operator's user may run INFO, DBSIZE, REPLICAOF, FAILOVER and ACL GETUSER/SETUSER.

pub mod decide;
pub mod decision;
pub mod execute;
mod mode;
pub mod observe;
pub mod sentinel;
pub mod server;

use crate::client::ValkeyClient;

pub use decide::{Spec, decide, decide_in, health};
pub use decision::{Action, Decision, Health, Reason, ReplicationMode, Target};
pub use mode::{Asked, one_look};
pub use observe::{Observation, Reach};

/// The engine in the replication mode: the one driver every mode runs on.
pub type Engine<C> = crate::engine::Engine<C, ReplicationMode>;

/// A replication engine whose every command is bounded by 2 s, one step a pass.
pub fn engine<C: ValkeyClient>(client: C) -> Engine<C> {
    Engine::new(client, one_look(std::time::Duration::from_secs(2)))
}
