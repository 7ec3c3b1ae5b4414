//! Slots: finishing migrations that are open, giving unowned slots an owner, and moving slots
//! so the wanted shards hold them evenly (draining the shards that leave).

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::decision::{Action, AtomicMove, Decision, LegacyMigration, NodeRef, Reason};
use crate::engine::member::Place;
use crate::plan::migration::atomic;
use crate::plan::migration::legacy::Intent;
use crate::plan::rebalance;
use crate::valkey::cluster_info::ClusterState;
use crate::valkey::cluster_nodes::{LinkState, NodeId};
use crate::valkey::slot_migrations::{Operation, SlotMigrationJob};
use crate::valkey::slots::SlotSet;

use super::topology::{Live, Topology};

/// How many unsuccessful atomic migration jobs in a row are retried before giving up.
pub const ATOMIC_MAX_ATTEMPTS: u32 = 3;

/// Migrations already under way: atomic jobs to wait for, legacy slots left open to finish
/// (or roll back when their target is leaving).
pub(super) fn open_migrations(t: &Topology) -> Option<Decision> {
    atomic_jobs(t)
        .or_else(|| legacy_markers(t))
        .or_else(|| replica_markers(t))
}

/// Valkey 8 replicates SETSLOT to replicas, so they carry the markers of their primary; a
/// replica can keep one its primary no longer has (seen when a SETSLOT waiting for the
/// replica's acknowledgement was cut short). A replica refuses SETSLOT itself, but a
/// `SETSLOT STABLE` on its primary, a no-op there, reaches it by replication. Runs once no
/// primary has a slot open.
fn replica_markers(t: &Topology) -> Option<Decision> {
    for replica in t.live.iter().filter(|l| !l.is_primary()) {
        let me = replica.me();
        let marked: SlotSet = me
            .migrating
            .iter()
            .chain(&me.importing)
            .map(|(slot, _)| *slot)
            .fold(SlotSet::new(), |mut acc, slot| {
                acc.insert(slot);
                acc
            });
        if marked.is_empty() {
            continue;
        }
        let Some(primary) = replica.primary_id().and_then(|id| t.by_id(id)) else {
            continue;
        };
        return Some(Decision::act(
            Action::ClearSlot {
                on: primary.node_ref(),
                slots: marked.clone(),
            },
            Reason::MigratingSlots,
            format!(
                "{} still shows slots {marked} open, which its primary {} closed; clearing them \
                 through replication",
                replica.name(),
                primary.name()
            ),
        ));
    }
    None
}

fn atomic_jobs(t: &Topology) -> Option<Decision> {
    let running: Vec<(&Live, &SlotMigrationJob)> = t
        .live
        .iter()
        .flat_map(|node| {
            node.state
                .migrations()
                .iter()
                .filter(|j| !j.state.is_finished())
                .map(move |job| (node, job))
        })
        .collect();
    for (node, job) in &running {
        let target = job.target_node.as_ref().and_then(|id| t.by_id(id));
        if job.operation == Operation::Export
            && target.is_some_and(|target| target.place == Place::LeavingShard)
        {
            return Some(Decision::act(
                Action::CancelMigrations {
                    on: node.node_ref(),
                },
                Reason::MigratingSlots,
                format!(
                    "cancelling the migration of slots {} from {}: its target is leaving",
                    job.slots,
                    node.name()
                ),
            ));
        }
    }
    let (_, job) = running.first()?;
    let name = |id: Option<&NodeId>| {
        id.and_then(|id| t.by_id(id))
            .map_or_else(|| "?".to_owned(), |l| l.name().to_owned())
    };
    Some(Decision::wait(
        Reason::MigratingSlots,
        format!(
            "moving slots {} from {} to {} ({:?})",
            job.slots,
            name(job.source_node.as_ref()),
            name(job.target_node.as_ref()),
            job.state
        ),
    ))
}

