//! A primary that came back without its data but with its identity: no persistence, and the
//! same pod's server restarted with the same volume, so the same node id from nodes.conf and
//! still the primary of its slots; empty, or with an old snapshot (an RDB file an earlier
//! full sync left in its folder). Valkey sees nothing wrong (it was away for less than a node
//! timeout), and its replica, whose link the replication fence keeps down, holds the shard's
//! only copy of the data.
//!
//! The replica takes over before the empty node can ever serve it: `CLUSTER FAILOVER FORCE`,
//! because the primary is alive (a takeover without a vote is not needed) but a planned failover
//! waits for the replica to catch up with the primary's offset, which a replica of another
//! history never does. The emptied node then follows the new primary and resyncs from it.
//!
//! Which node lacks the data is judged from the replication history (see
//! [`safety::restart_would_lose`]), never from key counts. And the emptied node takes no write
//! meanwhile: a server that keeps no data starts with its clients' users off, like the
//! replication user, until the engine admits it (see the fence), so nothing it accepts can be
//! lost by the handover.

use std::cmp::Reverse;

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::safety;

use super::topology::{Live, Topology};

pub(super) fn emptied_primaries(t: &Topology) -> Option<Decision> {
    for primary in t
        .live
        .iter()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
    {
        let Some(source) = primary.state.history() else {
            continue;
        };
        // Admitted since it last started: the fence found it whole then, and what changed since
        // (keys a migration moved away, writes its replica has not copied yet) is ordinary;
        // taking its replica's side now would lose what it accepted since.
        if primary.state.replication_admitted() == Some(true) {
            continue;
        }
        // Its replication user still fenced: it started since it last served, and holds what
        // it loaded (nothing, or an old snapshot).
        let restarted = primary.state.replication_admitted() == Some(false);
        let lacks = |h: &safety::ReplicationHistory| {
            if restarted {
                safety::restart_would_lose(&source, h)
            } else {
                safety::sync_would_lose(&source, h)
            }
        };
        let best = t
            .live
            .iter()
            .filter(|r| r.primary_id() == Some(primary.id()))
            .filter(|r| r.state.history().is_some_and(|h| lacks(&h)))
            // The one furthest along the shard's history (offsets of one history compare; key
            // counts only break a tie).
            .max_by_key(|r| {
                (
                    r.staying(),
                    r.state.replication_offset(),
                    r.state.keys(),
                    Reverse(r.name()),
                )
            });
        let Some(best) = best else {
            continue;
        };
        return Some(takes_over(primary, best));
    }
    None
}

fn takes_over(primary: &Live, replica: &Live) -> Decision {
    Decision::forced(
        Action::ForcedFailover {
            on_replica: replica.node_ref(),
            primary: primary.node_ref(),
        },
        Reason::PrimaryRestartedEmpty,
        format!(
            "{p} came back without the data its replica {r} holds (a replication history of its \
             own, without an append-only file, against {rk} keys of the shard's history; it holds \
             {pk}); {r} takes over before {p} serves anyone, and {p} resyncs from {r}",
            p = primary.name(),
            pk = primary.state.keys(),
            r = replica.name(),
            rk = replica.state.keys(),
        ),
    )
}
