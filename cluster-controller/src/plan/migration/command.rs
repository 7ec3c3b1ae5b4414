//! The exact commands the migration steps send, as argument lists (no I/O).

use std::fmt;

use crate::valkey::cluster_nodes::NodeId;
use crate::valkey::slots::{Slot, SlotRange};

/// `CLUSTER SETSLOT <slot> <action>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetSlot {
    /// `IMPORTING <source-id>`, sent to the target.
    Importing(NodeId),
    /// `MIGRATING <target-id>`, sent to the source.
    Migrating(NodeId),
    /// `NODE <owner-id>`: hands the slot over (and clears any open marker).
    Node(NodeId),
    /// `STABLE`: clears an open marker without changing the owner.
    Stable,
}

impl SetSlot {
    pub fn args(&self, slot: Slot) -> Vec<String> {
        let mut args = vec!["CLUSTER".into(), "SETSLOT".into(), slot.to_string()];
        match self {
            Self::Importing(id) => args.extend(["IMPORTING".into(), id.to_string()]),
            Self::Migrating(id) => args.extend(["MIGRATING".into(), id.to_string()]),
            Self::Node(id) => args.extend(["NODE".into(), id.to_string()]),
            Self::Stable => args.push("STABLE".into()),
        }
        args
    }
}

/// Credentials MIGRATE passes to the destination.
#[derive(Clone, PartialEq, Eq)]
pub enum MigrateAuth {
    /// `AUTH <password>` (the default user).
    Password(String),
    /// `AUTH2 <username> <password>` (an ACL user).
    User { username: String, password: String },
}

impl fmt::Debug for MigrateAuth {
    /// Never prints the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Password(_) => f.write_str("Password(***)"),
            Self::User { username, .. } => write!(f, "User({username}, ***)"),
        }
    }
}

/// `CLUSTER GETKEYSINSLOT <slot> <count>`: the next batch to move.
pub fn getkeysinslot_args(slot: Slot, count: u32) -> Vec<String> {
    vec![
        "CLUSTER".into(),
        "GETKEYSINSLOT".into(),
        slot.to_string(),
        count.to_string(),
    ]
}

/// `CLUSTER COUNTKEYSINSLOT <slot>`: the keys left, for the observed state.
pub fn countkeysinslot_args(slot: Slot) -> Vec<String> {
    vec!["CLUSTER".into(), "COUNTKEYSINSLOT".into(), slot.to_string()]
}

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

/// `MIGRATE <host> <port> "" 0 <timeout> [REPLACE] [AUTH ..|AUTH2 ..] KEYS <key>...`
/// (REPLACE going [`Direction::Forward`] only).
pub fn migrate_args(
    host: &str,
    port: u16,
    timeout_ms: u64,
    auth: Option<&MigrateAuth>,
    keys: &[Vec<u8>],
    direction: Direction,
) -> Vec<Vec<u8>> {
    let mut args: Vec<Vec<u8>> = [
        "MIGRATE",
        host,
        &port.to_string(),
        "",
        "0",
        &timeout_ms.to_string(),
    ]
    .iter()
    .map(|a| a.as_bytes().to_vec())
    .collect();
    if direction == Direction::Forward {
        args.push(b"REPLACE".to_vec());
    }
    match auth {
        Some(MigrateAuth::Password(password)) => {
            args.extend([b"AUTH".to_vec(), password.as_bytes().to_vec()]);
        }
        Some(MigrateAuth::User { username, password }) => args.extend([
            b"AUTH2".to_vec(),
            username.as_bytes().to_vec(),
            password.as_bytes().to_vec(),
        ]),
        None => {}
    }
    args.push(b"KEYS".to_vec());
    args.extend(keys.iter().cloned());
    args
}

/// `CLUSTER MIGRATESLOTS SLOTSRANGE <start> <end> [<start> <end> ...] NODE <target-id>`
/// (Valkey 9+, sent to the source).
pub fn migrateslots_args(ranges: &[SlotRange], target: &NodeId) -> Vec<String> {
    migrateslots_to_many([(ranges, target)])
}

/// One `CLUSTER MIGRATESLOTS` with a `SLOTSRANGE ... NODE <target-id>` group per target: the
/// source starts a job for each, all or none (Valkey answers an error and starts nothing when
/// one group cannot start).
pub fn migrateslots_to_many<'a>(
    moves: impl IntoIterator<Item = (&'a [SlotRange], &'a NodeId)>,
) -> Vec<String> {
    let mut args = vec!["CLUSTER".to_owned(), "MIGRATESLOTS".into()];
    for (ranges, target) in moves {
        args.push("SLOTSRANGE".into());
        for range in ranges {
            args.push(range.start().to_string());
            args.push(range.end().to_string());
        }
        args.extend(["NODE".into(), target.to_string()]);
    }
    args
}

/// Builds a `redis::Cmd` from an argument list made here.
pub fn to_cmd<A: AsRef<[u8]>>(args: &[A]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> NodeId {
        NodeId::parse(&c.to_string().repeat(40)).unwrap()
    }

    #[test]
    fn setslot() {
        assert_eq!(
            SetSlot::Importing(id('a')).args(7).join(" "),
            format!("CLUSTER SETSLOT 7 IMPORTING {}", id('a'))
        );
        assert_eq!(
            SetSlot::Stable.args(7).join(" "),
            "CLUSTER SETSLOT 7 STABLE"
        );
    }

    #[test]
    fn migrate_with_and_without_auth() {
        let keys = vec![b"k1".to_vec(), b"{t}:2".to_vec()];
        let text = |args: Vec<Vec<u8>>| {
            args.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        let forward = Direction::Forward;
        assert_eq!(
            text(migrate_args("10.0.0.1", 6379, 5000, None, &keys, forward)),
            [
                "MIGRATE", "10.0.0.1", "6379", "", "0", "5000", "REPLACE", "KEYS", "k1", "{t}:2"
            ]
        );
        let auth = MigrateAuth::User {
            username: "op".into(),
            password: "s3cret".into(),
        };
        let args = text(migrate_args("h", 1, 2, Some(&auth), &keys, forward));
        assert_eq!(args[7..10], ["AUTH2", "op", "s3cret"]);
        assert!(!format!("{auth:?}").contains("s3cret"));
        let args = text(migrate_args(
            "h",
            1,
            2,
            Some(&MigrateAuth::Password("p".into())),
            &[],
            forward,
        ));
        assert_eq!(args[7..], ["AUTH", "p", "KEYS"]);
        // Back to the source of an aborted move: never over a key the source holds.
        let back = text(migrate_args("h", 1, 2, None, &keys, Direction::Back));
        assert_eq!(back[..7], ["MIGRATE", "h", "1", "", "0", "2", "KEYS"]);
    }

    #[test]
    fn migrateslots() {
        let ranges = [
            SlotRange::new(0, 99).unwrap(),
            SlotRange::new(200, 200).unwrap(),
        ];
        assert_eq!(
            migrateslots_args(&ranges, &id('b')).join(" "),
            format!(
                "CLUSTER MIGRATESLOTS SLOTSRANGE 0 99 200 200 NODE {}",
                id('b')
            )
        );
        let (b, c) = (id('b'), id('c'));
        assert_eq!(
            migrateslots_to_many([(&ranges[..1], &b), (&ranges[1..], &c)]).join(" "),
            format!("CLUSTER MIGRATESLOTS SLOTSRANGE 0 99 NODE {b} SLOTSRANGE 200 200 NODE {c}")
        );
    }
}