fn legacy_markers(t: &Topology) -> Option<Decision> {
    let mut open: BTreeMap<(NodeId, NodeId), SlotSet> = BTreeMap::new();
    for node in t.live.iter().filter(|l| l.is_primary()) {
        let me = node.me();
        for (slot, target) in &me.migrating {
            open.entry((node.id().clone(), target.clone()))
                .or_default()
                .insert(*slot);
        }
        for (slot, source) in &me.importing {
            open.entry((source.clone(), node.id().clone()))
                .or_default()
                .insert(*slot);
        }
    }
    let ((source_id, target_id), slots) = open.into_iter().next()?;
    match (t.by_id(&source_id), t.by_id(&target_id)) {
        (Some(source), Some(target)) => {
            if let Some(wait) = not_ready_to_migrate(source, target) {
                return Some(wait);
            }
            let intent = if target.place == Place::LeavingShard {
                Intent::Abort
            } else {
                Intent::Complete
            };
            let verb = match intent {
                Intent::Complete => "finishing",
                Intent::Abort => "rolling back",
            };
            Some(Decision::act(
                Action::MigrateSlots(LegacyMigration {
                    source: source.node_ref(),
                    target: target.node_ref(),
                    others: other_primaries(t, source, target),
                    slots: slots.clone(),
                    intent,
                }),
                Reason::MigratingSlots,
                format!(
                    "{verb} the migration of slots {slots} from {} to {}",
                    source.name(),
                    target.name()
                ),
            ))
        }
        (source, target) => {
            // One end is no member any more: nothing can move to or from it.
            let (on, gone) = match (source, target) {
                (Some(source), None) => (source, target_id),
                (None, Some(target)) => (target, source_id),
                _ => return None,
            };
            Some(Decision::act(
                Action::ClearSlot {
                    on: on.node_ref(),
                    slots: slots.clone(),
                },
                Reason::MigratingSlots,
                format!(
                    "slots {slots} on {} were open towards node {gone}, which is gone; closing \
                     them",
                    on.name()
                ),
            ))
        }
    }
}

/// A node refuses keys (`CLUSTERDOWN`) until it considers the cluster healthy, which a node
/// that just joined does only a moment after it learned every slot's owner.
fn not_ready_to_migrate(source: &Live, target: &Live) -> Option<Decision> {
    // Only an atomic job (Valkey 9) moves everything it was given in one hand-over; a legacy
    // move hands slots over batch by batch, and would stop halfway, markers open, once the
    // target serving some of them counts as joined.
    let atomic =
        source.state.supports_atomic_migration() && target.state.supports_atomic_migration();
    [source, target]
        .into_iter()
        .filter(|n| {
            !(atomic && n.id() == target.id() && joined_and_waiting_out_its_rejoin_delay(n))
        })
        .find(|n| n.state.cluster_info().state != ClusterState::Ok)
        .map(|n| {
            Decision::wait(
                Reason::Converging,
                format!(
                    "waiting for {} to report cluster_state:ok before moving slots",
                    n.name()
                ),
            )
        })
}

/// A primary that serves no slot yet, sees every slot served and every node that serves slots
/// healthy and connected: a node that just joined, whose `cluster_state` Valkey holds at fail
/// for its rejoin delay (up to 5 s after it last counted itself in a minority, which before it
/// knew the cluster it did). It is no minority, so slots may move to it meanwhile; a node
/// that is cut off from the cluster shows failing or disconnected peers and is waited for.
fn joined_and_waiting_out_its_rejoin_delay(node: &Live) -> bool {
    let view = node.view();
    node.is_primary()
        && node.slots().is_empty()
        && view.assigned_slots().complement().is_empty()
        && view
            .nodes()
            .iter()
            .filter(|n| n.is_primary() && !n.slots.is_empty())
            .all(|n| n.is_healthy() && n.link == LinkState::Connected)
}

fn other_primaries(t: &Topology, source: &Live, target: &Live) -> Vec<NodeRef> {
    t.live
        .iter()
        .filter(|l| l.is_primary() && l.id() != source.id() && l.id() != target.id())
        .map(Live::node_ref)
        .collect()
}

