//! Runs pre-9 slot migrations: for each slot, read the source's and target's views and key
//! counts, ask the stateless machine of [`crate::plan::migration::legacy`] for the next
//! step, take it, and read again. Stopping anywhere (the pass budget, an error, the process
//! killed) leaves a state the machine resumes from.

use futures::future::{self, join_all};
use futures::stream::{self, StreamExt};
use redis::Value;
use tokio::time::Instant;

use crate::client::ValkeyClient;
use crate::plan::migration::command::{
    countkeysinslot_args, getkeysinslot_args, migrate_args, to_cmd,
};
use crate::plan::migration::legacy::{Blocked, Observed, Step, next_step};
use crate::plan::slots::Slot;
use crate::valkey::cluster_nodes::{self, ClusterNodes, NodeId};
use crate::valkey::value;

use super::decision::{LegacyMigration, NodeRef};
use super::error::EngineError;
use super::execute::{ExecuteConfig, Outcome};

/// More steps than any slot needs (the key batches of a slot with millions of keys aside);
/// reaching it means the views keep contradicting the machine.
const MAX_STEPS_PER_SLOT: usize = 100_000;

pub(super) async fn run(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    config: &ExecuteConfig,
) -> Result<Outcome, EngineError> {
    let started = Instant::now();
    let total = m.slots.count();
    let budget = config.pass_budget;
    // Each slot's machine waits on round trips far more than on the servers, so several
    // slots run side by side; they share nothing but the nodes. No new slot starts once the
    // budget is spent; the ones under way stop at their next step.
    let mut ends = stream::iter(m.slots.iter())
        .take_while(|_| future::ready(started.elapsed() < budget))
        .map(|slot| async move { (slot, run_slot(client, m, slot, config, started).await) })
        .buffer_unordered(config.parallel_slots.max(1));
    let mut finished = 0;
    while let Some((slot, end)) = ends.next().await {
        match end? {
            SlotEnd::Finished => finished += 1,
            SlotEnd::OutOfTime => {}
            SlotEnd::Blocked(why) => {
                return Ok(Outcome::Blocked(format!(
                    "slot {slot} from {} to {}: {why}",
                    m.source.member, m.target.member
                )));
            }
        }
    }
    Ok(if finished == total {
        Outcome::Done
    } else {
        Outcome::Progress(format!(
            "{finished} of {total} slots from {} to {} done this pass",
            m.source.member, m.target.member
        ))
    })
}

enum SlotEnd {
    Finished,
    OutOfTime,
    Blocked(String),
}

async fn run_slot(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    slot: Slot,
    config: &ExecuteConfig,
    started: Instant,
) -> Result<SlotEnd, EngineError> {
    // The other primaries matter only at the very end; reading them on every step would
    // triple the cost of a slot.
    let mut with_others = false;
    for _ in 0..MAX_STEPS_PER_SLOT {
        let mut observed = observe_slot(client, m, slot, with_others, config).await?;
        let mut step = next_step(&observed);
        if step == Step::Done && !with_others {
            with_others = true;
            observed = observe_slot(client, m, slot, true, config).await?;
            step = next_step(&observed);
        }
        match step {
            Step::Done | Step::RolledBack => return Ok(SlotEnd::Finished),
            Step::Blocked(blocked) => return Ok(SlotEnd::Blocked(describe(&blocked, m))),
            Step::SetSlot { node, action } => {
                let on = participant(m, &node, slot)?;
                let reply = client
                    .command(
                        on.address,
                        &to_cmd(&action.args(slot)),
                        config.command_timeout,
                    )
                    .await?;
                expect_ok(&reply, "CLUSTER SETSLOT")?;
            }
            Step::MigrateKeys { from, to } => {
                let from = participant(m, &from, slot)?;
                let to = participant(m, &to, slot)?;
                migrate_batch(client, from, to, slot, config).await?;
            }
        }
        if started.elapsed() >= config.pass_budget {
            return Ok(SlotEnd::OutOfTime);
        }
    }
    Err(EngineError::Runaway {
        slot,
        steps: MAX_STEPS_PER_SLOT,
    })
}

fn participant<'m>(
    m: &'m LegacyMigration,
    id: &NodeId,
    slot: Slot,
) -> Result<&'m NodeRef, EngineError> {
    std::iter::once(&m.source)
        .chain(std::iter::once(&m.target))
        .chain(&m.others)
        .find(|n| &n.id == id)
        .ok_or_else(|| EngineError::UnknownParticipant {
            slot,
            node: id.to_string(),
        })
}

