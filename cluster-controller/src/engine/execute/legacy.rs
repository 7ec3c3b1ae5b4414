//! Runs pre-9 slot migrations: read the source's and target's views and the key counts of
//! the slots under way, ask the stateless machine of [`crate::plan::migration::legacy`] for
//! each slot's next step, take those steps side by side, and read again. Stopping anywhere
//! (the pass budget, an error, the process killed) leaves a state the machine resumes from.
//!
//! The slots advance in lockstep so that one read of each view serves every slot under way:
//! CLUSTER NODES is by far the most expensive read, and a per-slot loop would send it a few
//! times per step of every slot.

use std::collections::BTreeMap;

use futures::future::join_all;
use redis::Value;
use tokio::time::Instant;

use crate::client::{ClientError, ValkeyClient};
use crate::plan::migration::command::Direction;
use crate::plan::migration::legacy::{Blocked, Observed, Step, next_step};
use crate::valkey::cluster_nodes::{ClusterNodes, NodeId};
use crate::valkey::commands;
use crate::valkey::slots::Slot;
use crate::valkey::value;

use super::config::ExecuteConfig;
use super::reply::{cluster_nodes_of, count, expect_ok, parse_error, unexpected};
use crate::engine::decision::{LegacyMigration, NodeRef};
use crate::engine::error::EngineError;
use crate::engine::mode::ActionOutcome;

/// More rounds than any batch needs (the key batches of a slot with millions of keys aside);
/// reaching it means the views keep contradicting the machine.
const MAX_ROUNDS: usize = 100_000;

/// Runs `m` and the moves it carries along (`m.also`) side by side, each between its own pair:
/// done when every one is, blocked when one is (the others went as far as they could), the
/// first error otherwise.
pub(super) async fn run(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    config: &ExecuteConfig,
) -> Result<ActionOutcome, EngineError> {
    let outcomes = join_all(
        std::iter::once(m)
            .chain(&m.also)
            .map(|pair| run_pair(client, pair, config)),
    )
    .await;
    let mut blocked = Vec::new();
    let mut progress = Vec::new();
    for outcome in outcomes {
        match outcome? {
            ActionOutcome::Blocked(why) => blocked.push(why),
            ActionOutcome::Progress(what) => progress.push(what),
            ActionOutcome::Done | ActionOutcome::Delegated => {}
        }
    }
    Ok(if !blocked.is_empty() {
        ActionOutcome::Blocked(blocked.join("; "))
    } else if !progress.is_empty() {
        ActionOutcome::Progress(progress.join("; "))
    } else {
        ActionOutcome::Done
    })
}

/// One pair's slots, as many as the pass's budget allows.
async fn run_pair(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    config: &ExecuteConfig,
) -> Result<ActionOutcome, EngineError> {
    let started = Instant::now();
    let total = m.slots.count();
    let mut queue = m.slots.iter();
    let mut active: Vec<Slot> = Vec::new();
    let mut finished = 0;
    for _ in 0..MAX_ROUNDS {
        // No new slot starts once the budget is spent; those under way stop where they are.
        let in_time = started.elapsed() < config.pass_budget;
        if in_time {
            while active.len() < config.parallel_slots.max(1) {
                match queue.next() {
                    Some(slot) => active.push(slot),
                    None => break,
                }
            }
        }
        if active.is_empty() || !in_time {
            break;
        }
        let steps = round(client, m, &active, config).await?;
        let mut work = Vec::new();
        for (slot, step) in steps {
            match step {
                Step::Done | Step::RolledBack => {
                    finished += 1;
                    active.retain(|s| *s != slot);
                }
                Step::Blocked(blocked) => {
                    return Ok(ActionOutcome::Blocked(format!(
                        "slot {slot} from {} to {}: {}",
                        m.source.member,
                        m.target.member,
                        describe(&blocked, m)
                    )));
                }
                step => work.push(take(client, m, slot, step, config)),
            }
        }
        for done in join_all(work).await {
            done?;
        }
    }
    Ok(if finished == total {
        ActionOutcome::Done
    } else {
        ActionOutcome::Progress(format!(
            "{finished} of {total} slots from {} to {} done this pass",
            m.source.member, m.target.member
        ))
    })
}