/// Every slot has exactly one owner: claims must not overlap, views must agree, and slots
/// nobody owns are added to a shard (all of them at formation, the lost ones later).
pub(super) fn coverage(t: &Topology) -> Option<Decision> {
    let claimers: Vec<&Live> = t
        .live
        .iter()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
        .collect();
    if let Some(wait) = overlapping_claims(&claimers) {
        return Some(wait);
    }
    let claimed = t.claimed();
    let assigned = t.assigned_anywhere();
    let unclaimed = assigned.difference(&claimed);
    if !unclaimed.is_empty() {
        return Some(Decision::wait(
            Reason::Converging,
            format!("slots {unclaimed} are assigned in some views to nodes that do not serve them"),
        ));
    }
    let unassigned = assigned.complement();
    if unassigned.is_empty() {
        return None;
    }
    // Slots can only lose data once data was written; a cluster without a single key is
    // still being formed (perhaps by an engine that was stopped half-way), unless it had formed
    // before and every slot lost its owner (every node came back empty).
    // A restore forms with keys: its first members loaded the backup's snapshots. Not gated on
    // `formed`: a restored server claims the slots of its keys by itself when it loads them
    // (Valkey's verifyClusterConfigWithData), so the cluster looks formed before the rest of its
    // slots are assigned; the parent drops `restore` once every slot has been served.
    if let Some(shards) = t.desired.restore.as_ref() {
        return restored_slots(t, shards, &unassigned);
    }
    let forming =
        t.live.iter().all(|l| l.state.keys() == 0) && !(t.desired.formed && assigned.is_empty());
    let permit = t.desired.lost_slots.permits(&unassigned);
    if !forming && permit.is_none() {
        return Some(super::failure::lost_slots(
            &unassigned,
            &format!("slots {unassigned} have no owner"),
        ));
    }
    let plan = match rebalance::plan(&by_shard(t), &target_shards(t)) {
        Ok(plan) => plan,
        Err(e) => return Some(Decision::blocked(Reason::SlotsConflict, e.to_string())),
    };
    let (shard, slots) = plan.assign.into_iter().next()?;
    let primary = match t.shard_primary(shard) {
        Ok(Some(primary)) => primary,
        Ok(None) => {
            return Some(Decision::wait(
                Reason::WaitingForNodes,
                format!("shard {shard} has no live primary to take slots {slots}"),
            ));
        }
        Err((a, b)) => return Some(shard_conflict(shard, &a, &b)),
    };
    let action = Action::AddSlots {
        on: primary.node_ref(),
        slots: slots.clone(),
    };
    Some(match permit.filter(|_| !forming) {
        None => Decision::act(
            action,
            Reason::Forming,
            format!("assigning slots {slots} to {}", primary.name()),
        ),
        Some(permit) => Decision::lossy(
            permit,
            action,
            Reason::SlotsLost,
            format!(
                "slots {slots} have no owner and their data is lost, as the user accepted; \
                 serving them again, empty, on {}",
                primary.name()
            ),
        ),
    })
}

/// A restored cluster's formation: each shard's first member, which loaded the shard's snapshot,
/// takes the manifest's slots of that shard; no other member ever takes them (an empty member
/// serving them would answer "no such key" for restored data), so a shard whose first member is
/// not up, or is not a primary, waits.
fn restored_slots(t: &Topology, shards: &[SlotSet], unassigned: &SlotSet) -> Option<Decision> {
    let (shard, slots) = shards
        .iter()
        .enumerate()
        .map(|(shard, slots)| (shard as u32, slots.intersection(unassigned)))
        .find(|(_, slots)| !slots.is_empty())?;
    let Some(first) = t
        .shard(shard)
        .find(|l| l.member.index == 0 && l.is_primary())
    else {
        return Some(Decision::wait(
            Reason::WaitingForNodes,
            format!(
                "shard {shard}'s first member, which holds its restored data, is not up as a \
                 primary yet to take slots {slots}"
            ),
        ));
    };
    Some(Decision::act(
        Action::AddSlots {
            on: first.node_ref(),
            slots: slots.clone(),
        },
        Reason::Forming,
        format!(
            "assigning the backup's slots {slots} of shard {shard} to {}, which holds its data",
            first.name()
        ),
    ))
}

/// At formation, slots come first, as `valkey-cli --cluster create` assigns them before its
/// introductions: each shard's primary-to-be takes its share as soon as it is up, whoever it
/// knows yet. Valkey keeps a primary's `cluster_state` at fail for its rejoin delay (up to 5 s)
/// after it last counted itself in a minority, which before it serves slots it always does: the
/// sooner it serves them, the sooner the cluster is Ready, and the introductions and gossip run
/// meanwhile. Only for a cluster that never served slots and holds no key, once every member
/// is up (as before, a cluster with a member that cannot start waits for it, unformed), and
/// only to each shard's first member; otherwise, and for anything but an assignment, the
/// ordinary rules decide.
pub(super) fn slots_first_at_formation(t: &Topology) -> Option<Decision> {
    if t.desired.formed || !t.whole() {
        return None;
    }
    coverage(t).filter(|decision| match decision {
        Decision::Act {
            action: Action::AddSlots { on, .. },
            reason: Reason::Forming,
            ..
        } => {
            !decision.is_forced()
                && t.live
                    .iter()
                    .any(|l| l.name() == on.member && l.member.index == 0)
        }
        _ => false,
    })
}

