//! One pass of the engine: observe, decide, act.

use std::time::Duration;

use crate::client::{Credentials, ValkeyClient};

use super::decide::decide;
use super::decision::Decision;
use super::error::EngineError;
use super::execute::{ExecuteConfig, Outcome, execute};
use super::member::{Desired, Member};
use super::observe::{Observation, observe};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Timeout of each command of the observation.
    pub observe_timeout: Duration,
    pub execute: ExecuteConfig,
}

impl EngineConfig {
    /// Defaults, with MIGRATE authenticating as `credentials`.
    pub fn for_credentials(credentials: &Credentials) -> Self {
        Self {
            observe_timeout: Duration::from_secs(2),
            execute: ExecuteConfig {
                migrate_auth: credentials.migrate_auth(),
                ..ExecuteConfig::default()
            },
        }
    }
}

/// What one pass saw, decided and did.
#[derive(Debug)]
pub struct Pass {
    pub observation: Observation,
    pub decision: Decision,
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
        let observation = observe(&self.client, members, self.config.observe_timeout).await;
        let decision = decide(desired, members, &observation);
        let outcome = match &decision {
            Decision::Act { action, .. } => {
                Some(execute(&self.client, action, &self.config.execute).await)
            }
            _ => None,
        };
        Pass {
            observation,
            decision,
            outcome,
        }
    }
}
