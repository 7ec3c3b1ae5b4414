//! The replication mode on the engine's driver ([`crate::engine::Engine`]): a ValkeyReplication's
//! vocabulary ([`super::decision`]), its observation (every member's INFO and DBSIZE, and with
//! Sentinel on every Sentinel's answer), its rules ([`super::decide`]) and its executor.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::client::ValkeyClient;
use crate::engine::mode::Verdict;
use crate::engine::{
    ActionOutcome, Carried, Carrier, EngineConfig, EngineError, ExecuteConfig, Member, Mode, Scope,
};

use super::decide::{Spec, decide_in, health};
use super::decision::{Action, Health, Reason, ReplicationMode};
use super::observe::{Observation, observe};

/// What the Kubernetes side asks of a replication pass.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    pub spec: Spec,
    /// The primary the last pass recorded (`status.primary`, or this controller's own last
    /// write of it).
    pub recorded_primary: Option<String>,
    /// With Sentinel on, its Sentinels by node name and address (none with Sentinel off).
    pub sentinels: Vec<(String, SocketAddr)>,
}

/// How a replication pass runs: one look and at most one step (each step changes who follows
/// whom, and the Kubernetes side points the Services and the status at the result between two
/// steps), every command bounded by `timeout`.
pub fn one_look(timeout: Duration) -> EngineConfig {
    EngineConfig {
        observe_timeout: timeout,
        execute: ExecuteConfig {
            command_timeout: timeout,
            ..ExecuteConfig::default()
        },
        fence_user: None,
        step_budget: Duration::ZERO,
        settle_budget: Duration::ZERO,
        settle_poll: Duration::ZERO,
        job_watch_budget: Duration::ZERO,
        job_poll: Duration::ZERO,
    }
}

impl Mode for ReplicationMode {
    type Action = Action;
    type Reason = Reason;
    type Steady = ();
    type Health = Health;
    type Desired = Asked;
    type Observation = Observation;

    const STEADY: Reason = Reason::Healthy;

    fn steady_message(_: &()) -> String {
        String::new()
    }

    async fn observe<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        asked: &Asked,
        members: &[Member],
    ) -> Observation {
        let timeout = config.observe_timeout;
        let mut observed =
            observe(client, members, timeout, asked.spec.fence_user.as_deref()).await;
        if let Some(watch) = &asked.spec.sentinel {
            observed.sentinels =
                super::sentinel::observe(client, &asked.sentinels, &watch.master_name, timeout)
                    .await;
        }
        observed
    }

    fn judge(
        scope: Scope,
        asked: &Asked,
        members: &[Member],
        observed: &Observation,
    ) -> Verdict<Self> {
        let recorded = asked.recorded_primary.as_deref();
        Verdict {
            decision: decide_in(scope, &asked.spec, members, recorded, observed),
            bindings: BTreeMap::new(),
            health: health(&asked.spec, members, recorded, observed),
        }
    }

    async fn execute<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        action: &Action,
    ) -> Result<ActionOutcome, EngineError> {
        super::execute::execute(client, action, config.execute.command_timeout).await
    }

    /// None: a replication pass takes one step (see [`one_look`]).
    fn settles_soon(_: Reason) -> bool {
        false
    }
}

impl Carried for Action {
    fn carrier(&self) -> Carrier {
        match self {
            // The new primary is recorded before the command that makes it one: a controller
            // that dies between the two finds the member it chose, never an unrecorded primary
            // it might take for an old one.
            Action::Promote { .. } => Carrier::ValkeyOnceRecorded,
            Action::AllowRestart { .. } | Action::DeleteMember { .. } => Carrier::Kubernetes,
            _ => Carrier::Valkey,
        }
    }
}