/// The first two claimers (in order) whose claims overlap. One pass over the claims finds
/// whether any do; only then are pairs compared, which with hundreds of primaries would
/// otherwise be most of a pass's work.
fn overlapping_claims(claimers: &[&Live]) -> Option<Decision> {
    let mut seen = SlotSet::new();
    let mut overlap = false;
    for claimer in claimers {
        overlap |= !seen.is_disjoint(claimer.slots());
        seen.union_with(claimer.slots());
    }
    if !overlap {
        return None;
    }
    for (i, a) in claimers.iter().enumerate() {
        for b in &claimers[i + 1..] {
            let both = a.slots().intersection(b.slots());
            if !both.is_empty() {
                return Some(Decision::wait(
                    Reason::SlotsConflict,
                    format!(
                        "slots {both} are claimed by both {} and {}; waiting for the newer claim \
                         to win",
                        a.name(),
                        b.name()
                    ),
                ));
            }
        }
    }
    None
}

pub(super) fn shard_conflict(shard: u32, a: &str, b: &str) -> Decision {
    Decision::blocked(
        Reason::ShardConflict,
        format!("{a} and {b} of shard {shard} both serve slots; one shard must have one primary"),
    )
}

/// The slots each shard's primary serves, by shard.
fn by_shard(t: &Topology) -> BTreeMap<u32, SlotSet> {
    let mut current: BTreeMap<u32, SlotSet> = BTreeMap::new();
    for l in t
        .live
        .iter()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
    {
        current
            .entry(l.member.shard)
            .or_default()
            .union_with(l.slots());
    }
    current
}

fn target_shards(t: &Topology) -> BTreeSet<u32> {
    (0..t.desired.shards).collect()
}

/// How many slots still have to move for the wanted shards to hold them evenly (progress);
/// `None` when no plan can be made, as while a migrating slot is claimed by both its primaries.
pub(super) fn slots_to_move(t: &Topology) -> Option<usize> {
    rebalance::plan(&by_shard(t), &target_shards(t))
        .ok()
        .map(|plan| plan.moved_slots())
}

/// Moves slots until the wanted shards hold them evenly; leaving shards give all of theirs.
pub(super) fn rebalance(t: &Topology) -> Option<Decision> {
    let plan = match rebalance::plan(&by_shard(t), &target_shards(t)) {
        Ok(plan) => plan,
        Err(e) => return Some(Decision::blocked(Reason::SlotsConflict, e.to_string())),
    };
    let step = plan.moves.first()?;
    if let Some(backup) = &t.desired.slot_moves_held {
        return Some(Decision::wait(
            Reason::BackupRunning,
            format!(
                "slots {} wait to move until the backup {backup} of the cluster is captured",
                step.slots
            ),
        ));
    }
    let first = move_slots(t, step)?;
    Some(with_the_sources_other_moves(t, &plan.moves, first))
}

/// While atomic migration jobs run (Valkey 9), the next move of the plan whose source runs no
/// export job of its own, started beside them: each source sends its own slots and a target
/// takes several imports at once, so a scale-out from N shards moves at N sources' pace instead
/// of one's. A source never gets a second job while one of its own runs. Only when no slot is
/// left open the legacy way; the caller checks that nothing else comes first.
pub(super) fn start_beside_running_jobs(t: &Topology) -> Option<Decision> {
    if legacy_markers(t).is_some()
        || replica_markers(t).is_some()
        || t.desired.slot_moves_held.is_some()
    {
        return None;
    }
    let plan = rebalance::plan(&by_shard(t), &target_shards(t)).ok()?;
    let first = plan
        .moves
        .iter()
        .filter_map(|step| move_slots(t, step))
        .find(|decision| starts_on_an_idle_source(t, decision))?;
    Some(with_the_sources_other_moves(t, &plan.moves, first))
}

