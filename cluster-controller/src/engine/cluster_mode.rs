//! The cluster mode on the engine's driver: a ValkeyCluster's vocabulary ([`super::decision`]),
//! its observation (`CLUSTER NODES`, INFO, the fence), its rules ([`super::decide`]) and its
//! executor ([`super::execute`]).

use crate::client::ValkeyClient;

use super::config::EngineConfig;
use super::decide::judge_in;
use super::decision::{Action, ClusterMode, Health, Reason};
use super::error::EngineError;
use super::execute::execute;
use super::member::{Desired, Member};
use super::mode::{ActionOutcome, Mode, Scope, Verdict};
use super::observe::{Observation, observe_fenced};

impl Mode for ClusterMode {
    type Action = Action;
    type Reason = Reason;
    type Steady = Health;
    /// `None` for a spec no topology can be built from.
    type Health = Option<Health>;
    type Desired = Desired;
    type Observation = Observation;

    const STEADY: Reason = Reason::ClusterHealthy;

    fn steady_message(h: &Health) -> String {
        format!(
            "{}/{} shards ready, {} slots assigned, {}/{} replicas in sync",
            h.ready_shards, h.shards, h.slots_assigned, h.replicas_in_sync, h.replicas_wanted
        )
    }

    async fn observe<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        _desired: &Desired,
        members: &[Member],
    ) -> Observation {
        observe_fenced(
            client,
            members,
            config.observe_timeout,
            config.fence_user.as_deref(),
        )
        .await
    }

    fn judge(
        scope: Scope,
        desired: &Desired,
        members: &[Member],
        observed: &Observation,
    ) -> Verdict<Self> {
        judge_in(scope, desired, members, observed)
    }

    async fn execute<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        action: &Action,
    ) -> Result<ActionOutcome, EngineError> {
        execute(client, action, &config.execute).await
    }

    /// A handshake, gossip spreading a change, a replica's first sync of a small data set,
    /// cluster_state turning ok.
    fn settles_soon(reason: Reason) -> bool {
        matches!(
            reason,
            Reason::Forming
                | Reason::Joining
                | Reason::NodeAddressChanged
                | Reason::Converging
                | Reason::ReplicaSyncing
                | Reason::AttachingReplicas
        )
    }

    /// A running job ends once its keys have moved, and what follows (the next job, a leaving
    /// shard's removal) is then taken at once rather than at the next pass.
    fn watches_job(reason: Reason) -> bool {
        reason == Reason::MigratingSlots
    }

    fn slots_left(health: &Option<Health>) -> Option<usize> {
        health.as_ref().and_then(|h| h.slots_to_move)
    }
}
