//! Data-safety rules every parent of ValkeyNodes obeys, whatever its layout (a cluster's
//! shards, a primary with its replicas). They read plain data (INFO replication, DBSIZE,
//! CONFIG GET) and say whether an action could lose data; nothing here knows of slots, shards
//! or cluster views, so a second parent calls them as they are.
//!
//! - A node never becomes the sync source of a replica that holds data it lacks: a full resync
//!   replaces the replica's data with the source's ([`sync_would_lose`]).
//! - The operator promotes no replica Valkey itself would refuse to promote: one the user
//!   forbade to fail over (`cluster-replica-no-failover`), or one whose data is too old
//!   (`cluster-replica-validity-factor`, [`too_stale`]), unless the user accepted the loss.
//! - It waits for Valkey's own failure detection before it acts for Valkey: the wait derives
//!   from the servers' effective `cluster-node-timeout` ([`FailoverSettings::takeover_after_ms`]).

use std::collections::BTreeMap;

use crate::valkey::info::{Info, LinkStatus};

/// Where a node stands in replication history: INFO replication and DBSIZE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationHistory {
    /// `master_replid`: the history it follows (a primary's own, a replica's primary's).
    pub replid: String,
    /// `master_replid2`: the history it continued from when it was promoted; all zeros when it
    /// started one of its own (a server that restarts without its data does).
    pub replid2: String,
    /// `master_repl_offset`: how far into `replid` it is.
    pub offset: i64,
    /// `second_repl_offset`: where `replid2`'s part ends; -1 without one.
    pub second_offset: i64,
    /// DBSIZE.
    pub keys: u64,
    /// `aof_enabled:1` (INFO persistence): it runs with an append-only file, so a restart that
    /// kept its identity (nodes.conf, in the same folder as the file) loaded what it had
    /// acknowledged. Such a restart starts a history of its own too, which alone says nothing
    /// of its data.
    pub aof: bool,
}

impl ReplicationHistory {
    /// The history INFO reports; `None` when a field is missing or malformed.
    pub fn from_info(info: &Info, keys: u64) -> Option<Self> {
        Some(Self {
            replid: info.get("master_replid")?.to_owned(),
            replid2: info.get("master_replid2")?.to_owned(),
            offset: info.get("master_repl_offset")?.parse().ok()?,
            second_offset: info.get("second_repl_offset")?.parse().ok()?,
            keys,
            aof: info.get("aof_enabled") == Some("1"),
        })
    }

    /// True when it began a history of its own rather than continuing another's.
    pub fn started_fresh(&self) -> bool {
        self.replid2.bytes().all(|b| b == b'0')
    }

    /// True when `other` follows this history or the one this history continued.
    fn related(&self, other: &ReplicationHistory) -> bool {
        other.replid == self.replid || (!self.started_fresh() && other.replid == self.replid2)
    }

    /// How far this node's data reaches into the history `id`: its own up to its offset, the
    /// one it continued up to where it left it; `None` for a history it never followed.
    fn reach(&self, id: &str) -> Option<i64> {
        if self.replid == id {
            Some(self.offset)
        } else if !self.started_fresh() && self.replid2 == id {
            Some(self.second_offset - 1)
        } else {
            None
        }
    }

    /// The histories this node's data comes from: its own, and the one it continued.
    fn ids(&self) -> impl Iterator<Item = &str> {
        let continued = (!self.started_fresh()).then_some(self.replid2.as_str());
        std::iter::once(self.replid.as_str()).chain(continued)
    }
}

/// Whether `source` serving `replica` (a full resync, which empties the replica first) would
/// throw away data only the replica holds, for a source not known to have restarted: `source`
/// began a history of its own that is not the replica's and keeps no append-only file, while the
/// replica, which holds keys, went further along its history than `source` has gone along its own.
///
/// A primary promoted by a failover continues its predecessor's history, so the predecessor
/// returning as its replica is not such a case: the writes it alone had are the ones
/// asynchronous replication loses in any failover, and comparing key counts there would
/// undo the failover. Nor is a source that runs with an append-only file: it restarted with its
/// data, and its key count may be below a replica's that has not resynced yet for reasons that
/// lose nothing (keys a slot migration moved away, deleted or expired since), where taking the
/// replica's side would lose the writes the source accepted since it came back. No key count is
/// compared: writes to the source could outnumber the replica's keys, never undo its history.
pub fn sync_would_lose(source: &ReplicationHistory, replica: &ReplicationHistory) -> bool {
    !source.aof
        && !source.related(replica)
        && source.started_fresh()
        && replica.offset > source.offset
        && replica.keys > 0
}

