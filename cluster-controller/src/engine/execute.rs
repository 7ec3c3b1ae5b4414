//! Carrying out a decided action against Valkey. Each action is one command, except a legacy
//! migration, which runs the per-slot machine for as many slots as fit in the pass's time
//! budget, and a failover, which waits (bounded) until the replica reports it took over.

use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;

use crate::client::ValkeyClient;
use crate::plan::migration::command::{MigrateAuth, migrateslots_args, to_cmd};
use crate::valkey::{cluster_nodes, value};

use super::decision::{Action, NodeRef};
use super::error::EngineError;
use super::legacy;

/// How actions are carried out.
#[derive(Debug, Clone)]
pub struct ExecuteConfig {
    /// Timeout of ordinary commands.
    pub command_timeout: Duration,
    /// How long one pass may spend moving slots the legacy way before it returns.
    pub pass_budget: Duration,
    /// Keys per MIGRATE.
    pub keys_per_migrate: u32,
    /// How many slots a legacy migration moves side by side.
    pub parallel_slots: usize,
    /// MIGRATE's own timeout (the time the destination may take per batch).
    pub migrate_timeout: Duration,
    /// Credentials MIGRATE passes to the destination.
    pub migrate_auth: Option<MigrateAuth>,
    /// How long to wait for a planned failover to show before returning.
    pub failover_wait: Duration,
}

impl Default for ExecuteConfig {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(5),
            pass_budget: Duration::from_secs(5),
            keys_per_migrate: 100,
            parallel_slots: 64,
            migrate_timeout: Duration::from_secs(5),
            migrate_auth: None,
            failover_wait: Duration::from_secs(10),
        }
    }
}

/// What executing an action achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The command was accepted (or the batch finished).
    Done,
    /// Part of the work is done; the next pass continues.
    Progress(String),
    /// The slot machine cannot go on safely; a person must look.
    Blocked(String),
    /// A Kubernetes action: the caller carries it out.
    Delegated,
}

/// Carries out `action`. Kubernetes actions return [`Outcome::Delegated`] untouched.
pub async fn execute(
    client: &impl ValkeyClient,
    action: &Action,
    config: &ExecuteConfig,
) -> Result<Outcome, EngineError> {
    let run = |on: &NodeRef, cmd: Cmd| {
        let addr = on.address;
        async move { client.command(addr, &cmd, config.command_timeout).await }
    };
    match action {
        Action::Meet { on, peer } => {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("MEET").arg(peer.ip().to_string()).arg(peer.port());
            ok(run(on, cmd).await?, "CLUSTER MEET")
        }
        Action::AddSlots { on, slots } => {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("ADDSLOTSRANGE");
            for range in slots.ranges() {
                cmd.arg(range.start()).arg(range.end());
            }
            ok(run(on, cmd).await?, "CLUSTER ADDSLOTSRANGE")
        }
        Action::Replicate { on, primary_id } => {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("REPLICATE").arg(primary_id.as_str());
            ok(run(on, cmd).await?, "CLUSTER REPLICATE")
        }
        Action::Forget { on, node_id } => {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("FORGET").arg(node_id.as_str());
            match run(on, cmd).await {
                // Already forgotten (a previous pass, or gossip of a forget elsewhere).
                Err(e)
                    if e.server_message()
                        .is_some_and(|m| m.contains("Unknown node")) =>
                {
                    Ok(Outcome::Done)
                }
                reply => ok(reply?, "CLUSTER FORGET"),
            }
        }
        Action::MigrateSlots(migration) => legacy::run(client, migration, config).await,
        Action::StartAtomicMigration {
            source,
            target,
            ranges,
        } => ok(
            run(source, to_cmd(&migrateslots_args(ranges, &target.id))).await?,
            "CLUSTER MIGRATESLOTS",
        ),
        Action::CancelMigrations { on } => {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("CANCELSLOTMIGRATIONS").arg("ALL");
            ok(run(on, cmd).await?, "CLUSTER CANCELSLOTMIGRATIONS")
        }
        Action::ClearSlot { on, slots } => {
            for slot in slots.iter() {
                let mut cmd = redis::cmd("CLUSTER");
                cmd.arg("SETSLOT").arg(slot).arg("STABLE");
                ok(run(on, cmd).await?, "CLUSTER SETSLOT")?;
            }
            Ok(Outcome::Done)
        }
        Action::Failover { on_replica, .. } => failover(client, on_replica, None, config).await,
        Action::AdmitReplication { on, user } => {
            let mut cmd = redis::cmd("ACL");
            cmd.arg("SETUSER").arg(user).arg("on");
            ok(
                client
                    .command(on.address, &cmd, config.command_timeout)
                    .await?,
                "ACL SETUSER",
            )
        }
        Action::Takeover { on_replica, .. } => {
            failover(client, on_replica, Some("TAKEOVER"), config).await
        }
        Action::AllowRestart { .. } | Action::DeleteMember { .. } => Ok(Outcome::Delegated),
    }
}

fn ok(reply: Value, command: &str) -> Result<Outcome, EngineError> {
    match value::text(&reply).as_deref() {
        Some("OK") => Ok(Outcome::Done),
        _ => Err(EngineError::UnexpectedReply {
            command: command.to_owned(),
            reply: value::describe(&reply),
        }),
    }
}

/// `CLUSTER FAILOVER` on the replica, then polls its own CLUSTER NODES line until it is a
/// primary. Not seeing it within the wait is not an error: the next pass observes afresh.
async fn failover(
    client: &impl ValkeyClient,
    replica: &NodeRef,
    mode: Option<&str>,
    config: &ExecuteConfig,
) -> Result<Outcome, EngineError> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("FAILOVER");
    if let Some(mode) = mode {
        cmd.arg(mode);
    }
    ok(
        client
            .command(replica.address, &cmd, config.command_timeout)
            .await?,
        "CLUSTER FAILOVER",
    )?;
    let deadline = Instant::now() + config.failover_wait;
    let nodes = redis::cmd("CLUSTER").arg("NODES").clone();
    loop {
        let reply = client
            .command(replica.address, &nodes, config.command_timeout)
            .await?;
        let text = value::text(&reply).ok_or_else(|| EngineError::UnexpectedReply {
            command: "CLUSTER NODES".into(),
            reply: value::describe(&reply),
        })?;
        let view = cluster_nodes::parse(&text).map_err(|source| EngineError::Parse {
            context: format!("CLUSTER NODES of {}", replica.member),
            source,
        })?;
        let me = view.myself().map_err(|source| EngineError::Parse {
            context: format!("CLUSTER NODES of {}", replica.member),
            source,
        })?;
        if me.is_primary() && !me.slots.is_empty() {
            return Ok(Outcome::Done);
        }
        if Instant::now() >= deadline {
            return Ok(Outcome::Progress(format!(
                "{} has not taken over within {:?}",
                replica.member, config.failover_wait
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
