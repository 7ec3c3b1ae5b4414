//! One pass of the engine: observe, decide, act.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::{Credentials, ValkeyClient};
use crate::valkey::cluster_nodes::NodeId;

use super::decide::{bindings, decide, health};
use super::decision::{Decision, Health};
use super::error::EngineError;
use super::execute::{ExecuteConfig, Outcome, execute, migrate_auth};
use super::member::{Desired, Member};
use super::observe::{Observation, observe_fenced};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Timeout of each command of the observation.
    pub observe_timeout: Duration,
    pub execute: ExecuteConfig,
    /// The replication user, when the ACL file starts it disabled: a node admits replicas only
    /// once the engine has seen it settled in the cluster (see `decide`'s fencing rule).
    pub fence_user: Option<String>,
}

impl EngineConfig {
    /// Defaults, with MIGRATE authenticating as `credentials`.
    pub fn for_credentials(credentials: &Credentials) -> Self {
        Self {
            observe_timeout: Duration::from_secs(2),
            execute: ExecuteConfig {
                migrate_auth: migrate_auth(credentials),
                ..ExecuteConfig::default()
            },
            fence_user: None,
        }
    }
}

/// What one pass saw, decided and did.
#[derive(Debug)]
pub struct Pass {
    pub observation: Observation,
    pub decision: Decision,
    /// How the cluster stands, from the same observation (see [`health`]).
    pub health: Option<Health>,
    /// The node each member is bound to from now on (see [`bindings`]): the Kubernetes side
    /// keeps it and passes it back as [`Member::node_id`].
    pub bindings: BTreeMap<String, NodeId>,
    /// The result of executing a Valkey action; `Some(Ok(Outcome::Delegated))` for a
    /// Kubernetes action; `None` when the decision was not to act.
    pub outcome: Option<Result<Outcome, EngineError>>,
}

/// The engine: a client and its settings. Holds no state between passes.
#[derive(Debug, Clone)]
pub struct Engine<C> {
    client: C,
    config: EngineConfig,
}

impl<C: ValkeyClient> Engine<C> {
    pub fn new(client: C, config: EngineConfig) -> Self {
        Self { client, config }
    }

    pub fn client(&self) -> &C {
        &self.client
    }

    /// Observes, decides and, for a Valkey action, acts.
    pub async fn pass(&self, desired: &Desired, members: &[Member]) -> Pass {
        let observation = observe_fenced(
            &self.client,
            members,
            self.config.observe_timeout,
            self.config.fence_user.as_deref(),
        )
        .await;
        let decision = decide(desired, members, &observation);
        let health = health(desired, members, &observation);
        let bindings = bindings(desired, members, &observation);
        let outcome = match &decision {
            Decision::Act {
                action,
                reason,
                message,
                ..
            } => {
                if decision.is_forced() {
                    tracing::warn!(%reason, %action, forced = true, "{message}");
                } else {
                    tracing::info!(%reason, %action, "{message}");
                }
                let outcome = execute(&self.client, action, &self.config.execute).await;
                match &outcome {
                    Err(error) => tracing::warn!(%reason, %action, %error, "action failed"),
                    Ok(Outcome::Blocked(why)) => tracing::warn!(%reason, %action, "{why}"),
                    Ok(Outcome::Progress(what)) => tracing::debug!(%reason, "{what}"),
                    Ok(_) => {}
                }
                Some(outcome)
            }
            other => {
                tracing::debug!(reason = %other.reason(), "{}", other.message());
                None
            }
        };
        Pass {
            observation,
            decision,
            health,
            bindings,
            outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RedisClient;

    fn assert_send<T: Send>(_: &T) {}

    /// Controllers run reconciles on a multi-threaded runtime: a pass must be `Send`.
    #[test]
    fn a_pass_can_run_on_any_thread() {
        let engine = Engine::new(
            RedisClient::new(Default::default()),
            EngineConfig::for_credentials(&Credentials::none()),
        );
        let desired = Desired::new(1, 0);
        let pass = engine.pass(&desired, &[]);
        assert_send(&pass);
    }
}
