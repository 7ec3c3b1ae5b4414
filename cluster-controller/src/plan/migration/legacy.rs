//! Moving one slot on Valkey before 9, the way `valkey-cli --cluster reshard` does, as a
//! stateless machine.
//!
//! Forward: `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the source, MIGRATE the
//! keys in batches, `SETSLOT NODE <target>` on the target (the hand-off: the target claims the
//! slot with a new epoch), then on the source and the other primaries.
//!
//! A step may carry commands that follow one another without a look between them, where the
//! look could not change what comes next: opening both ends ([`Step::Open`]: the target, then
//! the source), and the hand-off with the telling of everyone else ([`Step::HandOff`]). Each
//! look costs a round trip for every slot under way, so these halve the looks a slot needs.
//! The machine is still stateless: stopped between two commands of a step, the next look sees
//! the half-taken step and decides from there.
//!
//! Why this order keeps every key: while the source is MIGRATING it still serves the keys it
//! has and sends clients to the target (ASK) for keys it lacks, so a key lives in exactly one
//! place; the target claims the slot only once the source holds no key of it (a source that
//! learns it lost a slot still holding keys would drop them).
//!
//! Backward (intent [`Intent::Abort`] before the hand-off): MIGRATE back whatever reached the
//! target while it still imports, then `SETSLOT STABLE` on the source and on the target. After
//! the hand-off the target owns the slot, so finishing is the only clean way out and an abort
//! is carried forward.

use crate::valkey::cluster_nodes::{NodeId, SlotView};
use crate::valkey::slots::Slot;

use super::command::SetSlot;

/// What the caller wants for this slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Move the slot to the target.
    Complete,
    /// Leave it on the source (plan changed, target going away).
    Abort,
}

/// What the nodes report about the slot, read afresh on each pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub slot: Slot,
    pub source: NodeId,
    pub target: NodeId,
    /// The slot as the source's CLUSTER NODES shows it ([`crate::valkey::cluster_nodes::ClusterNodes::slot_view`]).
    pub source_view: SlotView,
    /// The slot as the target's CLUSTER NODES shows it.
    pub target_view: SlotView,
    /// `CLUSTER COUNTKEYSINSLOT` on the source.
    pub keys_in_source: u64,
    /// `CLUSTER COUNTKEYSINSLOT` on the target.
    pub keys_in_target: u64,
    /// The other primaries and the owner each one sees, for the last SETSLOT NODE round.
    pub others: Vec<(NodeId, Option<NodeId>)>,
    pub intent: Intent,
}

/// The one thing to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send `CLUSTER SETSLOT <slot> ...` to `node`.
    SetSlot { node: NodeId, action: SetSlot },
    /// Open both ends: `SETSLOT IMPORTING <source>` on the target, then (once it answered OK)
    /// `SETSLOT MIGRATING <target>` on the source. Target first: a source that sends clients on
    /// (ASK) to a target not yet importing would have them refused.
    Open { source: NodeId, target: NodeId },
    /// `SETSLOT NODE <target>`: first on the target when `claim` (it takes the slot with a new
    /// epoch), then, once that answered OK, on every node of `tell` at once.
    HandOff {
        target: NodeId,
        claim: bool,
        tell: Vec<NodeId>,
    },
    /// Move one batch of keys: `CLUSTER GETKEYSINSLOT <slot> <n>` on `from`, then MIGRATE them
    /// to `to` ([`crate::valkey::commands::migrate`]).
    MigrateKeys { from: NodeId, to: NodeId },
    /// The target owns the slot everywhere and no marker is left open.
    Done,
    /// The slot stays on the source and no marker is left open.
    RolledBack,
    /// Nothing this machine can do safely; a person or another plan must act.
    Blocked(Blocked),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// Nobody serves the slot: it needs `CLUSTER ADDSLOTS`, not a migration.
    Unassigned,
    /// A third node serves the slot in `seen_by`'s view.
    OwnedElsewhere { seen_by: NodeId, owner: NodeId },
    /// `node` has the slot open towards a node outside this migration.
    ForeignMigration { node: NodeId, peer: NodeId },
    /// `node` holds keys of the slot that this migration did not put there and cannot move
    /// without risking stale data coming back to life.
    OrphanedKeys { node: NodeId, keys: u64 },
}

impl Step {
    /// The SETSLOT commands of the step, in the order they go out: the commands of a phase at
    /// once, a phase only once every command of the one before answered OK. Empty for a step
    /// that sends no SETSLOT.
    pub fn set_slots(&self) -> Vec<Vec<(NodeId, SetSlot)>> {
        match self {
            Step::SetSlot { node, action } => vec![vec![(node.clone(), action.clone())]],
            Step::Open { source, target } => vec![
                vec![(target.clone(), SetSlot::Importing(source.clone()))],
                vec![(source.clone(), SetSlot::Migrating(target.clone()))],
            ],
            Step::HandOff {
                target,
                claim,
                tell,
            } => {
                let node = |n: &NodeId| (n.clone(), SetSlot::Node(target.clone()));
                let claiming = claim.then(|| vec![node(target)]);
                let telling = (!tell.is_empty()).then(|| tell.iter().map(node).collect());
                claiming.into_iter().chain(telling).collect()
            }
            Step::MigrateKeys { .. } | Step::Done | Step::RolledBack | Step::Blocked(_) => {
                Vec::new()
            }
        }
    }
}

