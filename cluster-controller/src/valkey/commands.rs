//! Every command the cluster-controller sends to Valkey and to Sentinel, spelled once: one
//! function a command, building its `redis::Cmd` from typed arguments. No I/O: the client sends
//! what is built here.
//!
//! Why one place: each command has one spelling to review against Valkey's documentation (the
//! keywords, the order of the arguments, the units) and against the rights of the users that
//! send it. `access/rights.rs` gives the operator's users exactly these commands (the operator's
//! user on the servers, and on the Sentinels), and the README's table of users lists them too:
//! a command added here is refused until its right is added there.
//!
//! Some arguments are secrets: MIGRATE's `AUTH`/`AUTH2` password, `CONFIG SET masterauth`,
//! `SENTINEL SET ... auth-pass` and `SENTINEL CONFIG SET sentinel-pass`. They go over the
//! connection only. Errors, logs and metrics name a command by its label
//! (`client::command_label`: the first word, and the subcommand of a container command such as
//! `CLUSTER` or `CONFIG`), never by its arguments, and a `Cmd` is never printed (its `Debug`
//! shows every argument). The password hashes of `ACL SETUSER` are no secret, but are not
//! printed either.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use redis::{Cmd, ToRedisArgs};

use super::cluster_nodes::NodeId;
use super::slots::{Slot, SlotRange};

/// A command: its name, and the subcommand of a container command (`CLUSTER NODES`). The
/// arguments are added by the caller.
fn command(words: &[&str]) -> Cmd {
    let mut cmd = Cmd::new();
    for word in words {
        cmd.arg(*word);
    }
    cmd
}

/// A command and its one argument.
fn command_with(words: &[&str], arg: impl ToRedisArgs) -> Cmd {
    let mut cmd = command(words);
    cmd.arg(arg);
    cmd
}

/// A duration in whole milliseconds, as Valkey's timeouts take them.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

// ---- Reading and setting a server ----

/// A section of `INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfoSection {
    /// The version and the run id.
    Server,
    /// The role, the link to the primary, the offsets.
    Replication,
    /// Loading, the append-only file.
    Persistence,
    /// The keys of each database.
    Keyspace,
}

impl InfoSection {
    fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Replication => "replication",
            Self::Persistence => "persistence",
            Self::Keyspace => "keyspace",
        }
    }
}

/// `INFO <section>...`: what the engines, the access sync and the backups read of a server.
pub fn info(sections: &[InfoSection]) -> Cmd {
    let mut cmd = command(&["INFO"]);
    for section in sections {
        cmd.arg(section.as_str());
    }
    cmd
}

/// `DBSIZE`: the keys a server holds (the engines' data-safety rules).
pub fn dbsize() -> Cmd {
    command(&["DBSIZE"])
}

/// `CONFIG GET <key>...`: settings the engines read (the failover settings, a replica's
/// priority).
pub fn config_get(keys: &[&str]) -> Cmd {
    let mut cmd = command(&["CONFIG", "GET"]);
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// `CONFIG SET <key> <value>`: a setting changed live (a replica's priority during a
/// switchover, the append-only file after a restore, the replication login of a server reached
/// through the clients' user). The value may be a secret (`masterauth`).
pub fn config_set(key: &str, value: &str) -> Cmd {
    let mut cmd = command(&["CONFIG", "SET"]);
    cmd.arg(key).arg(value);
    cmd
}

// ---- A cluster's topology ----

/// `CLUSTER NODES`: a node's view of the cluster, the engine's main read.
pub fn cluster_nodes() -> Cmd {
    command(&["CLUSTER", "NODES"])
}

/// `CLUSTER INFO`: a node's cluster state.
pub fn cluster_info() -> Cmd {
    command(&["CLUSTER", "INFO"])
}

/// `CLUSTER MEET <ip> <port> <bus-port>`: joins the node at `peer` to the cluster.
pub fn cluster_meet(peer: SocketAddr, bus_port: u16) -> Cmd {
    let mut cmd = command(&["CLUSTER", "MEET"]);
    cmd.arg(peer.ip().to_string())
        .arg(peer.port())
        .arg(bus_port);
    cmd
}

/// `CLUSTER ADDSLOTSRANGE <start> <end>...`: gives a primary slots no node serves.
pub fn cluster_addslotsrange(ranges: &[SlotRange]) -> Cmd {
    let mut cmd = command(&["CLUSTER", "ADDSLOTSRANGE"]);
    for range in ranges {
        cmd.arg(range.start()).arg(range.end());
    }
    cmd
}

/// `CLUSTER REPLICATE <primary-id>`: makes the node a replica of that primary.
pub fn cluster_replicate(primary: &NodeId) -> Cmd {
    command_with(&["CLUSTER", "REPLICATE"], primary.as_str())
}

/// `CLUSTER FORGET <node-id>`: drops a node that left from a node's table.
pub fn cluster_forget(node: &NodeId) -> Cmd {
    command_with(&["CLUSTER", "FORGET"], node.as_str())
}

/// How a replica takes over with `CLUSTER FAILOVER` (none: the planned failover, in step with
/// its primary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverMode {
    /// `FORCE`: without its primary's agreement (the primary is gone), with the cluster's vote.
    Force,
    /// `TAKEOVER`: without a vote either (no majority of primaries is left).
    Takeover,
}

