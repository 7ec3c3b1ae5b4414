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
pub mod observe;
pub mod sentinel;
pub mod server;

use std::time::Duration;

use crate::client::ValkeyClient;
use crate::engine::{ActionOutcome, EngineError, Member};

pub use decide::{Spec, decide, decide_in, health};
pub use decision::{Action, Decision, Health, Reason, Target};
pub use observe::{Observation, Reach};

/// The engine: a client and its timeouts. Holds no state between passes.
#[derive(Debug, Clone)]
pub struct Engine<C> {
    client: C,
    /// Timeout of each command.
    pub timeout: Duration,
}

impl<C: ValkeyClient> Engine<C> {
    pub fn new(client: C) -> Self {
        Self {
            client,
            timeout: Duration::from_secs(2),
        }
    }

    pub fn client(&self) -> &C {
        &self.client
    }

    /// Reads every member.
    pub async fn observe(&self, members: &[Member], fence_user: Option<&str>) -> Observation {
        observe::observe(&self.client, members, self.timeout, fence_user).await
    }

    /// Reads every Sentinel (node name, address) about `master_name` into `observed`.
    pub async fn observe_sentinels(
        &self,
        observed: &mut Observation,
        sentinels: &[(String, std::net::SocketAddr)],
        master_name: &str,
    ) {
        observed.sentinels =
            sentinel::observe(&self.client, sentinels, master_name, self.timeout).await;
    }

    /// Carries out a Valkey action (a Kubernetes one comes back `Delegated`).
    pub async fn execute(&self, action: &Action) -> Result<ActionOutcome, EngineError> {
        let outcome = execute::execute(&self.client, action, self.timeout).await;
        match &outcome {
            Ok(_) => tracing::info!(%action, "done"),
            Err(error) => tracing::warn!(%action, %error, "failed"),
        }
        outcome
    }
}
