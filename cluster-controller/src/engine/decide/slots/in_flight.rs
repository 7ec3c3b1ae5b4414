//! Migrations already under way, seen through every live node's own markers and jobs: atomic
//! jobs to wait for (or cancel, when their target is leaving), legacy slots left open to finish
//! (or roll back), and markers a replica kept after its primary closed them.
//!
//! These come first among the slot rules (but for the formation shortcut of
//! [`coverage`](mod@super::coverage)): while a move is open its slots are claimed by both ends,
//! or by one end in some views only, so neither the coverage rules nor the rebalance plan can
//! tell who owns what; and a legacy move stopped half-way must be finished or rolled back before
//! anything else moves those slots.

use std::collections::BTreeMap;

use crate::engine::decide::topology::{Live, Topology};
use crate::engine::decision::{Action, Decision, LegacyMigration, Reason};
use crate::engine::member::Place;
use crate::plan::migration::legacy::Intent;
use crate::valkey::cluster_nodes::NodeId;
use crate::valkey::slot_migrations::{Operation, SlotMigrationJob};
use crate::valkey::slots::SlotSet;

use super::ends::{not_ready_to_migrate, other_primaries};

/// Migrations already under way: atomic jobs to wait for, legacy slots left open to finish
/// (or roll back when their target is leaving).
pub(in crate::engine::decide) fn open_migrations(t: &Topology) -> Option<Decision> {
    atomic_jobs(t)
        .or_else(|| legacy_markers(t))
        .or_else(|| replica_markers(t))
}

/// Atomic jobs (Valkey 9) that have not finished: waited for, since Valkey moves their slots by
/// itself; a job exporting to a member that is leaving is cancelled, so the leaving shard does
/// not take slots it must then give back.
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

/// Slots a primary shows migrating or importing the legacy way (Valkey 8): the first pair of
/// ends with open slots is finished, or rolled back when its target is leaving; slots open
/// towards a node that is no member any more are closed, since nothing can move to or from it.
pub(super) fn legacy_markers(t: &Topology) -> Option<Decision> {
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
                    also: Vec::new(),
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

/// Valkey 8 replicates SETSLOT to replicas, so they carry the markers of their primary; a
/// replica can keep one its primary no longer has (seen when a SETSLOT waiting for the
/// replica's acknowledgement was cut short). A replica refuses SETSLOT itself, but a
/// `SETSLOT STABLE` on its primary, a no-op there, reaches it by replication. Runs once no
/// primary has a slot open.
pub(super) fn replica_markers(t: &Topology) -> Option<Decision> {
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