async fn observe_slot(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    slot: Slot,
    with_others: bool,
    config: &ExecuteConfig,
) -> Result<Observed, EngineError> {
    let count = to_cmd(&countkeysinslot_args(slot));
    let (source_view, target_view, keys_in_source, keys_in_target) = futures::join!(
        view(client, &m.source, config),
        view(client, &m.target, config),
        client.command(m.source.address, &count, config.command_timeout),
        client.command(m.target.address, &count, config.command_timeout),
    );
    let mut others = Vec::new();
    if with_others {
        let views = join_all(m.others.iter().map(|o| view(client, o, config))).await;
        for (other, nodes) in m.others.iter().zip(views) {
            others.push((other.id.clone(), nodes?.slot_view(slot).owner));
        }
    }
    Ok(Observed {
        slot,
        source: m.source.id.clone(),
        target: m.target.id.clone(),
        source_view: source_view?.slot_view(slot),
        target_view: target_view?.slot_view(slot),
        keys_in_source: count_of(&keys_in_source?, "CLUSTER COUNTKEYSINSLOT")?,
        keys_in_target: count_of(&keys_in_target?, "CLUSTER COUNTKEYSINSLOT")?,
        others,
        intent: m.intent,
    })
}

async fn view(
    client: &impl ValkeyClient,
    node: &NodeRef,
    config: &ExecuteConfig,
) -> Result<ClusterNodes, EngineError> {
    let cmd = redis::cmd("CLUSTER").arg("NODES").clone();
    let reply = client
        .command(node.address, &cmd, config.command_timeout)
        .await?;
    let text = value::text(&reply).ok_or_else(|| unexpected("CLUSTER NODES", &reply))?;
    let nodes = cluster_nodes::parse(&text).map_err(|source| EngineError::Parse {
        context: format!("CLUSTER NODES of {}", node.member),
        source,
    })?;
    // The address must still be the node the action was decided for.
    match nodes.myself() {
        Ok(me) if me.id == node.id => Ok(nodes),
        Ok(me) => Err(EngineError::UnexpectedReply {
            command: "CLUSTER NODES".into(),
            reply: format!("{} is now node {}, not {}", node.address, me.id, node.id),
        }),
        Err(source) => Err(EngineError::Parse {
            context: format!("CLUSTER NODES of {}", node.member),
            source,
        }),
    }
}

/// `CLUSTER GETKEYSINSLOT` on `from`, then one MIGRATE of those keys to `to`.
async fn migrate_batch(
    client: &impl ValkeyClient,
    from: &NodeRef,
    to: &NodeRef,
    slot: Slot,
    config: &ExecuteConfig,
) -> Result<(), EngineError> {
    let reply = client
        .command(
            from.address,
            &to_cmd(&getkeysinslot_args(slot, config.keys_per_migrate)),
            config.command_timeout,
        )
        .await?;
    let keys: Vec<Vec<u8>> = value::list(&reply)
        .ok_or_else(|| unexpected("CLUSTER GETKEYSINSLOT", &reply))?
        .iter()
        .map(|key| match key {
            Value::BulkString(bytes) => Ok(bytes.clone()),
            other => Err(unexpected("CLUSTER GETKEYSINSLOT", other)),
        })
        .collect::<Result<_, _>>()?;
    if keys.is_empty() {
        return Ok(());
    }
    let timeout_ms = u64::try_from(config.migrate_timeout.as_millis()).unwrap_or(u64::MAX);
    let args = migrate_args(
        &to.address.ip().to_string(),
        to.address.port(),
        timeout_ms,
        config.migrate_auth.as_ref(),
        &keys,
    );
    // The command may wait for the destination for up to its own timeout.
    let reply = client
        .command(
            from.address,
            &to_cmd(&args),
            config.command_timeout + config.migrate_timeout,
        )
        .await?;
    match value::text(&reply).as_deref() {
        Some("OK" | "NOKEY") => Ok(()),
        _ => Err(unexpected("MIGRATE", &reply)),
    }
}

fn count_of(reply: &Value, command: &str) -> Result<u64, EngineError> {
    value::int(reply)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| unexpected(command, reply))
}

fn expect_ok(reply: &Value, command: &str) -> Result<(), EngineError> {
    match value::text(reply).as_deref() {
        Some("OK") => Ok(()),
        _ => Err(unexpected(command, reply)),
    }
}

fn unexpected(command: &str, reply: &Value) -> EngineError {
    EngineError::UnexpectedReply {
        command: command.to_owned(),
        reply: value::describe(reply),
    }
}

fn describe(blocked: &Blocked, m: &LegacyMigration) -> String {
    let name = |id: &NodeId| {
        std::iter::once(&m.source)
            .chain(std::iter::once(&m.target))
            .chain(&m.others)
            .find(|n| &n.id == id)
            .map_or_else(|| id.to_string(), |n| n.member.clone())
    };
    match blocked {
        Blocked::Unassigned => "nobody serves the slot".into(),
        Blocked::OwnedElsewhere { seen_by, owner } => {
            format!("{} sees it served by {}", name(seen_by), name(owner))
        }
        Blocked::ForeignMigration { node, peer } => {
            format!("{} has it open towards {}", name(node), name(peer))
        }
        Blocked::OrphanedKeys { node, keys } => format!(
            "{} holds {keys} keys of it that this migration did not put there",
            name(node)
        ),
    }
}
