//! The two ends of a slot move, as both the moves under way and the new ones see them: whether
//! both are ready to take part, and which other primaries a legacy move keeps informed.

use crate::engine::decide::topology::{Live, Topology};
use crate::engine::decision::{Decision, NodeRef, Reason};
use crate::valkey::cluster_info::ClusterState;
use crate::valkey::cluster_nodes::LinkState;

/// A node refuses keys (`CLUSTERDOWN`) until it considers the cluster healthy, which a node
/// that just joined does only a moment after it learned every slot's owner.
pub(super) fn not_ready_to_migrate(source: &Live, target: &Live) -> Option<Decision> {
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

/// Every live primary but the two ends: a legacy move tells each of them the new owner at the
/// end of each slot (SETSLOT NODE).
pub(super) fn other_primaries(t: &Topology, source: &Live, target: &Live) -> Vec<NodeRef> {
    t.live
        .iter()
        .filter(|l| l.is_primary() && l.id() != source.id() && l.id() != target.id())
        .map(Live::node_ref)
        .collect()
}
