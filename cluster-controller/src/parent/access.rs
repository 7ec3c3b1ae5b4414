//! The access stage: every member's running server brought in step with the cluster's users (a
//! user added, changed or removed, a password rotating, authentication turned on or off) without
//! a restart, before the engine looks at them. The work is [`crate::access`]'s; this stage picks
//! the servers, the logins to fall back on, and says what a person must know.

use std::time::Duration;

use crate::access::{Bootstrap, SyncReport, Target};
use crate::client::{RedisClient, RedisClientConfig};
use crate::engine::Member;

use super::conditions::Problem;
use super::context::ParentMemory;
use super::secrets::Auth;
use valkey_api::v1alpha1::StatusReason;

/// Time each command of the sync may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Brings every member that has an address in step with `auth.users`, through `operator` (the
/// engine's client); returns what a person must know, if anything. `trust` is the CA of a TLS
/// parent's servers: the fallback logins verify them against it too.
pub async fn sync(
    memory: &ParentMemory,
    operator: &RedisClient,
    auth: &Auth,
    members: &[Member],
    trust: Option<&plumbing::valkey_tls::Trust>,
) -> Option<Problem> {
    let targets: Vec<Target> = members
        .iter()
        .filter_map(|m| {
            Some(Target {
                member: m.name.clone(),
                address: m.address?,
            })
        })
        .collect();
    let bootstrap_clients: Vec<RedisClient> = auth
        .bootstrap
        .iter()
        .map(|credentials| {
            RedisClient::new(RedisClientConfig {
                credentials: credentials.clone(),
                trust: trust.cloned(),
                ..RedisClientConfig::default()
            })
        })
        .collect();
    let bootstrap = Bootstrap {
        clients: &bootstrap_clients,
        replication_password: &auth.replication_password,
    };
    let report = memory
        .access
        .sync(operator, &bootstrap, &targets, &auth.users, COMMAND_TIMEOUT)
        .await;
    if !report.bootstrapped.is_empty() {
        tracing::info!(
            members = ?report.bootstrapped,
            "gave the operator's users to servers that did not have them"
        );
    }
    for (member, why) in &report.refused {
        tracing::warn!(member = %member, "{member} refuses the operator's users: {why}");
    }
    problem(&report)
}

/// A member that refuses the users, as the cluster's problem.
fn problem(report: &SyncReport) -> Option<Problem> {
    let (member, why) = report.refused.first()?;
    let reason = if why.contains("locked out") {
        StatusReason::OperatorLockedOut
    } else {
        StatusReason::UsersNotApplied
    };
    Some(Problem {
        reason,
        message: format!("ValkeyNode {member}: {why}."),
    })
}