/// One read of the source and target (and, once some slot's keys are all across, of the other
/// primaries), and each active slot's next step.
async fn round(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    active: &[Slot],
    config: &ExecuteConfig,
) -> Result<Vec<(Slot, Step)>, EngineError> {
    let counts = |node: &NodeRef| {
        let addr = node.address;
        join_all(active.iter().map(move |slot| async move {
            let reply = client
                .command(
                    addr,
                    &commands::cluster_countkeysinslot(*slot),
                    config.command_timeout,
                )
                .await?;
            count(&reply, "CLUSTER COUNTKEYSINSLOT")
        }))
    };
    let (source_view, target_view, in_source, in_target) = futures::join!(
        view(client, &m.source, config),
        view(client, &m.target, config),
        counts(&m.source),
        counts(&m.target),
    );
    let (source_view, target_view) = (source_view?, target_view?);
    let mut observed: Vec<Observed> = Vec::with_capacity(active.len());
    for ((slot, keys_in_source), keys_in_target) in active.iter().zip(in_source).zip(in_target) {
        observed.push(Observed {
            slot: *slot,
            source: m.source.id.clone(),
            target: m.target.id.clone(),
            source_view: source_view.slot_view(*slot),
            target_view: target_view.slot_view(*slot),
            keys_in_source: keys_in_source?,
            keys_in_target: keys_in_target?,
            others: Vec::new(),
            intent: m.intent,
        });
    }
    let mut steps: Vec<(Slot, Step)> = observed.iter().map(|o| (o.slot, next_step(o))).collect();
    // The other primaries matter only once a slot's keys are all across: they are told with
    // the hand-off, and the slot is done once they all see its new owner.
    let tells_others = |step: &Step| matches!(step, Step::Done | Step::HandOff { .. });
    if steps.iter().any(|(_, step)| tells_others(step)) && !m.others.is_empty() {
        let views = join_all(m.others.iter().map(|o| view(client, o, config))).await;
        let others: Vec<(NodeId, ClusterNodes)> = m
            .others
            .iter()
            .zip(views)
            .map(|(other, view)| view.map(|v| (other.id.clone(), v)))
            .collect::<Result<_, _>>()?;
        let owners: BTreeMap<Slot, Vec<(NodeId, Option<NodeId>)>> = steps
            .iter()
            .filter(|(_, step)| tells_others(step))
            .map(|(slot, _)| {
                let seen = others
                    .iter()
                    .map(|(id, view)| (id.clone(), view.slot_view(*slot).owner))
                    .collect();
                (*slot, seen)
            })
            .collect();
        for (o, (_, step)) in observed.iter_mut().zip(steps.iter_mut()) {
            if let Some(seen) = owners.get(&o.slot) {
                o.others = seen.clone();
                *step = next_step(o);
            }
        }
    }
    Ok(steps)
}

/// Sends the command of one step.
async fn take(
    client: &impl ValkeyClient,
    m: &LegacyMigration,
    slot: Slot,
    step: Step,
    config: &ExecuteConfig,
) -> Result<(), EngineError> {
    match step {
        Step::SetSlot { .. } | Step::Open { .. } | Step::HandOff { .. } => {
            // A phase only once the one before it was answered OK; stopped half-way, the next
            // look sees how far the step got.
            for phase in step.set_slots() {
                let sent = phase.iter().map(|(node, action)| async move {
                    let on = participant(m, node, slot)?;
                    let reply = client
                        .command(
                            on.address,
                            &commands::cluster_setslot(slot, action),
                            config.command_timeout,
                        )
                        .await?;
                    expect_ok(&reply, "CLUSTER SETSLOT")
                });
                for answered in join_all(sent).await {
                    answered?;
                }
            }
            Ok(())
        }
        Step::MigrateKeys { from, to } => {
            let direction = if from == m.source.id {
                Direction::Forward
            } else {
                Direction::Back
            };
            let from = participant(m, &from, slot)?;
            let to = participant(m, &to, slot)?;
            migrate_batch(client, from, to, slot, direction, config).await
        }
        Step::Done | Step::RolledBack | Step::Blocked(_) => Ok(()),
    }
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

async fn view(
    client: &impl ValkeyClient,
    node: &NodeRef,
    config: &ExecuteConfig,
) -> Result<ClusterNodes, EngineError> {
    let nodes = cluster_nodes_of(client, node, config.command_timeout).await?;
    // The address must still be the node the action was decided for.
    match nodes.myself() {
        Ok(me) if me.id == node.id => Ok(nodes),
        Ok(me) => Err(EngineError::UnexpectedReply {
            command: "CLUSTER NODES".into(),
            reply: format!("{} is now node {}, not {}", node.address, me.id, node.id),
        }),
        Err(source) => Err(parse_error(node, source)),
    }
}

/// `CLUSTER GETKEYSINSLOT` on `from`, then one MIGRATE of those keys to `to`.
async fn migrate_batch(
    client: &impl ValkeyClient,
    from: &NodeRef,
    to: &NodeRef,
    slot: Slot,
    direction: Direction,
    config: &ExecuteConfig,
) -> Result<(), EngineError> {
    let reply = client
        .command(
            from.address,
            &commands::cluster_getkeysinslot(slot, config.keys_per_migrate),
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
    let migrate = commands::migrate(
        to.address,
        config.migrate_timeout,
        direction.replace(),
        config.migrate_auth.as_ref(),
        &keys,
    );
    // The command may wait for the destination for up to its own timeout.
    let reply = client
        .command(
            from.address,
            &migrate,
            config.command_timeout + config.migrate_timeout,
        )
        .await
        .map_err(|error| match error {
            ClientError::Server { ref message, .. } if message.contains("BUSYKEY") => {
                EngineError::UnexpectedReply {
                    command: format!("MIGRATE back from {} to {}", from.member, to.member),
                    reply: format!(
                        "a key of slot {slot} is on both (BUSYKEY): {} served the slot as its \
                         own meanwhile, so its copy is the one clients wrote last, and the \
                         operator does not overwrite it. Remove the stale copy from {} \
                         (CLUSTER GETKEYSINSLOT {slot}, then DEL) and the move is undone",
                        to.member, from.member
                    ),
                }
            }
            other => other.into(),
        })?;
    match value::text(&reply).as_deref() {
        Some("OK" | "NOKEY") => Ok(()),
        _ => Err(unexpected("MIGRATE", &reply)),
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