/// `CLUSTER FAILOVER [FORCE|TAKEOVER]`, sent to the replica that takes over.
pub fn cluster_failover(mode: Option<FailoverMode>) -> Cmd {
    let mut cmd = command(&["CLUSTER", "FAILOVER"]);
    match mode {
        None => {}
        Some(FailoverMode::Force) => {
            cmd.arg("FORCE");
        }
        Some(FailoverMode::Takeover) => {
            cmd.arg("TAKEOVER");
        }
    }
    cmd
}

// ---- Moving slots ----

/// What `CLUSTER SETSLOT <slot>` does.
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

/// `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE <id>` or `STABLE`: a step of a pre-9 slot
/// move, or clearing a marker left open.
pub fn cluster_setslot(slot: Slot, action: &SetSlot) -> Cmd {
    let mut cmd = command(&["CLUSTER", "SETSLOT"]);
    cmd.arg(slot);
    match action {
        SetSlot::Importing(id) => cmd.arg("IMPORTING").arg(id.as_str()),
        SetSlot::Migrating(id) => cmd.arg("MIGRATING").arg(id.as_str()),
        SetSlot::Node(id) => cmd.arg("NODE").arg(id.as_str()),
        SetSlot::Stable => cmd.arg("STABLE"),
    };
    cmd
}

/// `CLUSTER COUNTKEYSINSLOT <slot>`: the keys of a slot left on a node, for a pre-9 move.
pub fn cluster_countkeysinslot(slot: Slot) -> Cmd {
    command_with(&["CLUSTER", "COUNTKEYSINSLOT"], slot)
}

/// `CLUSTER GETKEYSINSLOT <slot> <count>`: the next batch of keys a pre-9 move migrates.
pub fn cluster_getkeysinslot(slot: Slot, count: u32) -> Cmd {
    let mut cmd = command(&["CLUSTER", "GETKEYSINSLOT"]);
    cmd.arg(slot).arg(count);
    cmd
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

/// `MIGRATE <ip> <port> "" 0 <timeout-ms> [REPLACE] [AUTH <password> | AUTH2 <user> <password>]
/// KEYS <key>...`: one batch of a pre-9 slot move, from the node it is sent to to `to`.
/// `replace` overwrites a key of the same name at the destination. The password is a secret.
pub fn migrate(
    to: SocketAddr,
    timeout: Duration,
    replace: bool,
    auth: Option<&MigrateAuth>,
    keys: &[Vec<u8>],
) -> Cmd {
    let mut cmd = command(&["MIGRATE"]);
    cmd.arg(to.ip().to_string())
        .arg(to.port())
        .arg("")
        .arg(0)
        .arg(millis(timeout));
    if replace {
        cmd.arg("REPLACE");
    }
    match auth {
        Some(MigrateAuth::Password(password)) => {
            cmd.arg("AUTH").arg(password);
        }
        Some(MigrateAuth::User { username, password }) => {
            cmd.arg("AUTH2").arg(username).arg(password);
        }
        None => {}
    }
    cmd.arg("KEYS");
    for key in keys {
        cmd.arg(key.as_slice());
    }
    cmd
}

/// `CLUSTER MIGRATESLOTS SLOTSRANGE <start> <end>... NODE <target-id>`, one `SLOTSRANGE ...
/// NODE` group per target: Valkey 9's atomic slot migration, sent to the source, which starts a
/// job for each group, all or none.
pub fn cluster_migrateslots<'a>(
    moves: impl IntoIterator<Item = (&'a [SlotRange], &'a NodeId)>,
) -> Cmd {
    let mut cmd = command(&["CLUSTER", "MIGRATESLOTS"]);
    for (ranges, target) in moves {
        cmd.arg("SLOTSRANGE");
        for range in ranges {
            cmd.arg(range.start()).arg(range.end());
        }
        cmd.arg("NODE").arg(target.as_str());
    }
    cmd
}

