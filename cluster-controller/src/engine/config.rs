//! How the engine runs a pass: timeouts and budgets, in every mode.

use std::time::Duration;

use crate::client::Credentials;

use super::execute::{ExecuteConfig, migrate_auth};

/// How a pass runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Timeout of each command of the observation.
    pub observe_timeout: Duration,
    pub execute: ExecuteConfig,
    /// The replication user, when the ACL file starts it disabled: a node admits replicas only
    /// once the engine has seen it settled in the cluster (see `decide`'s fencing rule).
    pub fence_user: Option<String>,
    /// How long one pass may go on taking steps (see [`Engine::pass`]) once it has acted.
    pub step_budget: Duration,
    /// How long one pass may watch a short wait settle when it has not acted.
    pub settle_budget: Duration,
    /// How often a pass looks again while a short wait settles.
    pub settle_poll: Duration,
    /// How long one pass may watch slot migration jobs that Valkey runs by itself (Valkey 9)
    /// when it has not acted.
    pub job_watch_budget: Duration,
    /// How often a pass looks again while it watches such jobs, at the least: a job of a
    /// second ends unseen for up to this long, and the step after it (the next job, a leaving
    /// shard's removal) waits as long. Never sooner than the look before took.
    pub job_poll: Duration,
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
            step_budget: Duration::from_secs(4),
            settle_budget: Duration::from_secs(1),
            settle_poll: Duration::from_millis(200),
            job_watch_budget: Duration::from_secs(5),
            job_poll: Duration::from_millis(50),
        }
    }
}
