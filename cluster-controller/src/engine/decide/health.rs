//! The cluster is whole only when every replica is in sync, every node says `cluster_state:ok`
//! and every node sees every other connected; until then nothing else (a rolling restart,
//! a steady report) may start.

use crate::engine::decision::{Decision, Health, Reason};
use crate::valkey::cluster_info::ClusterState;
use crate::valkey::cluster_nodes::LinkState;

use super::topology::{Live, Topology, at};

pub(super) fn gates(t: &Topology) -> Option<Decision> {
    for shard in 0..t.desired.shards {
        let Ok(Some(primary)) = t.shard_primary(shard) else {
            continue;
        };
        for replica in t
            .shard(shard)
            .filter(|l| l.staying() && l.id() != primary.id())
        {
            if !replica.state.replica_in_sync() {
                return Some(Decision::wait(
                    Reason::ReplicaSyncing,
                    format!("{} is syncing from {}", replica.name(), primary.name()),
                ));
            }
        }
    }
    for node in t.staying() {
        if node.state.cluster_info().state != ClusterState::Ok {
            return Some(Decision::wait(
                Reason::Converging,
                format!("{} reports cluster_state:fail", node.name()),
            ));
        }
        for other in t.staying().filter(|o| o.id() != node.id()) {
            if !sees_healthy(node, other) {
                return Some(Decision::wait(
                    Reason::Converging,
                    format!(
                        "{} does not see {} connected and healthy yet",
                        node.name(),
                        other.name()
                    ),
                ));
            }
        }
    }
    None
}

fn sees_healthy(viewer: &Live, other: &Live) -> bool {
    viewer
        .entry(other.id())
        .is_some_and(|e| e.is_healthy() && e.link == LinkState::Connected && at(e, other.address()))
}

pub(super) fn health(t: &Topology) -> Health {
    let mut ready_shards = 0;
    let mut replicas_in_sync = 0;
    for shard in 0..t.desired.shards {
        let Ok(Some(primary)) = t.shard_primary(shard) else {
            continue;
        };
        let in_sync = u32::try_from(
            t.shard(shard)
                .filter(|l| l.staying() && l.primary_id() == Some(primary.id()))
                .filter(|l| l.state.replica_in_sync())
                .count(),
        )
        .unwrap_or(u32::MAX);
        replicas_in_sync += in_sync;
        if !primary.slots().is_empty() && in_sync >= t.desired.replicas {
            ready_shards += 1;
        }
    }
    // Shards that own slots now, as the cluster itself sees it (the largest count in any live
    // node's view): a primary that is down still owns its slots until a replica takes them, and
    // during a scale-in the leaving shards count until drained.
    let owning = t
        .live
        .iter()
        .map(|l| l.view().primaries().filter(|p| !p.slots.is_empty()).count())
        .max()
        .unwrap_or(0);
    Health {
        shards: u32::try_from(owning).unwrap_or(u32::MAX),
        ready_shards,
        slots_assigned: t.claimed().count(),
        replicas_wanted: t.desired.shards * t.desired.replicas,
        replicas_in_sync,
        nodes: t.live.len(),
        slots_to_move: super::slots::slots_to_move(t),
        members_to_restart: t
            .members
            .iter()
            .filter(|m| t.desired.place(m) == crate::engine::member::Place::Staying)
            .filter(|m| m.is_outdated())
            .count(),
        shards_wanted: t.desired.shards,
        spread_held: None,
    }
}
