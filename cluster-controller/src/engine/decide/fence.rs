//! Fencing replication: a node that (re)starts admits no replica until the engine has seen it
//! settled in the cluster.
//!
//! Why: replication follows addresses, not node ids. A primary that restarts empty at the same
//! address (no persistence; pod IPs are often reused) would otherwise be found by its former
//! replicas, which resync from it and throw their copy of the data away before anything can
//! promote them. The ACL file starts the replication user disabled on every start, so those
//! replicas are refused; once a node is settled — a primary that serves slots, or a replica of a
//! live member — the engine enables the user there.

use crate::engine::decision::{Action, Decision, Reason};

use super::topology::Topology;

pub(super) fn admit(t: &Topology, user: Option<&str>) -> Option<Decision> {
    let user = user?;
    let live_ids: Vec<_> = t.live.iter().map(|l| l.id()).collect();
    t.live.iter().find_map(|l| {
        if l.state.replication_admitted() != Some(false) {
            return None;
        }
        let settled = (l.is_primary() && !l.slots().is_empty())
            || l.primary_id().is_some_and(|p| live_ids.contains(&p));
        settled.then(|| {
            Decision::act(
                Action::AdmitReplication {
                    on: l.node_ref(),
                    user: user.to_owned(),
                },
                Reason::Converging,
                format!(
                    "{} is settled in the cluster; it may now serve replicas",
                    l.name()
                ),
            )
        })
    })
}
