//! Members that are down, primaries that failed, and node ids that belong to no member.
//!
//! Valkey replaces a failed primary itself (its replicas elect one); the engine waits for
//! that, and never forgets a failed primary while a replica of it could still be elected,
//! since a forgotten primary's slots could no longer be taken over. An election needs the votes
//! of most primaries, which a small cluster that lost one of two cannot give: when a primary
//! has been failed (FAIL, by Valkey's own clock) for longer than an election takes, its most
//! caught-up replica takes over without a vote.

use std::collections::BTreeSet;

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::member::Place;
use crate::valkey::cluster_nodes::{ClusterNode, NodeId};

use super::topology::{Live, Topology};

/// A primary that serves slots and that some live node sees failing: wait for Valkey.
pub(super) fn failing_primaries(t: &Topology) -> Option<Decision> {
    // Only the staying members' views count: a leaving member that was already forgotten
    // keeps an ageing view of a cluster that no longer talks to it.
    for viewer in t.staying() {
        for entry in viewer.view().nodes.iter().filter(|n| failing_owner(n)) {
            let slots = &entry.slots;
            if let Some(member) = t.by_id(&entry.id) {
                return Some(Decision::wait(
                    Reason::Converging,
                    format!(
                        "{} still sees {} (serving slots {slots}) as failing",
                        viewer.name(),
                        member.name()
                    ),
                ));
            }
            let electors: Vec<_> = t
                .live
                .iter()
                .filter(|l| l.primary_id() == Some(&entry.id))
                .collect();
            if let Some(best) = takeover_candidate(viewer, entry, &electors) {
                return Some(Decision::act(
                    Action::Takeover {
                        on_replica: best.node_ref(),
                        failed: entry.id.clone(),
                    },
                    Reason::FailingOver,
                    format!(
                        "primary {} of slots {slots} failed {} s ago and no replica was elected; {} takes over",
                        entry.id,
                        failed_for_ms(viewer, entry).unwrap_or(0) / 1000,
                        best.name()
                    ),
                ));
            }
            let electors: Vec<&str> = electors.iter().map(|l| l.name()).collect();
            if !electors.is_empty() {
                return Some(Decision::wait(
                    Reason::FailingOver,
                    format!(
                        "primary {} of slots {slots} failed; waiting for {} to take over",
                        entry.id,
                        electors.join(", ")
                    ),
                ));
            }
            if !t.down.is_empty() {
                let down: Vec<&str> = t.down.iter().map(|d| d.member.name.as_str()).collect();
                return Some(Decision::wait(
                    Reason::NodeUnreachable,
                    format!(
                        "slots {slots} are served by {}, which is down without a replica to \
                         take over; waiting for {} to return",
                        entry.id,
                        down.join(", ")
                    ),
                ));
            }
            // Nobody can bring these slots back: [`strangers`] forgets the node.
        }
    }
    None
}

/// How long an election may take before the engine stops waiting for one: Valkey starts it
/// about one node timeout (5 s as configured by the operator) after the failure.
pub const TAKEOVER_AFTER_MS: u64 = 20_000;

/// How long `viewer` has seen `entry` silent, on the viewer's own clock.
fn failed_for_ms(viewer: &Live<'_>, entry: &ClusterNode) -> Option<u64> {
    let now = viewer.state.info().server_time_ms()?;
    Some(now.saturating_sub(entry.pong_received))
}

/// The replica to take over from a primary that failed without an election: only once the
/// primary has been silent for longer than [`TAKEOVER_AFTER_MS`] and the engine cannot reach it
/// either (the caller only asks about primaries no live member is). A failure may stay PFAIL for
/// ever when too few primaries are left to agree on FAIL, so PFAIL counts. The replica with the
/// most replicated data wins.
fn takeover_candidate<'a>(
    viewer: &Live<'_>,
    entry: &ClusterNode,
    electors: &[&'a Live<'a>],
) -> Option<&'a Live<'a>> {
    if failed_for_ms(viewer, entry)? < TAKEOVER_AFTER_MS {
        return None;
    }
    electors
        .iter()
        .filter(|l| l.staying())
        .max_by_key(|l| (l.state.replication_offset(), std::cmp::Reverse(l.name())))
        .copied()
}

fn failing_owner(node: &ClusterNode) -> bool {
    node.is_primary()
        && !node.flags.myself
        && !node.slots.is_empty()
        && (node.flags.fail || node.flags.pfail)
}

/// Every staying member must be live before the topology changes.
pub(super) fn unreachable(t: &Topology) -> Option<Decision> {
    let down: Vec<_> = t
        .down
        .iter()
        .filter(|d| d.place == Place::Staying)
        .collect();
    let first = down.first()?;
    let why: Vec<String> = down.iter().map(|d| d.why()).collect();
    let reason = if down.iter().any(|d| d.member.is_restarting()) {
        Reason::Rolling
    } else if first.member.address.is_some() && first.member.ready {
        Reason::NodeUnreachable
    } else {
        Reason::WaitingForNodes
    };
    Some(Decision::wait(reason, why.join("; ")))
}

/// Node ids that some live node knows but no member has: a member that returned with a new
/// id, a leaving member that is gone. Called once every staying member is live, so no such
/// id can be a staying member's.
pub(super) fn strangers(t: &Topology) -> Option<Decision> {
    let members: BTreeSet<&NodeId> = t.live.iter().map(|l| l.id()).collect();
    let mut strangers: Vec<&ClusterNode> = Vec::new();
    for viewer in t.staying() {
        for entry in &viewer.view().nodes {
            if !entry.flags.handshake
                && !members.contains(&entry.id)
                && !strangers.iter().any(|s| s.id == entry.id)
            {
                strangers.push(entry);
            }
        }
    }
    strangers.sort_by(|a, b| a.id.cmp(&b.id));
    for stranger in strangers {
        let id = &stranger.id;
        if t.live.iter().any(|l| l.primary_id() == Some(id)) {
            // A member still replicates it; attaching that member elsewhere comes first.
            continue;
        }
        let views: Vec<&ClusterNode> = t.staying().filter_map(|l| l.entry(id)).collect();
        let slots = views
            .iter()
            .fold(crate::valkey::slots::SlotSet::new(), |acc, e| {
                acc.union(&e.slots)
            });
        let (reason, message) = if slots.is_empty() {
            (
                Reason::RemovingNodes,
                format!("forgetting node {id}, which belongs to no member"),
            )
        } else if views.iter().any(|e| e.flags.fail) {
            (
                Reason::SlotsLost,
                format!(
                    "slots {slots} were served by node {id}, which failed with no replica left: \
                     their data is lost; forgetting it so the slots can be served again"
                ),
            )
        } else if views.iter().any(|e| {
            e.flags.pfail || e.link == crate::valkey::cluster_nodes::LinkState::Disconnected
        }) {
            return Some(Decision::wait(
                Reason::NodeUnreachable,
                format!(
                    "node {id}, serving slots {slots}, does not answer; waiting for the cluster to decide it failed"
                ),
            ));
        } else {
            return Some(Decision::blocked(
                Reason::UnknownNode,
                format!(
                    "node {id} at {} serves slots {slots} but belongs to no member; remove it \
                     from the cluster or adopt it",
                    stranger.ip.as_deref().unwrap_or("an unknown address")
                ),
            ));
        };
        let on = t
            .staying()
            .find(|l| l.entry(id).is_some())
            .map(|l| l.node_ref())?;
        let message = format!("{message} (on {})", on.member);
        return Some(Decision::act(
            Action::Forget {
                on,
                node_id: id.clone(),
            },
            reason,
            message,
        ));
    }
    None
}
