//! Members that are down, primaries that failed, and node ids that belong to no member.
//!
//! Valkey replaces a failed primary itself (its replicas elect one); the engine waits for
//! that, and never forgets a failed primary while a replica of it could still be elected,
//! since a forgotten primary's slots could no longer be taken over. When no election can happen
//! the engine may take over for Valkey, under the rules of [`super::takeover`].

use crate::engine::decision::{Action, Decision, Reason};
use crate::valkey::cluster_nodes::{ClusterNode, LinkState};
use crate::valkey::slots::SlotSet;

use super::takeover;
use super::topology::{Live, Topology};

/// A primary that serves slots and that some live node sees failing: wait for Valkey, or take
/// over when Valkey cannot.
pub(super) fn failing_primaries(t: &Topology) -> Option<Decision> {
    // Only the staying members' views count: a leaving member that was already forgotten
    // keeps an ageing view of a cluster that no longer talks to it.
    for viewer in t.staying() {
        for entry in viewer.view().nodes().iter().filter(|n| failing_owner(n)) {
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
            if t.answers(&entry.id) {
                return Some(Decision::wait(
                    Reason::Converging,
                    format!(
                        "{} sees node {} (serving slots {slots}) as failing, but it answers at a \
                         member's address",
                        viewer.name(),
                        entry.id
                    ),
                ));
            }
            let electors: Vec<&Live> = t
                .live
                .iter()
                .filter(|l| l.primary_id() == Some(&entry.id))
                .collect();
            if !electors.is_empty() {
                return Some(takeover::for_failed_primary(t, entry, &electors));
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
            // Nobody can bring these slots back: [`strangers`] forgets the node once the user
            // accepts the loss.
        }
    }
    None
}

fn failing_owner(node: &ClusterNode) -> bool {
    // The flags first: the slot set is 256 words to scan, for every line of every view.
    node.is_primary()
        && !node.flags.myself
        && (node.flags.fail || node.flags.pfail)
        && !node.slots.is_empty()
}

/// What waits for the staying members that are down: whatever needs the whole cluster (moving
/// slots between shards, rolling, calling it healthy). Repairs that do not need them have had
/// their turn by the time this speaks.
pub(super) fn unreachable(t: &Topology) -> Option<Decision> {
    let down: Vec<_> = t.down_staying().collect();
    let first = down.first()?;
    let why: Vec<String> = down.iter().map(|d| d.why()).collect();
    let reason = if down.iter().any(|d| d.suspicion.is_some()) {
        Reason::IdentityConflict
    } else if down.iter().any(|d| d.member.is_restarting()) {
        Reason::Rolling
    } else if first.member.address.is_some() && first.member.ready {
        Reason::NodeUnreachable
    } else {
        Reason::WaitingForNodes
    };
    Some(Decision::wait(reason, why.join("; ")))
}

/// Node ids that some live node knows but no member has: a member that returned with a new
/// id, a leaving member that is gone. A node that may be a down member's is left alone: the
/// member returns as it.
pub(super) fn strangers(t: &Topology) -> Option<Decision> {
    let mut strangers: Vec<&ClusterNode> = Vec::new();
    for viewer in t.staying() {
        for entry in viewer.view().nodes() {
            if !entry.flags.handshake
                && !t.answers(&entry.id)
                && !t.may_be_down_member(&entry.id)
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
        let mut slots = SlotSet::new();
        for e in &views {
            slots.union_with(&e.slots);
        }
        let on = t
            .staying()
            .find(|l| l.entry(id).is_some())
            .map(|l| l.node_ref())?;
        if slots.is_empty() {
            return Some(Decision::act(
                Action::Forget {
                    on: on.clone(),
                    node_id: id.clone(),
                },
                Reason::RemovingNodes,
                format!(
                    "forgetting node {id}, which belongs to no member (on {})",
                    on.member
                ),
            ));
        }
        if views.iter().any(|e| e.flags.fail) {
            let lost = format!(
                "slots {slots} were served by node {id}, which failed with no replica left"
            );
            let Some(permit) = t.desired.lost_slots.permits(&slots) else {
                return Some(lost_slots(&slots, &lost));
            };
            return Some(Decision::lossy(
                permit,
                Action::Forget {
                    on: on.clone(),
                    node_id: id.clone(),
                },
                Reason::SlotsLost,
                format!(
                    "{lost}: their data is lost, as the user accepted; forgetting it so the \
                     slots can be served again (on {})",
                    on.member
                ),
            ));
        }
        if views
            .iter()
            .any(|e| e.flags.pfail || e.link == LinkState::Disconnected)
        {
            return Some(Decision::wait(
                Reason::NodeUnreachable,
                format!(
                    "node {id}, serving slots {slots}, does not answer; waiting for the cluster to decide it failed"
                ),
            ));
        }
        return Some(Decision::blocked(
            Reason::UnknownNode,
            format!(
                "node {id} at {} serves slots {slots} but belongs to no member; remove it \
                 from the cluster or adopt it",
                stranger.ip.as_deref().unwrap_or("an unknown address")
            ),
        ));
    }
    None
}

/// The cluster cannot serve `slots` again without losing what they held: a person decides.
pub(super) fn lost_slots(slots: &SlotSet, what: &str) -> Decision {
    Decision::blocked(
        Reason::SlotsLost,
        format!(
            "{what}: every copy of slots {slots} is gone. The operator serves them again (empty) \
             only with your word: set spec.acceptLostSlots to \"{slots}\" (or spec.onSlotsLost \
             to Refill, for a cache)"
        ),
    )
}