/// Whether `restarted`, a node known to have started since it last served (its data is what
/// it loaded: the engine's fence, which no write can undo, says so), lacks writes `replica`
/// holds. Decided from the replication history alone, never from key counts (writes the
/// restarted node took before the operator looked could outnumber the replica's keys):
///
/// - it began a history of its own without an append-only file (it came back empty, or with a
///   snapshot that carried no history), and the replica holds keys of another history: every
///   one of them is older than the restarted node's data, and a full resync would drop them;
/// - or the two share a history in which the replica went further than the restarted node's
///   data reaches: a node that loaded an old snapshot (an RDB file from an earlier full sync or
///   a save point, with the replication id and offset of that moment) continues that history
///   from the snapshot's offset, so it looks related to a replica that copied far more of it.
///
/// For a node that did not restart (a replica promoted by a failover) the second shape is the
/// tail asynchronous replication loses in any failover, which [`sync_would_lose`] accepts.
pub fn restart_would_lose(restarted: &ReplicationHistory, replica: &ReplicationHistory) -> bool {
    if replica.keys == 0 {
        return false;
    }
    let emptied = !restarted.aof && restarted.started_fresh() && !restarted.related(replica);
    // Only a history the node continued (loaded) counts: along its own current one, a replica
    // can look further only because its INFO was read a moment after the node's (both move on
    // while the operator reads), as with a primary the operator's own bootstrap left fenced.
    let further = replica.ids().any(|id| {
        id != restarted.replid
            && matches!(
                (replica.reach(id), restarted.reach(id)),
                (Some(theirs), Some(ours)) if theirs > ours
            )
    });
    emptied || further
}

/// The servers' failover settings, read with CONFIG GET: the user may set any of them in the
/// spec's config, so the operator reads what the servers run with rather than assuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverSettings {
    /// `cluster-node-timeout`, milliseconds.
    pub node_timeout_ms: u64,
    /// `cluster-replica-no-failover`: the user wants no automatic failover.
    pub replica_no_failover: bool,
    /// `cluster-replica-validity-factor`; 0 means any data age is acceptable.
    pub validity_factor: u64,
    /// `repl-ping-replica-period`, seconds.
    pub ping_period_s: u64,
}

impl FailoverSettings {
    /// The parameters of one `CONFIG GET`.
    pub const KEYS: [&'static str; 4] = [
        "cluster-node-timeout",
        "cluster-replica-no-failover",
        "cluster-replica-validity-factor",
        "repl-ping-replica-period",
    ];

    /// From CONFIG GET's pairs; the error names the parameter that is missing or malformed.
    pub fn from_config(config: &BTreeMap<String, String>) -> Result<Self, String> {
        let get = |key: &str| {
            config
                .get(key)
                .map(String::as_str)
                .ok_or_else(|| format!("CONFIG GET: no {key}"))
        };
        let number = |key: &str| {
            get(key).and_then(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("CONFIG GET: {key} is not a count: {v}"))
            })
        };
        let replica_no_failover = match get("cluster-replica-no-failover")? {
            "yes" => true,
            "no" => false,
            other => {
                return Err(format!(
                    "CONFIG GET: cluster-replica-no-failover is neither yes nor no: {other}"
                ));
            }
        };
        Ok(Self {
            node_timeout_ms: number("cluster-node-timeout")?,
            replica_no_failover,
            validity_factor: number("cluster-replica-validity-factor")?,
            ping_period_s: number("repl-ping-replica-period")?,
        })
    }

    /// How long a primary must have been silent before the operator acts for Valkey (takes
    /// over when no election can happen): one node timeout for Valkey to suspect it, one more
    /// and a margin so that a pause of the node or the network is not taken for a death.
    pub fn takeover_after_ms(&self) -> u64 {
        self.node_timeout_ms.saturating_mul(2).saturating_add(5_000)
    }
}

/// How long a replica has been without its primary, from INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAge {
    /// The link is up: its data is current.
    Up,
    /// Down for this many seconds.
    DownFor(u64),
    /// Never connected since it started: it holds no data Valkey would vouch for.
    Never,
}

impl LinkAge {
    /// The link age a replica's INFO reports; `None` on a primary or when INFO is malformed.
    pub fn from_info(info: &Info) -> Option<Self> {
        match info.master_link_status().ok()?? {
            LinkStatus::Up => Some(LinkAge::Up),
            LinkStatus::Down => {
                match info
                    .get("master_link_down_since_seconds")?
                    .parse::<i64>()
                    .ok()?
                {
                    seconds if seconds < 0 => Some(LinkAge::Never),
                    seconds => Some(LinkAge::DownFor(seconds.unsigned_abs())),
                }
            }
        }
    }
}

