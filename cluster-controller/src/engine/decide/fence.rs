//! Fencing replication: a node that (re)starts admits no replica until the engine has seen it
//! settled in the cluster, and never while a replica could lose data by syncing from it.
//!
//! Why: replication follows addresses, not node ids, and a full resync empties the replica
//! first. A node that restarts without its data at its old address (no persistence; pod IPs
//! are often reused), whether with a new node id or with its old one (the same volume kept
//! nodes.conf), would otherwise be found by its former replicas, which would resync from it and
//! throw their copy of the data away before anything could promote them. The replication user
//! starts disabled on every start, so those replicas are refused. The engine enables it on a
//! node only when
//! - no member replicates, at this node's address, a node id other than this node's (the node it
//!   replaced), as far as any view knows;
//! - no live replica of it holds data it lacks ([`safety::restart_would_lose`]: it may have
//!   come back empty, or from an old snapshot);
//! - and, when the servers keep no data across restarts, no replica of it is out of the
//!   engine's sight: that replica may hold what it lacks.
//!
//! (A new shard's primary must be admitted before it holds slots: Valkey 9 moves slots into it
//! by logging in as the replication user.)
//!
//! The fence needs nothing but the replication user and an operator user allowed `ACL
//! GETUSER`/`SETUSER`; it does not depend on clients needing a password.

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::safety;
use crate::valkey::slots::SlotSet;

use super::topology::{Live, Topology};

pub(super) fn admit(t: &Topology, user: Option<&str>) -> Option<Decision> {
    let user = user?;
    let settled: Vec<&Live<'_>> = t
        .live
        .iter()
        .filter(|l| {
            l.state.replication_admitted() == Some(false)
                && !mistaken_for_another(t, l)
                && !could_feed_a_richer_replica(t, l)
        })
        .collect();
    // One that restarted without its data, with no copy anywhere, is decided on its own.
    if let Some((l, slots)) = settled
        .iter()
        .find_map(|l| Some((*l, lost_everything(t, l)?)))
    {
        let lost = format!(
            "{} restarted without its data, and no replica holds slots {slots}",
            l.name()
        );
        return Some(match t.desired.lost_slots.permits(slots) {
            None => super::failure::lost_slots(slots, &lost),
            Some(permit) => Decision::lossy(
                permit,
                Action::AdmitReplication {
                    on: l.node_ref(),
                    also: Vec::new(),
                    user: user.to_owned(),
                },
                Reason::SlotsLost,
                format!(
                    "{lost}: their data is lost, as the user accepted; {} serves them again, \
                     empty",
                    l.name()
                ),
            ),
        });
    }
    // Every other settled node at once: after a mass restart, one per look would keep replicas
    // unsynced, and clients away, for minutes at hundreds of members.
    let (first, rest) = settled.split_first()?;
    let names: Vec<&str> = settled.iter().map(|l| l.name()).collect();
    Some(Decision::act(
        Action::AdmitReplication {
            on: first.node_ref(),
            also: rest.iter().map(|l| l.node_ref()).collect(),
            user: user.to_owned(),
        },
        Reason::Converging,
        format!(
            "{} {} settled in the cluster; {} may now serve replicas and clients",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            if names.len() == 1 { "it" } else { "they" },
        ),
    ))
}

/// The slots `candidate` serves, when it restarted without their data and nothing else holds
/// it: no persistence, a history of its own (it loaded nothing), in a cluster that had formed and
/// held keys, and every other member of its shard answers, empty, claiming none of them (a
/// shard-mate with keys, or one that just took the slots over, holds them; one that does not
/// answer might). Serving them would answer "no such key" for data the cluster had: the same
/// loss as a shard whose every member is gone.
fn lost_everything<'a>(t: &Topology, candidate: &Live<'a>) -> Option<&'a SlotSet> {
    let slots = candidate.slots();
    let history = candidate.state.history()?;
    let shard = candidate.member.shard;
    let mates_hold_nothing = t
        .members
        .iter()
        .filter(|m| m.shard == shard && m.name != candidate.name())
        .all(|m| {
            t.live
                .iter()
                .any(|l| l.name() == m.name && l.state.keys() == 0 && l.slots().is_disjoint(slots))
        });
    (candidate.is_primary()
        && !slots.is_empty()
        && !t.desired.persistent
        && t.desired.formed
        && t.desired.held_keys
        && !history.aof
        && history.started_fresh()
        && mates_hold_nothing)
        .then_some(slots)
}

/// Whether some member's view has a replica of a different node at `candidate`'s address: the
/// node `candidate` replaced, which that replica would resync from (and lose its data to).
fn mistaken_for_another(t: &Topology, candidate: &Live<'_>) -> bool {
    let address = candidate.address();
    let ip = address.ip().to_string();
    t.live.iter().any(|viewer| {
        let view = viewer.view();
        view.nodes()
            .iter()
            .filter(|n| n.is_replica())
            .filter_map(|replica| replica.primary_id.as_ref())
            .filter(|primary| *primary != candidate.id())
            .filter_map(|primary| view.get(primary))
            .any(|old| old.ip.as_deref() == Some(ip.as_str()) && old.port == address.port())
    })
}

/// Whether admitting `candidate` could let a replica with data it lacks resync from it. The
/// candidate started since it last served (its replication user is still fenced), so its data
/// is whatever it loaded: none, or an old snapshot ([`safety::restart_would_lose`]).
fn could_feed_a_richer_replica(t: &Topology, candidate: &Live<'_>) -> bool {
    let Some(source) = candidate.state.history() else {
        return true;
    };
    let live_replicas = t
        .live
        .iter()
        .filter(|r| r.primary_id() == Some(candidate.id()));
    if live_replicas.clone().any(|r| {
        r.state
            .history()
            .is_none_or(|h| safety::restart_would_lose(&source, &h))
    }) {
        return true;
    }
    if t.desired.persistent {
        return false;
    }
    // Replicas of it that the views list but the engine cannot read.
    t.live.iter().any(|viewer| {
        viewer
            .view()
            .replicas_of(candidate.id())
            .any(|r| !r.flags.myself && t.by_id(&r.id).is_none())
    })
}
