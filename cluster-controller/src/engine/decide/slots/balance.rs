//! Moving slots until the wanted shards hold them evenly, leaving shards giving all of theirs:
//! every move of the rebalance plan side by side the legacy way (Valkey 8), each between its own
//! pair of primaries, and on Valkey 9 one atomic job per source with every target of that source
//! at once, the sources side by side.
//!
//! Last of the slot rules: a move starts only once nothing is open ([`super::in_flight`]), every
//! slot has one owner ([`coverage`](mod@super::coverage)) and every replica is attached
//! (`decide/mod.rs` checks that in between), so the plan is made from settled owners. The
//! exception is [`start_beside_running_jobs`], which `decide/mod.rs` tries while atomic jobs
//! run: waiting for every job to end before the next source starts would move one source's
//! slots at a time.

use crate::engine::decide::topology::Topology;
use crate::engine::decision::{Action, AtomicMove, Decision, LegacyMigration, Reason};
use crate::plan::migration::atomic;
use crate::plan::migration::legacy::Intent;
use crate::plan::rebalance;
use crate::valkey::slot_migrations::Operation;
use crate::valkey::slots::SlotSet;

use super::ends::{not_ready_to_migrate, other_primaries};
use super::in_flight::{legacy_markers, replica_markers};
use super::plan::{rebalance_plan, shard_conflict};

/// How many unsuccessful atomic migration jobs in a row are retried before giving up.
pub const ATOMIC_MAX_ATTEMPTS: u32 = 3;

/// How many slots still have to move for the wanted shards to hold them evenly (progress);
/// `None` when no plan can be made, as while a migrating slot is claimed by both its primaries.
pub(in crate::engine::decide) fn slots_to_move(t: &Topology) -> Option<usize> {
    rebalance_plan(t).ok().map(|plan| plan.moved_slots())
}

/// Moves slots until the wanted shards hold them evenly; leaving shards give all of theirs.
pub(in crate::engine::decide) fn rebalance(t: &Topology) -> Option<Decision> {
    let plan = match rebalance_plan(t) {
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
    let first = with_the_other_legacy_moves(t, &plan.moves, first);
    Some(with_the_sources_other_moves(t, &plan.moves, first))
}

/// While atomic migration jobs run (Valkey 9), the next move of the plan whose source runs no
/// export job of its own, started beside them: each source sends its own slots and a target
/// takes several imports at once, so a scale-out from N shards moves at N sources' pace instead
/// of one's. A source never gets a second job while one of its own runs. Only when no slot is
/// left open the legacy way; the caller checks that nothing else comes first.
pub(in crate::engine::decide) fn start_beside_running_jobs(t: &Topology) -> Option<Decision> {
    if legacy_markers(t).is_some()
        || replica_markers(t).is_some()
        || t.desired.slot_moves_held.is_some()
    {
        return None;
    }
    let plan = rebalance_plan(t).ok()?;
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

/// `decision`, when it moves slots the legacy way (Valkey 8), joined by every other move of
/// `plan` that may start now, each between its own pair of primaries: the step runs them side by
/// side, as a direct script would, so a shard that gives slots to several (or several that give
/// to a new one) moves them all at once instead of one pair a pass, each after the one before it
/// ended. Each joined move has passed the same checks as a move started alone (both ends ready,
/// each knowing the other as a primary); a slot belongs to one move of the plan only.
fn with_the_other_legacy_moves(
    t: &Topology,
    plan: &[rebalance::Move<u32>],
    mut decision: Decision,
) -> Decision {
    let Decision::Act {
        action: Action::MigrateSlots(first),
        message,
        ..
    } = &mut decision
    else {
        return decision;
    };
    for step in plan {
        let Some(Decision::Act {
            action: Action::MigrateSlots(other),
            ..
        }) = move_slots(t, step)
        else {
            continue;
        };
        let pair = |m: &LegacyMigration| (m.source.id.clone(), m.target.id.clone());
        let new_pair =
            pair(&other) != pair(first) && first.also.iter().all(|m| pair(m) != pair(&other));
        if new_pair {
            message.push_str(&format!(
                ", and slots {} from {} to {}",
                other.slots, other.source.member, other.target.member
            ));
            first.also.push(other);
        }
    }
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
                also: Vec::new(),
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
