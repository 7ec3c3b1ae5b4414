//! Moving one slot on Valkey before 9, the way `valkey-cli --cluster reshard` does, as a
//! stateless machine.
//!
//! Forward: `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the source, MIGRATE the
//! keys in batches, `SETSLOT NODE <target>` on the target (the hand-off: the target claims the
//! slot with a new epoch), on the source, then on the other primaries.
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
        if s.migrating_to.is_none() && o.keys_in_target > 0 {
            // Nothing is open yet, so no key of the slot can have reached the target through
            // this migration: these are left-overs that would come back to life.
            return Step::Blocked(Blocked::OrphanedKeys {
                node: o.target.clone(),
                keys: o.keys_in_target,
            });
        }
        return set_slot(&o.target, SetSlot::Importing(o.source.clone()));
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
    set_slot(&o.target, SetSlot::Node(o.target.clone()))
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
    if s.owner.as_ref() != Some(&o.target) || s.migrating_to.is_some() {
        return set_slot(&o.source, SetSlot::Node(o.target.clone()));
    }
    for (node, owner) in &o.others {
        if owner.as_ref() != Some(&o.target) {
            return set_slot(node, SetSlot::Node(o.target.clone()));
        }
    }
    Step::Done
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
