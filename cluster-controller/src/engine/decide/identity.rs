//! Which node is which member's. Members are found at the addresses their ValkeyNodes report,
//! and an address says little: a stale status may still name an address another member now
//! has, and a pod IP is reused, perhaps by a node of another cluster. A member is bound to the
//! node id it was last seen with ([`crate::engine::Member::node_id`]); a node that answers at a
//! member's address is not taken for the member's when
//! - it also answers at another member's address (the same node id twice): only a member bound
//!   to that id keeps it;
//! - it is not the member's bound node and knows none of this cluster's nodes, yet is no fresh
//!   node either (it has peers or slots of its own): a node of another cluster.
//!
//! The engine never acts on such a node; the member counts as down and the status says why. A
//! fresh node (no peers, no slots) at a member's address is taken for the member's: that is how
//! a member that restarted without its data looks.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::member::Member;
use crate::engine::observe::NodeState;
use crate::valkey::cluster_nodes::NodeId;

/// Why the node answering at a member's address is not taken for the member's, by member name.
pub(super) fn suspicions(
    members: &[&Member],
    answering: &[(&Member, &NodeState)],
) -> BTreeMap<String, String> {
    let mut out = duplicates(answering);
    // Built only when some member answers as a node other than its bound one: it gathers the
    // ids of every view, in a large cluster most of a pass's work.
    let mut ours = None;
    for (member, state) in answering {
        if out.contains_key(&member.name) {
            continue;
        }
        // Never bound (first sight), or still its own node.
        let Some(bound) = &member.node_id else {
            continue;
        };
        if bound == state.id() || is_fresh(state) {
            continue;
        }
        let ours = ours.get_or_insert_with(|| our_nodes(members, answering));
        if !known_ids(state).any(|id| ours.contains(id)) {
            out.insert(
                member.name.clone(),
                format!(
                    "its address {} answers as node {}, which knows none of this cluster's nodes: \
                     a node of another cluster at an address the member had (its ValkeyNode status \
                     may be stale); the operator leaves it alone",
                    state.address(),
                    state.id()
                ),
            );
        }
    }
    out
}

/// Members whose address answers as a node that also answers at another member's address.
fn duplicates(answering: &[(&Member, &NodeState)]) -> BTreeMap<String, String> {
    let mut by_id: BTreeMap<&NodeId, Vec<&Member>> = BTreeMap::new();
    for (member, state) in answering {
        by_id.entry(state.id()).or_default().push(member);
    }
    let mut out = BTreeMap::new();
    for (id, members) in by_id.into_iter().filter(|(_, m)| m.len() > 1) {
        let bound: Vec<&&Member> = members
            .iter()
            .filter(|m| m.node_id.as_ref() == Some(id))
            .collect();
        let owner = (bound.len() == 1).then(|| bound[0].name.as_str());
        for member in &members {
            if owner == Some(member.name.as_str()) {
                continue;
            }
            let others: Vec<&str> = members
                .iter()
                .filter(|m| m.name != member.name)
                .map(|m| m.name.as_str())
                .collect();
            out.insert(
                member.name.clone(),
                format!(
                    "its address answers as node {id}, which also answers for {} (a stale \
                     ValkeyNode status or a reused address); the operator does not act on it \
                     until each member has a node of its own",
                    others.join(", ")
                ),
            );
        }
    }
    out
}

/// The nodes this cluster is known to have: every member's bound node, and what the members
/// still answering as their bound node know.
fn our_nodes<'a>(
    members: &[&'a Member],
    answering: &[(&Member, &'a NodeState)],
) -> BTreeSet<&'a NodeId> {
    let mut ours: BTreeSet<&NodeId> = members.iter().filter_map(|m| m.node_id.as_ref()).collect();
    for (member, state) in answering {
        if member.node_id.as_ref() == Some(state.id()) {
            ours.extend(known_ids(state));
        }
    }
    ours
}

/// The node's own id and every node its view knows (handshakes aside: their ids are provisional).
fn known_ids(state: &NodeState) -> impl Iterator<Item = &NodeId> {
    state
        .nodes()
        .nodes()
        .iter()
        .filter(|n| !n.flags.handshake)
        .map(|n| &n.id)
}

/// Alone and serving nothing: a node that just started without a cluster.
fn is_fresh(state: &NodeState) -> bool {
    state.myself().slots.is_empty()
        && state
            .nodes()
            .nodes()
            .iter()
            .all(|n| n.flags.myself || n.flags.handshake)
}