/// `CLUSTER GETSLOTMIGRATIONS`: the atomic slot migration jobs a Valkey 9 node knows.
pub fn cluster_getslotmigrations() -> Cmd {
    command(&["CLUSTER", "GETSLOTMIGRATIONS"])
}

/// `CLUSTER CANCELSLOTMIGRATIONS ALL`: stops every atomic slot migration job of a node.
pub fn cluster_cancelslotmigrations_all() -> Cmd {
    command_with(&["CLUSTER", "CANCELSLOTMIGRATIONS"], "ALL")
}

// ---- A replication's primary and replicas ----

/// `REPLICAOF <ip> <port>`: makes the server a replica of `primary`.
pub fn replicaof(primary: SocketAddr) -> Cmd {
    let mut cmd = command(&["REPLICAOF"]);
    cmd.arg(primary.ip().to_string()).arg(primary.port());
    cmd
}

/// `REPLICAOF NO ONE`: makes the server a primary.
pub fn replicaof_no_one() -> Cmd {
    let mut cmd = command(&["REPLICAOF"]);
    cmd.arg("NO").arg("ONE");
    cmd
}

/// `FAILOVER TO <ip> <port> TIMEOUT <ms>`, sent to a primary: it pauses writes until `to` has
/// every one (at most `timeout`), then becomes a replica of `to`. A planned switchover.
pub fn failover_to(to: SocketAddr, timeout: Duration) -> Cmd {
    let mut cmd = command(&["FAILOVER"]);
    cmd.arg("TO")
        .arg(to.ip().to_string())
        .arg(to.port())
        .arg("TIMEOUT")
        .arg(millis(timeout));
    cmd
}

// ---- Users ----

/// `ACL USERS`: the users a server holds (which to admit, which to delete).
pub fn acl_users() -> Cmd {
    command(&["ACL", "USERS"])
}

/// `ACL GETUSER <user>`: whether a user is on (the replication fence). The reply holds
/// password hashes.
pub fn acl_getuser(user: &str) -> Cmd {
    command_with(&["ACL", "GETUSER"], user)
}

/// `ACL SETUSER <user> <rule>...`: a user created or changed live (the users kept in step, a
/// server admitted, the rights of a newer version). The rules may hold password hashes.
pub fn acl_setuser<R: AsRef<str>>(user: &str, rules: impl IntoIterator<Item = R>) -> Cmd {
    let mut cmd = command(&["ACL", "SETUSER"]);
    cmd.arg(user);
    for rule in rules {
        cmd.arg(rule.as_ref());
    }
    cmd
}

/// `ACL DELUSER <user>`: a user no longer wanted.
pub fn acl_deluser(user: &str) -> Cmd {
    command_with(&["ACL", "DELUSER"], user)
}

// ---- Clients ----

/// `CLIENT PAUSE <ms> WRITE`: writes paused on a primary for at most `window` (a backup of one
/// instant), reads go on.
pub fn client_pause_writes(window: Duration) -> Cmd {
    let mut cmd = command(&["CLIENT", "PAUSE"]);
    cmd.arg(millis(window)).arg("WRITE");
    cmd
}

/// `CLIENT UNPAUSE`: writes resume (a no-op on a server that is not paused).
pub fn client_unpause() -> Cmd {
    command(&["CLIENT", "UNPAUSE"])
}

// ---- Sentinel ----

/// `SENTINEL MONITOR <name> <ip> <port> <quorum>`: a Sentinel starts watching `primary` as
/// `master_name`.
pub fn sentinel_monitor(master_name: &str, primary: SocketAddr, quorum: u32) -> Cmd {
    let mut cmd = command(&["SENTINEL", "MONITOR"]);
    cmd.arg(master_name)
        .arg(primary.ip().to_string())
        .arg(primary.port())
        .arg(quorum);
    cmd
}

