//! What each Valkey user may do. The operator's own users get exactly the commands the operator
//! sends as them (each spelled once, in [`crate::valkey::commands`]); client users get data
//! commands and never administration, whatever their own rules say. The README lists the same
//! (keep them in step).

use crate::valkey::Version;

/// The clients' user, always present: password from the parent's Secret, or none when
/// authentication is off.
pub const DEFAULT_USER: &str = "default";
/// The cluster-controller's own commands: topology, slot moves, INFO, and the users.
pub const OPERATOR_USER: &str = "operator";
/// Probes, the node-controller and the metrics exporter: PING, INFO and what the exporter reads.
pub const HEALTHCHECK_USER: &str = "healthcheck";
/// Replicas syncing from their primary, and Valkey 9's slot imports between primaries. Fenced:
/// off whenever a server starts, turned on by the engine once the server is settled.
pub const REPLICATION_USER: &str = "replication";
/// Backups: a replication link that asks for the snapshot only (`REPLCONF rdb-only`), and
/// nothing else ([`BACKUP_RULES`]).
pub const BACKUP_USER: &str = "backup";

/// Sentinel, logging in to the servers it watches (a replication with `spec.sentinel`), and to
/// its peer Sentinels. Fenced on the servers by its rights ([`SENTINEL_START_RULES`] until the
/// engine admits the server): a server that restarted refuses Sentinel's PING and INFO, so
/// Sentinel takes it for down and never elects a member the engine has not judged (one back
/// empty, above all).
pub const SENTINEL_USER: &str = "sentinel";

/// Users a parent's spec may not name: the clients' default user and the operator's own.
pub const RESERVED_USERS: &[&str] = &[
    DEFAULT_USER,
    OPERATOR_USER,
    HEALTHCHECK_USER,
    REPLICATION_USER,
    BACKUP_USER,
    SENTINEL_USER,
];

/// Taken from every client user after its own rules: Valkey's `@admin` category (ACL, CONFIG,
/// DEBUG, MODULE, SHUTDOWN, REPLICAOF, FAILOVER, PSYNC/SYNC, MONITOR, SAVE, the CLUSTER
/// commands that change the topology, CLIENT KILL, ...) and moving keys between servers
/// (MIGRATE, RESTORE), which bypasses the cluster's own slot ownership.
pub const CLIENT_DENY: &str = "-@admin -migrate -restore -restore-asking";

/// The default user's rules before [`CLIENT_DENY`]: every key, channel and data command.
pub const DEFAULT_CLIENT_RULES: &str = "~* &* +@all";

/// The operator: what the engines send (a cluster's CLUSTER topology and slot commands, INFO,
/// DBSIZE, MIGRATE and, on the receiving side of MIGRATE, RESTORE-ASKING and SELECT; a
/// replication's REPLICAOF and FAILOVER), CONFIG GET/SET (Valkey's settings, and reloading TLS
/// files on servers before 9.1), and the users (ACL GETUSER/SETUSER/DELUSER/USERS: applying users
/// live, lifting the replication fence). Every name here exists on Valkey 8.0, so one ACL file
/// serves every version.
pub const OPERATOR_RULES: &str = "~* &* -@all +@connection +ping +info +dbsize +select \
+replicaof +failover +cluster|info +cluster|nodes +cluster|shards +cluster|myid +cluster|meet +cluster|addslotsrange \
+cluster|replicate +cluster|forget +cluster|setslot +cluster|getkeysinslot \
+cluster|countkeysinslot +cluster|failover +migrate +restore-asking +asking +readonly \
+config|get +config|set +acl|getuser +acl|setuser +acl|deluser +acl|users";

/// The operator's commands that exist only from Valkey 9.0 (atomic slot migration), given live
/// to servers of that version (an ACL file naming them would not load on 8.0).
pub const OPERATOR_RULES_9: &str =
    "+cluster|migrateslots +cluster|getslotmigrations +cluster|cancelslotmigrations";

/// Health checks, the node-controller and the metrics exporter: PING and INFO, and CONFIG
/// GET/SET, with which the node-controller sets the settings Valkey changes at runtime on the
/// running server (the ValkeyNode contract's live config); then what the exporter reads beside
/// INFO and CONFIG GET (Redis exporter 1.45 against Valkey 8.0 and 9.1, every command it sent
/// and was refused): SLOWLOG GET/LEN, LATENCY LATEST and, in cluster mode, CLUSTER INFO. All
/// read only; no keys, no channels. (It would also name its connection with CLIENT SETNAME: the
/// node-controller turns that off rather than grant it.) A change here reaches running servers
/// live, like any change of users: no pod restarts for it.
pub const HEALTHCHECK_RULES: &str = "resetchannels -@all +ping +info +config|get +config|set \
+slowlog|get +slowlog|len +latency|latest +cluster|info";