/// `decision`, when it starts an atomic migration, joined by every other move of `plan` from
/// the same source that may start now: one `CLUSTER MIGRATESLOTS` naming each target, so a
/// shard that gives slots to several (a scale-in, a scale-out by more than one shard) starts
/// them all at once instead of one job per pass, each after the one before it ended. Each
/// joined move has passed the same checks as a move started alone (both ends ready, each
/// knowing the other as a primary, no job of its own for these slots).
fn with_the_sources_other_moves(
    t: &Topology,
    plan: &[rebalance::Move<u32>],
    mut decision: Decision,
) -> Decision {
    let Decision::Act {
        action:
            Action::StartAtomicMigration {
                source,
                target,
                also,
                ..
            },
        message,
        ..
    } = &mut decision
    else {
        return decision;
    };
    let mut joined: Vec<AtomicMove> = Vec::new();
    for step in plan {
        let Some(Decision::Act {
            action:
                Action::StartAtomicMigration {
                    source: other_source,
                    target: other,
                    ranges,
                    ..
                },
            ..
        }) = move_slots(t, step)
        else {
            continue;
        };
        let new_target = other.id != target.id && joined.iter().all(|m| m.target.id != other.id);
        if other_source.id == source.id && new_target {
            message.push_str(&format!(
                ", and slots {} to {}",
                SlotSet::from_ranges(ranges.iter().copied()),
                other.member
            ));
            joined.push(AtomicMove {
                target: other,
                ranges,
            });
        }
    }
    *also = joined.into_boxed_slice();
    decision
}

/// A decision to start an atomic migration on a source that runs no unfinished export job.
fn starts_on_an_idle_source(t: &Topology, decision: &Decision) -> bool {
    let Decision::Act {
        action: Action::StartAtomicMigration { source, .. },
        ..
    } = decision
    else {
        return false;
    };
    t.live
        .iter()
        .find(|l| l.id() == &source.id)
        .is_some_and(|l| {
            !l.state
                .migrations()
                .iter()
                .any(|job| job.operation == Operation::Export && !job.state.is_finished())
        })
}

/// The next step of one move of the plan; `None` when its source has no live primary.
fn move_slots(t: &Topology, step: &rebalance::Move<u32>) -> Option<Decision> {
    let draining = step.from >= t.desired.shards;
    let source = match t.shard_primary(step.from) {
        Ok(Some(source)) => source,
        Ok(None) => return None,
        Err((a, b)) => return Some(shard_conflict(step.from, &a, &b)),
    };
    let target = match t.shard_primary(step.to) {
        Ok(Some(target)) => target,
        Ok(None) => {
            return Some(Decision::wait(
                Reason::WaitingForNodes,
                format!("shard {} has no live primary to receive slots yet", step.to),
            ));
        }
        Err((a, b)) => return Some(shard_conflict(step.to, &a, &b)),
    };
    if let Some(wait) = not_ready_to_migrate(source, target) {
        return Some(wait);
    }
    for (a, b) in [(source, target), (target, source)] {
        if a.entry(b.id()).is_none_or(|e| !e.is_primary()) {
            return Some(Decision::wait(
                Reason::Joining,
                format!("{} does not know {} as a primary yet", a.name(), b.name()),
            ));
        }
    }
    let reason = if draining {
        Reason::Draining
    } else {
        Reason::MigratingSlots
    };
    let what = format!(
        "slots {} from {} to {}",
        step.slots,
        source.name(),
        target.name()
    );
    if !(source.state.supports_atomic_migration() && target.state.supports_atomic_migration()) {
        return Some(Decision::act(
            Action::MigrateSlots(LegacyMigration {
                source: source.node_ref(),
                target: target.node_ref(),
                others: other_primaries(t, source, target),
                slots: step.slots.clone(),
                intent: Intent::Complete,
            }),
            reason,
            format!("moving {what}"),
        ));
    }
    let observed = atomic::Observed {
        source: source.id().clone(),
        target: target.id().clone(),
        slots: step.slots.clone(),
        source_owns: source.slots().clone(),
        target_owns: target.slots().clone(),
        source_jobs: source.state.migrations().to_vec(),
        target_jobs: target.state.migrations().to_vec(),
        max_attempts: ATOMIC_MAX_ATTEMPTS,
    };
    Some(match atomic::next_step(&observed) {
        atomic::Step::Start { ranges, .. } => Decision::act(
            Action::StartAtomicMigration {
                source: source.node_ref(),
                target: target.node_ref(),
                ranges,
                also: Box::default(),
            },
            reason,
            format!("moving {what}"),
        ),
        atomic::Step::Wait { job, state } => Decision::wait(
            Reason::MigratingSlots,
            format!("moving {what}: job {job} is {state}"),
        ),
        atomic::Step::Done | atomic::Step::NotOnSource { .. } => Decision::wait(
            Reason::Converging,
            format!("waiting for every node to agree on the owner of {what}"),
        ),
        atomic::Step::Failed { attempts, message } => Decision::blocked(
            if draining {
                Reason::DrainBlocked
            } else {
                Reason::MigrationFailed
            },
            format!(
                "moving {what} failed {attempts} times in a row{}",
                message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
        ),
    })
}
