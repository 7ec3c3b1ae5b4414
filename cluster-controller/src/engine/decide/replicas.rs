//! Replicas: every staying member of a shard replicates the shard's primary, and a member
//! about to be removed hands its primary role over first.

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::member::Place;
use crate::engine::safety;
use crate::valkey::cluster_nodes::NodeId;

use super::slots::shard_conflict;
use super::topology::{Live, Topology};

/// Attaches each staying member to its shard's primary with CLUSTER REPLICATE. In a shard with
/// a member down, only to a primary that serves the shard's slots: the member that is down may
/// be the one that does.
pub(super) fn attach(t: &Topology) -> Option<Decision> {
    let mut pending = None;
    for shard in 0..t.desired.shards {
        let primary = match t.shard_primary(shard) {
            Ok(Some(primary)) if t.shard_has_down(shard) && primary.slots().is_empty() => continue,
            Ok(Some(primary)) => primary,
            Ok(None) if t.shard_has_down(shard) => continue,
            Ok(None) => {
                let members: Vec<&str> = t.shard(shard).map(Live::name).collect();
                if members.is_empty() {
                    continue;
                }
                return Some(Decision::blocked(
                    Reason::ShardConflict,
                    format!(
                        "no member of shard {shard} is a primary ({} all replicate other shards)",
                        members.join(", ")
                    ),
                ));
            }
            Err((a, b)) => return Some(shard_conflict(shard, &a, &b)),
        };
        // A member that replicates a node serving slots no member answers as (the shard's
        // primary gone quiet, perhaps before anyone noticed) waits for it or for its election:
        // a primary without slots is no place for the data it holds.
        if primary.slots().is_empty()
            && let Some(orphan) = t.shard(shard).find(|l| {
                l.primary_id()
                    .is_some_and(|p| t.by_id(p).is_none() && serves_slots(t, p))
            })
        {
            pending.get_or_insert_with(|| {
                Decision::wait(
                    Reason::FailingOver,
                    format!(
                        "{} replicates node {}, which serves slots but does not answer; waiting \
                         for it to return or for the replica's election",
                        orphan.name(),
                        orphan
                            .primary_id()
                            .map(ToString::to_string)
                            .unwrap_or_default()
                    ),
                )
            });
            continue;
        }
        for member in t
            .shard(shard)
            .filter(|l| l.staying() && l.id() != primary.id())
        {
            if member.primary_id() == Some(primary.id()) {
                continue;
            }
            if member.is_primary() && member.state.keys() > 0 {
                return Some(Decision::blocked(
                    Reason::NodeNotEmpty,
                    format!(
                        "{} is a primary without slots that holds {} keys; it cannot replicate \
                         {} until those keys are removed",
                        member.name(),
                        member.state.keys(),
                        primary.name()
                    ),
                ));
            }
            if let (Some(source), Some(own)) = (primary.state.history(), member.state.history())
                && safety::sync_would_lose(&source, &own)
            {
                return Some(Decision::blocked(
                    Reason::NodeNotEmpty,
                    format!(
                        "{} holds {} keys of a replication history {} does not have ({} keys); \
                         replicating it would replace them, so the operator does not",
                        member.name(),
                        own.keys,
                        primary.name(),
                        source.keys
                    ),
                ));
            }
            let known = member
                .entry(primary.id())
                .is_some_and(|e| e.is_primary() && e.is_healthy());
            if !known {
                pending.get_or_insert_with(|| {
                    Decision::wait(
                        Reason::Joining,
                        format!(
                            "{} does not see {} as a healthy primary yet",
                            member.name(),
                            primary.name()
                        ),
                    )
                });
                continue;
            }
            return Some(Decision::act(
                Action::Replicate {
                    on: member.node_ref(),
                    primary_id: primary.id().clone(),
                },
                Reason::AttachingReplicas,
                format!("making {} a replica of {}", member.name(), primary.name()),
            ));
        }
    }
    pending
}

/// True when some staying member's view has `id` serving slots.
fn serves_slots(t: &Topology, id: &NodeId) -> bool {
    t.staying()
        .filter_map(|l| l.entry(id))
        .any(|e| !e.slots.is_empty())
}

/// A surplus member that is its shard's primary fails over to a staying replica first.
pub(super) fn surplus_primaries(t: &Topology) -> Option<Decision> {
    let surplus = t
        .live
        .iter()
        .find(|l| l.place == Place::Surplus && l.is_primary() && !l.slots().is_empty())?;
    let Some(replica) = best_replica(t, surplus) else {
        return Some(Decision::wait(
            Reason::ReplicaSyncing,
            format!(
                "{} is to be removed but is the primary of shard {}; waiting for a staying \
                 replica in sync to take over",
                surplus.name(),
                surplus.member.shard
            ),
        ));
    };
    Some(Decision::act(
        Action::Failover {
            on_replica: replica.node_ref(),
            primary: surplus.node_ref(),
        },
        Reason::RemovingNodes,
        format!(
            "{} takes over from {}, which is to be removed",
            replica.name(),
            surplus.name()
        ),
    ))
}

/// The staying, in-sync replica of `primary` that is furthest along its replication stream,
/// preferring one that already runs the desired revision.
pub(super) fn best_replica<'t, 'a>(t: &'t Topology<'a>, primary: &Live) -> Option<&'t Live<'a>> {
    t.live
        .iter()
        .filter(|l| {
            l.staying() && l.primary_id() == Some(primary.id()) && l.state.replica_in_sync()
        })
        .max_by_key(|l| {
            (
                !l.member.needs_restart(),
                l.state.replication_offset(),
                std::cmp::Reverse(l.member.index),
            )
        })
}
