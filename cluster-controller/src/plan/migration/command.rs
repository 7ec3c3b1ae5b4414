//! The arguments of the commands the migration steps send: what `CLUSTER SETSLOT` does and the
//! credentials MIGRATE carries (both spelled in [`crate::valkey::commands`]), and which way keys
//! move.

pub use crate::valkey::commands::{MigrateAuth, SetSlot};

/// Which way keys move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the source to the target, with REPLACE: the sender's copy is the live one. While a
    /// slot is open, a key exists on the target only if MIGRATE put it there or it was created
    /// there after an ASK redirect for a key the source did not have, so a same-named key on the
    /// destination is a stale left-over.
    Forward,
    /// Back from the target to the source, an aborted move, without REPLACE: a same-named key
    /// on the source means the source served the slot as its own meanwhile (it lost its
    /// MIGRATING marker: a failover to its replica, which never had it), and its copy is the one
    /// clients wrote last. Valkey answers BUSYKEY rather than overwrite it.
    Back,
}

impl Direction {
    /// Whether MIGRATE replaces a same-named key at the destination (`REPLACE`).
    pub fn replace(self) -> bool {
        self == Self::Forward
    }
}