/// Valkey's own staleness rule (`clusterHandleReplicaFailover`): a replica whose link has been
/// down for longer than node timeout × validity factor + the ping period, beyond the node
/// timeout it takes to notice a failure, does not try to fail over, because it would serve old
/// data. The operator holds itself to the same rule.
pub fn too_stale(settings: &FailoverSettings, link: LinkAge) -> bool {
    if settings.validity_factor == 0 {
        return false;
    }
    let down_ms = match link {
        LinkAge::Up => return false,
        LinkAge::Never => return true,
        LinkAge::DownFor(seconds) => seconds.saturating_mul(1000),
    };
    let age = if down_ms > settings.node_timeout_ms {
        down_ms - settings.node_timeout_ms
    } else {
        down_ms
    };
    let allowed = settings.ping_period_s.saturating_mul(1000).saturating_add(
        settings
            .node_timeout_ms
            .saturating_mul(settings.validity_factor),
    );
    age > allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "96d0ece2f6a59ea2e7d9c65d0cb88573c516fac1";
    const NEW: &str = "a13e72b19c9c5302fd9e871f769acf3b97d2bc13";
    const ZERO: &str = "0000000000000000000000000000000000000000";

    fn history(replid: &str, replid2: &str, offset: i64, keys: u64) -> ReplicationHistory {
        ReplicationHistory {
            replid: replid.into(),
            replid2: replid2.into(),
            offset,
            second_offset: if replid2 == ZERO { -1 } else { offset / 2 },
            keys,
            aof: false,
        }
    }

    #[test]
    fn a_primary_that_restarted_empty_must_not_feed_its_replica() {
        let emptied = history(NEW, ZERO, 120, 3);
        let replica = history(OLD, ZERO, 2_307_497, 1000);
        assert!(sync_would_lose(&emptied, &replica));
    }

    #[test]
    fn ordinary_replication_is_safe() {
        // In step, or behind, on the same history.
        let primary = history(OLD, ZERO, 5000, 1000);
        assert!(!sync_would_lose(&primary, &history(OLD, ZERO, 4000, 990)));
        // A fresh replica holds nothing.
        assert!(!sync_would_lose(&primary, &history(NEW, ZERO, 0, 0)));
        // The old primary returning to the replica promoted in its place, with a few writes
        // the new primary never got: Valkey's ordinary failover loss, not this rule's.
        let promoted = history(NEW, OLD, 4500, 990);
        assert!(!sync_would_lose(&promoted, &history(OLD, ZERO, 5000, 1000)));
        // A primary restarted with its data (its append-only file) may serve its replica.
        let reloaded = ReplicationHistory {
            aof: true,
            ..history(NEW, ZERO, 0, 1000)
        };
        assert!(!sync_would_lose(&reloaded, &history(OLD, ZERO, 5000, 1000)));
    }

    /// A healthy primary the fence reads as not admitted (the operator's bootstrap of an old
    /// open cluster created its replication user off): its replica's offset, read a moment after
    /// its own, may be ahead along their one history. That is no loss, and no reason to take
    /// the shard from it.
    #[test]
    fn a_replica_read_a_moment_later_is_not_further_along_its_primarys_own_history() {
        let primary = continued(NEW, OLD, 2_500, 5_000, 100);
        let replica = continued(NEW, OLD, 2_500, 5_014, 100);
        assert!(!restart_would_lose(&primary, &replica));
        let fresh = history(NEW, ZERO, 5_000, 100);
        assert!(!restart_would_lose(&fresh, &history(NEW, ZERO, 5_014, 100)));
    }

    #[test]
    fn a_primary_back_empty_is_judged_by_its_history_never_by_key_counts() {
        let replica = history(OLD, ZERO, 2_307_497, 1000);
        // Clients wrote more keys to the emptied primary than its replica holds before the
        // operator looked: its data is still only what came after its fresh start.
        let outnumbered = history(NEW, ZERO, 120, 5000);
        assert!(restart_would_lose(&outnumbered, &replica));
        assert!(sync_would_lose(&outnumbered, &replica));
        // Even further along its own history than the replica along the old one: known to have
        // restarted, it lacks every key of the old history all the same.
        let busy = history(NEW, ZERO, 9_999_999, 5000);
        assert!(restart_would_lose(&busy, &replica));
        // A replica that holds nothing loses nothing, whatever its history.
        assert!(!restart_would_lose(
            &outnumbered,
            &history(OLD, ZERO, 2_307_497, 0)
        ));
        assert!(!sync_would_lose(
            &outnumbered,
            &history(OLD, ZERO, 2_307_497, 0)
        ));
    }

    #[test]
    fn a_primary_restarted_from_its_append_only_file_may_hold_fewer_keys_than_its_replica() {
        // Restarted with its AOF (a new history, as every restart starts), then a migration
        // moved 5 keys to another shard before its replica resynced: fewer keys, nothing lost.
        let reloaded = ReplicationHistory {
            aof: true,
            ..history(NEW, ZERO, 120, 699)
        };
        let replica = history(OLD, ZERO, 209_064, 704);
        assert!(!sync_would_lose(&reloaded, &replica));
        assert!(!restart_would_lose(&reloaded, &replica));
        // The same shape without an append-only file is a restart that lost its data.
        let emptied = history(NEW, ZERO, 120, 699);
        assert!(sync_would_lose(&emptied, &replica));
    }

    fn continued(
        replid: &str,
        replid2: &str,
        second_offset: i64,
        offset: i64,
        keys: u64,
    ) -> ReplicationHistory {
        ReplicationHistory {
            replid: replid.into(),
            replid2: replid2.into(),
            offset,
            second_offset,
            keys,
            aof: false,
        }
    }

    const SNAPSHOT: &str = "5b1c0b0e6f7f4f7e9d1c2b3a4f5e6d7c8b9a0f1e";

    #[test]
    fn a_node_restarted_from_an_old_snapshot_must_not_feed_a_replica_that_copied_more() {
        // It loaded an RDB file of OLD at offset 0 (left by the full sync that made it a
        // replica), so it continues OLD from there under a new id.
        let reloaded = continued(SNAPSHOT, OLD, 1, 0, 0);
        // Its replica copied OLD up to 11026, then followed NEW (it was promoted meanwhile).
        let replica = continued(NEW, OLD, 11_027, 17_107, 501);
        assert!(!sync_would_lose(&reloaded, &replica), "related by OLD");
        assert!(restart_would_lose(&reloaded, &replica));
        // The same replica, still on OLD, is also further.
        assert!(restart_would_lose(
            &reloaded,
            &history(OLD, ZERO, 9_000, 400)
        ));
        // A replica that copied no further than the snapshot, or holds nothing, loses nothing.
        assert!(!restart_would_lose(&reloaded, &history(OLD, ZERO, 0, 0)));
        assert!(!restart_would_lose(
            &continued(SNAPSHOT, OLD, 9_001, 9_000, 400),
            &history(OLD, ZERO, 9_000, 400)
        ));
        // An empty restart is what sync_would_lose already finds.
        let emptied = history(NEW, ZERO, 120, 3);
        assert!(restart_would_lose(
            &emptied,
            &history(OLD, ZERO, 2_307_497, 1000)
        ));
        // A restart with its data and a history of its own (an append-only file) is not.
        let from_aof = ReplicationHistory {
            aof: true,
            ..history(NEW, ZERO, 0, 1000)
        };
        assert!(!restart_would_lose(
            &from_aof,
            &history(OLD, ZERO, 5000, 1000)
        ));
    }

    fn settings(node_timeout_ms: u64, validity_factor: u64) -> FailoverSettings {
        FailoverSettings {
            node_timeout_ms,
            replica_no_failover: false,
            validity_factor,
            ping_period_s: 10,
        }
    }

    #[test]
    fn staleness_follows_valkeys_rule() {
        let s = settings(5000, 10);
        // 5 s to notice, then 10 × 5 s + 10 s allowed.
        assert!(!too_stale(&s, LinkAge::DownFor(65)));
        assert!(too_stale(&s, LinkAge::DownFor(66)));
        assert!(too_stale(&s, LinkAge::Never));
        assert!(!too_stale(&s, LinkAge::Up));
        assert!(!too_stale(&settings(5000, 0), LinkAge::Never));
    }

    #[test]
    fn settings_are_read_with_the_parameter_named_in_errors() {
        let mut config: BTreeMap<String, String> = [
            ("cluster-node-timeout", "30000"),
            ("cluster-replica-no-failover", "yes"),
            ("cluster-replica-validity-factor", "10"),
            ("repl-ping-replica-period", "10"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let s = FailoverSettings::from_config(&config).expect("settings");
        assert!(s.replica_no_failover);
        assert_eq!(s.takeover_after_ms(), 65_000);
        config.insert("cluster-node-timeout".into(), "soon".into());
        let error = FailoverSettings::from_config(&config).expect_err("malformed");
        assert!(error.contains("cluster-node-timeout"), "{error}");
    }
}
