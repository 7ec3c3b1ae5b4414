//! Carrying out a decided action against Valkey. Each action is one command, except a legacy
//! migration, which runs the per-slot machine for as many slots as fit in the pass's time
//! budget, and a failover, which waits (bounded) until the replica reports it took over.

mod config;
mod legacy;
mod reply;

use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;

use crate::client::ValkeyClient;
use crate::valkey::commands::{self, FailoverMode, SetSlot};

use super::decision::{Action, NodeRef};
use super::error::EngineError;
use super::mode::ActionOutcome;
pub use config::{ExecuteConfig, migrate_auth};
use reply::{cluster_nodes_of, expect_ok, parse_error};

/// Carries out `action`. Kubernetes actions return [`ActionOutcome::Delegated`] untouched.
pub async fn execute(
    client: &impl ValkeyClient,
    action: &Action,
    config: &ExecuteConfig,
) -> Result<ActionOutcome, EngineError> {
    let run = |on: &NodeRef, cmd: Cmd| {
        let addr = on.address;
        async move { client.command(addr, &cmd, config.command_timeout).await }
    };
    match action {
        Action::Meet { on, peer, bus_port } => ok(
            run(on, commands::cluster_meet(*peer, *bus_port)).await?,
            "CLUSTER MEET",
        ),
        Action::AddSlots { on, slots } => ok(
            run(on, commands::cluster_addslotsrange(&slots.ranges())).await?,
            "CLUSTER ADDSLOTSRANGE",
        ),
        Action::Replicate { on, primary_id } => ok(
            run(on, commands::cluster_replicate(primary_id)).await?,
            "CLUSTER REPLICATE",
        ),
        Action::Forget { on, node_id } => {
            match run(on, commands::cluster_forget(node_id)).await {
                // Already forgotten (a previous pass, or gossip of a forget elsewhere).
                Err(e)
                    if e.server_message()
                        .is_some_and(|m| m.contains("Unknown node")) =>
                {
                    Ok(ActionOutcome::Done)
                }
                reply => ok(reply?, "CLUSTER FORGET"),
            }
        }
        Action::MigrateSlots(migration) => legacy::run(client, migration, config).await,
        Action::StartAtomicMigration {
            source,
            target,
            ranges,
            also,
        } => {
            let moves = std::iter::once((ranges.as_slice(), &target.id))
                .chain(also.iter().map(|m| (m.ranges.as_slice(), &m.target.id)));
            ok(
                run(source, commands::cluster_migrateslots(moves)).await?,
                "CLUSTER MIGRATESLOTS",
            )
        }
        Action::CancelMigrations { on } => ok(
            run(on, commands::cluster_cancelslotmigrations_all()).await?,
            "CLUSTER CANCELSLOTMIGRATIONS",
        ),
        Action::ClearSlot { on, slots } => {
            for slot in slots.iter() {
                let cmd = commands::cluster_setslot(slot, &SetSlot::Stable);
                ok(run(on, cmd).await?, "CLUSTER SETSLOT")?;
            }
            Ok(ActionOutcome::Done)
        }
        Action::Failover { on_replica, .. } => failover(client, on_replica, None, config).await,
        Action::AdmitReplication { on, also, user } => {
            let admissions = std::iter::once(on)
                .chain(also)
                .map(|node| admit(client, node.address, user, config.command_timeout));
            for admitted in futures::future::join_all(admissions).await {
                admitted?;
            }
            Ok(ActionOutcome::Done)
        }
        Action::ForcedFailover { on_replica, .. } => {
            failover(client, on_replica, Some(FailoverMode::Force), config).await
        }
        Action::Takeover { on_replica, .. } => {
            failover(client, on_replica, Some(FailoverMode::Takeover), config).await
        }
        Action::AllowRestart { .. } | Action::DeleteMember { .. } => Ok(ActionOutcome::Delegated),
    }
}

/// Admits the server at `address`: every user it holds is switched on (and one fenced by its
/// rights given them), the fenced replication user `fence_user` last. The users a server starts with off are the fenced ones (the replication
/// user, and the clients of a server that keeps no data): the replication user being on is what
/// says the server was admitted, so it goes last, and an admission cut short is taken again.
/// Every mode's engine admits its servers this way.
pub async fn admit(
    client: &impl ValkeyClient,
    address: std::net::SocketAddr,
    fence_user: &str,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let reply = client
        .command(address, &commands::acl_users(), timeout)
        .await?;
    let users: Vec<String> = match &reply {
        Value::Array(items) | Value::Set(items) => items
            .iter()
            .filter_map(crate::valkey::value::text)
            .collect(),
        other => {
            return Err(EngineError::UnexpectedReply {
                command: "ACL USERS".into(),
                reply: crate::valkey::value::describe(other),
            });
        }
    };
    let others = users.iter().filter(|u| u.as_str() != fence_user);
    for user in others.map(String::as_str).chain([fence_user]) {
        // A user fenced by its rights (Sentinel's) gains them now, on its open connections too.
        let rights = crate::access::rights::admitted_rules(user).unwrap_or_default();
        let cmd = commands::acl_setuser(user, ["on"].into_iter().chain(rights.split_whitespace()));
        ok(client.command(address, &cmd, timeout).await?, "ACL SETUSER")?;
    }
    Ok(ActionOutcome::Done)
}

fn ok(reply: Value, command: &str) -> Result<ActionOutcome, EngineError> {
    expect_ok(&reply, command).map(|()| ActionOutcome::Done)
}

/// `CLUSTER FAILOVER` on the replica, then polls its own CLUSTER NODES line until it is a
/// primary. Not seeing it within the wait is not an error: the next pass observes afresh.
async fn failover(
    client: &impl ValkeyClient,
    replica: &NodeRef,
    mode: Option<FailoverMode>,
    config: &ExecuteConfig,
) -> Result<ActionOutcome, EngineError> {
    ok(
        client
            .command(
                replica.address,
                &commands::cluster_failover(mode),
                config.command_timeout,
            )
            .await?,
        "CLUSTER FAILOVER",
    )?;
    let deadline = Instant::now() + config.failover_wait;
    loop {
        let view = cluster_nodes_of(client, replica, config.command_timeout).await?;
        let me = view
            .myself()
            .map_err(|source| parse_error(replica, source))?;
        if me.is_primary() && !me.slots.is_empty() {
            return Ok(ActionOutcome::Done);
        }
        if Instant::now() >= deadline {
            return Ok(ActionOutcome::Progress(format!(
                "{} has not taken over within {:?}",
                replica.member, config.failover_wait
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