/// `SENTINEL CONFIG SET <key> <value>`: a Sentinel's own setting (how it logs in to its peers:
/// `sentinel-user`, `sentinel-pass`). The value may be a secret.
pub fn sentinel_config_set(key: &str, value: &str) -> Cmd {
    let mut cmd = command(&["SENTINEL", "CONFIG", "SET"]);
    cmd.arg(key).arg(value);
    cmd
}

/// `SENTINEL SET <name> quorum <n> down-after-milliseconds <ms> failover-timeout <ms>
/// [auth-user <user> auth-pass <password>]`: how a Sentinel watches `master_name`, and the
/// `(user, password)` it logs in to the servers with. The password is a secret.
pub fn sentinel_set(
    master_name: &str,
    quorum: u32,
    down_after_ms: u64,
    failover_timeout_ms: u64,
    login: Option<(&str, &str)>,
) -> Cmd {
    let mut cmd = command(&["SENTINEL", "SET"]);
    cmd.arg(master_name)
        .arg("quorum")
        .arg(quorum)
        .arg("down-after-milliseconds")
        .arg(down_after_ms)
        .arg("failover-timeout")
        .arg(failover_timeout_ms);
    if let Some((user, password)) = login {
        cmd.arg("auth-user")
            .arg(user)
            .arg("auth-pass")
            .arg(password);
    }
    cmd
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME <name>`: the primary a Sentinel names to clients.
pub fn sentinel_get_master_addr_by_name(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME"], master_name)
}

/// `SENTINEL MASTER <name>`: a Sentinel's settings and flags for the name.
pub fn sentinel_master(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "MASTER"], master_name)
}

/// `SENTINEL REPLICAS <name>`: the replicas a Sentinel knows of the name, with their priority.
pub fn sentinel_replicas(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "REPLICAS"], master_name)
}

/// `SENTINEL SENTINELS <name>`: the other Sentinels a Sentinel knows watching the name.
pub fn sentinel_sentinels(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "SENTINELS"], master_name)
}

/// `SENTINEL FAILOVER <name>`: the Sentinel elects a new primary (the end of a planned
/// switchover).
pub fn sentinel_failover(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "FAILOVER"], master_name)
}

/// `SENTINEL RESET <name>`: the Sentinel forgets the replicas and Sentinels it knows of the name
/// (a glob pattern to Valkey: the name must hold no glob character).
pub fn sentinel_reset(master_name: &str) -> Cmd {
    command_with(&["SENTINEL", "RESET"], master_name)
}

/// A command's arguments as text, its name first, for tests that compare spellings.
#[cfg(test)]
pub(crate) fn words(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<not an argument>".to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> NodeId {
        NodeId::parse(&c.to_string().repeat(40)).unwrap()
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn line(cmd: &Cmd) -> String {
        words(cmd).join(" ")
    }

    #[test]
    fn reads_and_settings() {
        use InfoSection::*;
        assert_eq!(
            line(&info(&[Server, Replication, Persistence, Keyspace])),
            "INFO server replication persistence keyspace"
        );
        assert_eq!(line(&info(&[Server])), "INFO server");
        assert_eq!(line(&dbsize()), "DBSIZE");
        assert_eq!(
            line(&config_get(&["a", "b"])),
            "CONFIG GET a b",
            "one CONFIG GET for several keys"
        );
        assert_eq!(
            line(&config_set("replica-priority", "0")),
            "CONFIG SET replica-priority 0"
        );
    }

    #[test]
    fn cluster_topology() {
        assert_eq!(line(&cluster_nodes()), "CLUSTER NODES");
        assert_eq!(line(&cluster_info()), "CLUSTER INFO");
        assert_eq!(
            line(&cluster_meet(addr("10.0.0.2:6379"), 16379)),
            "CLUSTER MEET 10.0.0.2 6379 16379"
        );
        assert_eq!(
            line(&cluster_meet(addr("[fd00::2]:6379"), 16379)),
            "CLUSTER MEET fd00::2 6379 16379",
            "an IPv6 address goes without brackets"
        );
        let ranges = [
            SlotRange::new(0, 99).unwrap(),
            SlotRange::new(200, 200).unwrap(),
        ];
        assert_eq!(
            line(&cluster_addslotsrange(&ranges)),
            "CLUSTER ADDSLOTSRANGE 0 99 200 200"
        );
        assert_eq!(
            line(&cluster_replicate(&id('a'))),
            format!("CLUSTER REPLICATE {}", id('a'))
        );
        assert_eq!(
            line(&cluster_forget(&id('b'))),
            format!("CLUSTER FORGET {}", id('b'))
        );
        assert_eq!(line(&cluster_failover(None)), "CLUSTER FAILOVER");
        assert_eq!(
            line(&cluster_failover(Some(FailoverMode::Force))),
            "CLUSTER FAILOVER FORCE"
        );
        assert_eq!(
            line(&cluster_failover(Some(FailoverMode::Takeover))),
            "CLUSTER FAILOVER TAKEOVER"
        );
    }

    #[test]
    fn setslot() {
        assert_eq!(
            line(&cluster_setslot(7, &SetSlot::Importing(id('a')))),
            format!("CLUSTER SETSLOT 7 IMPORTING {}", id('a'))
        );
        assert_eq!(
            line(&cluster_setslot(7, &SetSlot::Migrating(id('b')))),
            format!("CLUSTER SETSLOT 7 MIGRATING {}", id('b'))
        );
        assert_eq!(
            line(&cluster_setslot(16383, &SetSlot::Node(id('c')))),
            format!("CLUSTER SETSLOT 16383 NODE {}", id('c'))
        );
        assert_eq!(
            line(&cluster_setslot(7, &SetSlot::Stable)),
            "CLUSTER SETSLOT 7 STABLE"
        );
        assert_eq!(
            line(&cluster_countkeysinslot(7)),
            "CLUSTER COUNTKEYSINSLOT 7"
        );
        assert_eq!(
            line(&cluster_getkeysinslot(7, 100)),
            "CLUSTER GETKEYSINSLOT 7 100"
        );
    }

    #[test]
    fn migrate_with_and_without_auth() {
        let keys = vec![b"k1".to_vec(), b"{t}:2".to_vec(), vec![0xff, 0]];
        let to = addr("10.0.0.1:6379");
        let timeout = Duration::from_secs(5);
        assert_eq!(
            words(&migrate(to, timeout, true, None, &keys)),
            [
                "MIGRATE",
                "10.0.0.1",
                "6379",
                "",
                "0",
                "5000",
                "REPLACE",
                "KEYS",
                "k1",
                "{t}:2",
                "\u{fffd}\0"
            ]
        );
        // Binary keys go as they are.
        let packed = migrate(to, timeout, true, None, &keys).get_packed_command();
        assert!(packed.ends_with(b"$2\r\n\xff\x00\r\n"));
        let auth = MigrateAuth::User {
            username: "op".into(),
            password: "s3cret".into(),
        };
        let args = words(&migrate(to, timeout, true, Some(&auth), &keys));
        assert_eq!(args[7..11], ["AUTH2", "op", "s3cret", "KEYS"]);
        assert!(!format!("{auth:?}").contains("s3cret"));
        let password = MigrateAuth::Password("p".into());
        let args = words(&migrate(to, timeout, true, Some(&password), &[]));
        assert_eq!(args[7..], ["AUTH", "p", "KEYS"]);
        assert!(!format!("{password:?}").contains("\"p\""));
        // Back to the source of an aborted move: never over a key the source holds.
        let back = words(&migrate(to, timeout, false, None, &keys));
        assert_eq!(
            back[..7],
            ["MIGRATE", "10.0.0.1", "6379", "", "0", "5000", "KEYS"]
        );
    }

    #[test]
    fn atomic_slot_migration() {
        let ranges = [
            SlotRange::new(0, 99).unwrap(),
            SlotRange::new(200, 200).unwrap(),
        ];
        let (b, c) = (id('b'), id('c'));
        assert_eq!(
            line(&cluster_migrateslots([(&ranges[..], &b)])),
            format!("CLUSTER MIGRATESLOTS SLOTSRANGE 0 99 200 200 NODE {b}")
        );
        assert_eq!(
            line(&cluster_migrateslots([
                (&ranges[..1], &b),
                (&ranges[1..], &c)
            ])),
            format!("CLUSTER MIGRATESLOTS SLOTSRANGE 0 99 NODE {b} SLOTSRANGE 200 200 NODE {c}")
        );
        assert_eq!(
            line(&cluster_getslotmigrations()),
            "CLUSTER GETSLOTMIGRATIONS"
        );
        assert_eq!(
            line(&cluster_cancelslotmigrations_all()),
            "CLUSTER CANCELSLOTMIGRATIONS ALL"
        );
    }

    #[test]
    fn replication() {
        assert_eq!(
            line(&replicaof(addr("10.0.0.3:6380"))),
            "REPLICAOF 10.0.0.3 6380"
        );
        assert_eq!(line(&replicaof_no_one()), "REPLICAOF NO ONE");
        assert_eq!(
            line(&failover_to(addr("10.0.0.3:6379"), Duration::from_secs(5))),
            "FAILOVER TO 10.0.0.3 6379 TIMEOUT 5000"
        );
    }

    #[test]
    fn users() {
        assert_eq!(line(&acl_users()), "ACL USERS");
        assert_eq!(line(&acl_getuser("replication")), "ACL GETUSER replication");
        assert_eq!(
            line(&acl_setuser("operator", "+a +b".split_whitespace())),
            "ACL SETUSER operator +a +b"
        );
        assert_eq!(
            line(&acl_setuser("app", vec!["on".to_owned(), "#aa".to_owned()])),
            "ACL SETUSER app on #aa"
        );
        assert_eq!(line(&acl_deluser("old")), "ACL DELUSER old");
    }

    #[test]
    fn clients() {
        assert_eq!(
            line(&client_pause_writes(Duration::from_millis(2500))),
            "CLIENT PAUSE 2500 WRITE"
        );
        assert_eq!(line(&client_unpause()), "CLIENT UNPAUSE");
    }

    #[test]
    fn sentinel() {
        assert_eq!(
            line(&sentinel_monitor("orders", addr("10.0.0.4:6379"), 2)),
            "SENTINEL MONITOR orders 10.0.0.4 6379 2"
        );
        assert_eq!(
            line(&sentinel_config_set("sentinel-user", "sentinel")),
            "SENTINEL CONFIG SET sentinel-user sentinel"
        );
        assert_eq!(
            line(&sentinel_set("orders", 2, 5000, 60000, None)),
            "SENTINEL SET orders quorum 2 down-after-milliseconds 5000 failover-timeout 60000"
        );
        assert_eq!(
            words(&sentinel_set(
                "orders",
                2,
                5000,
                60000,
                Some(("sentinel", "pw"))
            ))[9..],
            ["auth-user", "sentinel", "auth-pass", "pw"]
        );
        for (cmd, spelled) in [
            (
                sentinel_get_master_addr_by_name("orders"),
                "SENTINEL GET-MASTER-ADDR-BY-NAME orders",
            ),
            (sentinel_master("orders"), "SENTINEL MASTER orders"),
            (sentinel_replicas("orders"), "SENTINEL REPLICAS orders"),
            (sentinel_sentinels("orders"), "SENTINEL SENTINELS orders"),
            (sentinel_failover("orders"), "SENTINEL FAILOVER orders"),
            (sentinel_reset("orders"), "SENTINEL RESET orders"),
        ] {
            assert_eq!(line(&cmd), spelled);
        }
    }

    /// A command's label shows at most its first two words (`client::command_label`): no secret
    /// stands there.
    #[test]
    fn secrets_come_after_the_words_a_label_shows() {
        let secret = "s3cret";
        let auth = MigrateAuth::User {
            username: "op".into(),
            password: secret.into(),
        };
        for cmd in [
            migrate(
                addr("10.0.0.1:6379"),
                Duration::from_secs(5),
                true,
                Some(&auth),
                &[],
            ),
            migrate(
                addr("10.0.0.1:6379"),
                Duration::from_secs(5),
                false,
                Some(&MigrateAuth::Password(secret.into())),
                &[],
            ),
            config_set("masterauth", secret),
            sentinel_config_set("sentinel-pass", secret),
            sentinel_set("orders", 2, 5000, 60000, Some(("sentinel", secret))),
        ] {
            let words = words(&cmd);
            assert!(words.contains(&secret.to_owned()), "{words:?}");
            assert!(!words[..2].contains(&secret.to_owned()), "{words:?}");
        }
    }
}