/// Replication: a replica's PSYNC/SYNC/REPLCONF, and, on Valkey 9, the stream of an atomic slot
/// import, which the importing primary runs as this user: the data commands that rebuild the
/// moved keys, never administration.
pub const REPLICATION_RULES: &str = "~* &* +@all -@admin +psync +sync +replconf";

/// Backups: the handshake of an rdb-only replication link and nothing else (no key, no other
/// command); the backup crate's, where the capture that needs exactly these lives. Not fenced: an
/// rdb-only link never makes a server a replica of anything.
pub const BACKUP_RULES: &str = backup::capture::BACKUP_RULES;

/// Sentinel on the servers it watches: what it sends them (the hello channel's SUBSCRIBE and
/// PUBLISH, PING, INFO, ROLE, naming its connections, and a failover's `MULTI; REPLICAOF NO ONE;
/// CONFIG REWRITE; CLIENT KILL; EXEC`: a command refused while queued would abort the whole
/// transaction, so each is here), no key and no other channel. Valkey's documented set for a
/// Sentinel user, checked against real servers in the access rights component test.
pub const SENTINEL_RULES: &str = "resetchannels &__sentinel__:hello -@all +ping +info +role \
+multi +exec +slaveof +replicaof +config|rewrite +client|setname +client|kill +script|kill \
+subscribe +publish";

/// The `sentinel` user's rights on a server the engine has not admitted: it may log in (so its
/// connection is the `sentinel` user's, and gains [`SENTINEL_RULES`] the moment the engine
/// admits the server, without reconnecting: Sentinel keeps a connection whose login failed, and
/// would never log in again while the server answers) and greet its peers on the hello channel,
/// nothing else. A user switched off, as the replication user is, would be such a failed login.
pub const SENTINEL_START_RULES: &str =
    "resetchannels &__sentinel__:hello -@all +client|setname +subscribe +publish";

/// The rules a user gains when the engine admits its server, for a user that starts with fewer
/// (the `sentinel` user); `None` for every other user.
pub fn admitted_rules(user: &str) -> Option<&'static str> {
    (user == SENTINEL_USER).then_some(SENTINEL_RULES)
}

/// What a client may ask of a Sentinel: every command but administration, and of `SENTINEL` the
/// questions (which primary, its replicas, the other Sentinels), never MONITOR, SET, FAILOVER,
/// RESET, REMOVE or CONFIG. In Sentinel mode every `SENTINEL` subcommand and `ROLE` are `@admin`.
pub const SENTINEL_CLIENT_RULES: &str = "~* &* +@all -@admin +role \
+sentinel|get-master-addr-by-name +sentinel|get-primary-addr-by-name +sentinel|master \
+sentinel|primary +sentinel|masters +sentinel|primaries +sentinel|replicas +sentinel|slaves \
+sentinel|sentinels +sentinel|myid +sentinel|ckquorum";

/// The operator on a Sentinel: the `SENTINEL` command (telling it what to watch, its settings,
/// planned failovers), PING and INFO, and `ACL SETUSER` (a clients' password changed reaches a
/// running Sentinel).
pub const SENTINEL_OPERATOR_RULES: &str =
    "resetchannels -@all +@connection +ping +info +sentinel +acl|setuser";

/// Probes on a Sentinel: PING and INFO.
pub const SENTINEL_HEALTHCHECK_RULES: &str = "resetchannels -@all +ping +info";

/// A peer Sentinel: Sentinels ask each other whether the primary is down, vote, and publish
/// hellos; every command of a Sentinel is theirs.
pub const SENTINEL_PEER_RULES: &str = "~* &* +@all";

/// Valkey 9's slot import handshake (CLUSTER SYNCSLOTS), given live to servers of that version.
pub const REPLICATION_RULES_9: &str = "+cluster|syncslots";

/// Rules a server of `version` gets for `user` beyond its ACL file.
pub fn extras(user: &str, version: Version) -> Option<&'static str> {
    if version.major < 9 {
        return None;
    }
    match user {
        OPERATOR_USER => Some(OPERATOR_RULES_9),
        REPLICATION_USER => Some(REPLICATION_RULES_9),
        _ => None,
    }
}