/// Decides the next step for one slot. Pure: the same observation gives the same step.
pub fn next_step(o: &Observed) -> Step {
    let (s, t) = (&o.source_view, &o.target_view);
    if let Some(peer) = s.migrating_to.as_ref().filter(|p| **p != o.target) {
        return blocked_foreign(&o.source, peer);
    }
    if let Some(peer) = t.importing_from.as_ref().filter(|p| **p != o.source) {
        return blocked_foreign(&o.target, peer);
    }
    if t.owner.as_ref() == Some(&o.target) {
        return after_hand_off(o);
    }
    match o.intent {
        Intent::Complete => forward(o),
        Intent::Abort => backward(o),
    }
}

fn blocked_foreign(node: &NodeId, peer: &NodeId) -> Step {
    Step::Blocked(Blocked::ForeignMigration {
        node: node.clone(),
        peer: peer.clone(),
    })
}

fn set_slot(node: &NodeId, action: SetSlot) -> Step {
    Step::SetSlot {
        node: node.clone(),
        action,
    }
}

/// Before the hand-off, moving towards it.
fn forward(o: &Observed) -> Step {
    let (s, t) = (&o.source_view, &o.target_view);
    match &s.owner {
        None => return Step::Blocked(Blocked::Unassigned),
        Some(owner) if *owner != o.source => {
            return Step::Blocked(Blocked::OwnedElsewhere {
                seen_by: o.source.clone(),
                owner: owner.clone(),
            });
        }
        Some(_) => {}
    }
    if let Some(owner) = t.owner.as_ref().filter(|w| **w != o.source) {
        // The target's view lags or disagrees; gossip settles it, a person if it does not.
        return Step::Blocked(Blocked::OwnedElsewhere {
            seen_by: o.target.clone(),
            owner: owner.clone(),
        });
    }
    if t.importing_from.is_none() {
        if s.migrating_to.is_some() {
            return set_slot(&o.target, SetSlot::Importing(o.source.clone()));
        }
        if o.keys_in_target > 0 {
            // Nothing is open yet, so no key of the slot can have reached the target through
            // this migration: these are left-overs that would come back to life.
            return Step::Blocked(Blocked::OrphanedKeys {
                node: o.target.clone(),
                keys: o.keys_in_target,
            });
        }
        return Step::Open {
            source: o.source.clone(),
            target: o.target.clone(),
        };
    }
    if s.migrating_to.is_none() {
        return set_slot(&o.source, SetSlot::Migrating(o.target.clone()));
    }
    if o.keys_in_source > 0 {
        return Step::MigrateKeys {
            from: o.source.clone(),
            to: o.target.clone(),
        };
    }
    // Every key is across and the source, MIGRATING, sends any new one on to the target: the
    // target may claim the slot, and the source (which refuses to give up a slot it still
    // holds keys of) and the others may learn it at once.
    Step::HandOff {
        target: o.target.clone(),
        claim: true,
        tell: not_told(o),
    }
}

/// The source and the other primaries that do not see the target as the slot's owner yet.
fn not_told(o: &Observed) -> Vec<NodeId> {
    let s = &o.source_view;
    let source =
        (s.owner.as_ref() != Some(&o.target) || s.migrating_to.is_some()).then(|| o.source.clone());
    let others = o
        .others
        .iter()
        .filter(|(_, owner)| owner.as_ref() != Some(&o.target))
        .map(|(node, _)| node.clone());
    source.into_iter().chain(others).collect()
}

/// The target claims the slot: finish on the source, then on everyone else.
fn after_hand_off(o: &Observed) -> Step {
    let (s, t) = (&o.source_view, &o.target_view);
    if t.importing_from.is_some() {
        return set_slot(&o.target, SetSlot::Node(o.target.clone()));
    }
    let source_serves = s.owner.as_ref() == Some(&o.source);
    if o.keys_in_source > 0 {
        if s.migrating_to.is_some() {
            return Step::MigrateKeys {
                from: o.source.clone(),
                to: o.target.clone(),
            };
        }
        if source_serves {
            // Stop new keys landing on the source before moving the rest.
            return set_slot(&o.source, SetSlot::Migrating(o.target.clone()));
        }
        return Step::Blocked(Blocked::OrphanedKeys {
            node: o.source.clone(),
            keys: o.keys_in_source,
        });
    }
    let tell = not_told(o);
    if tell.is_empty() {
        return Step::Done;
    }
    Step::HandOff {
        target: o.target.clone(),
        claim: false,
        tell,
    }
}

/// Before the hand-off, undoing it.
fn backward(o: &Observed) -> Step {
    let (s, t) = (&o.source_view, &o.target_view);
    if o.keys_in_target > 0 {
        if t.importing_from.is_some() {
            // MIGRATE runs on a node that imports the slot, which is why the target's marker
            // is cleared last.
            return Step::MigrateKeys {
                from: o.target.clone(),
                to: o.source.clone(),
            };
        }
        return Step::Blocked(Blocked::OrphanedKeys {
            node: o.target.clone(),
            keys: o.keys_in_target,
        });
    }
    if s.migrating_to.is_some() {
        return set_slot(&o.source, SetSlot::Stable);
    }
    if t.importing_from.is_some() {
        return set_slot(&o.target, SetSlot::Stable);
    }
    Step::RolledBack
}
