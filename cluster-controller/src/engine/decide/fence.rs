//! Fencing replication: a node that (re)starts admits no replica until the engine has seen it
//! settled in the cluster.
//!
//! Why: replication follows addresses, not node ids. A primary that restarts empty at the same
//! address (no persistence; pod IPs are often reused) would otherwise be found by its former
//! replicas, which resync from it and throw their copy of the data away before anything can
//! promote them. The ACL file starts the replication user disabled on every start, so those
//! replicas are refused. The engine enables the user on every node that no orphaned replica could
//! mistake for its lost primary: no live member replicates a node id other than this node's at
//! this node's address. (A new shard's primary must be admitted before it holds slots: Valkey 9
//! moves slots into it by logging in as the replication user.)

use crate::engine::decision::{Action, Decision, Reason};

use super::topology::{Live, Topology};

pub(super) fn admit(t: &Topology, user: Option<&str>) -> Option<Decision> {
    let user = user?;
    t.live.iter().find_map(|l| {
        if l.state.replication_admitted() != Some(false) || mistaken_for_another(t, l) {
            return None;
        }
        Some(Decision::act(
            Action::AdmitReplication {
                on: l.node_ref(),
                user: user.to_owned(),
            },
            Reason::Converging,
            format!(
                "{} is settled in the cluster; it may now serve replicas",
                l.name()
            ),
        ))
    })
}

/// Whether some live member replicates a different node at `candidate`'s address: the node
/// `candidate` replaced, which that replica would resync from (and lose its data to).
fn mistaken_for_another(t: &Topology, candidate: &Live<'_>) -> bool {
    let address = candidate.address();
    t.live.iter().any(|replica| {
        let Some(primary) = replica.primary_id() else {
            return false;
        };
        primary != candidate.id()
            && replica.entry(primary).is_some_and(|e| {
                e.ip.as_deref() == Some(address.ip().to_string().as_str())
                    && e.port == address.port()
            })
    })
}
