//! What one server of a replication says about itself, parsed from `INFO server replication`,
//! `DBSIZE` and (when the replication user is fenced) `ACL GETUSER`. Pure: the text goes in, the
//! state comes out, and a reply that cannot be understood is an error naming the field.

use std::net::{IpAddr, SocketAddr};

use crate::engine::safety::{LinkAge, ReplicationHistory};
use crate::valkey::info::{Aof, ConnectedReplica, Info, LinkStatus, Role};
use crate::valkey::{ParseError, Version};

/// Where every member starts: a replica of an address nothing listens on (`replicaof 127.0.0.1
/// 0` in its valkey.conf). A server that (re)starts therefore accepts no write and serves no
/// replica (Valkey answers a replica's sync with NOMASTERLINK while its own link is down) until
/// the operator decides what it is: the primary again, or a replica of the primary. That is the
/// fence of this mode, and it holds with or without authentication.
pub const PARKED_HOST: &str = "127.0.0.1";
pub const PARKED_PORT: u16 = 0;

/// A replica's link to the server it follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `master_host:master_port`.
    pub host: String,
    pub port: u16,
    pub link: LinkStatus,
    pub age: LinkAge,
    /// `master_last_io_seconds_ago`: how long since the replica last heard from the server it
    /// follows, while the link counts as up (Valkey marks it down only after `repl-timeout`).
    pub last_io_seconds: Option<u64>,
    /// A full sync is in progress.
    pub syncing: bool,
}

impl Upstream {
    /// Following the placeholder every member starts with: restarted, not yet told its place.
    pub fn parked(&self) -> bool {
        self.host == PARKED_HOST && self.port == PARKED_PORT
    }

    /// Following `address`.
    pub fn is(&self, address: SocketAddr) -> bool {
        self.port == address.port()
            && self
                .host
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip == address.ip())
    }

    /// The link is up and no full sync runs: the replica has its primary's writes as they come.
    pub fn in_step(&self) -> bool {
        self.link == LinkStatus::Up && !self.syncing
    }

    /// How long this replica has not heard from the server it follows: since its link went
    /// down, or, while the link still counts as up, since the last byte came. `None` when it
    /// never had a link (a restarted member).
    pub fn silent_for(&self) -> Option<u64> {
        match (self.link, self.age) {
            (_, LinkAge::Never) => None,
            (LinkStatus::Down, LinkAge::DownFor(seconds)) => Some(seconds),
            _ => Some(self.last_io_seconds.unwrap_or(0)),
        }
    }
}

/// One server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    pub address: SocketAddr,
    pub version: Version,
    /// `None` on a primary.
    pub upstream: Option<Upstream>,
    /// Its place in replication history, and its key count.
    pub history: ReplicationHistory,
    /// `slave_repl_offset` of a replica; the primary's own offset on a primary.
    pub offset: i64,
    /// Loading its data from disk: it can neither serve nor be judged yet.
    pub loading: bool,
    /// `master_failover_state`: a planned switchover (FAILOVER) in progress when not
    /// `no-failover`.
    pub failover_state: String,
    /// The replicas a primary lists.
    pub replicas: Vec<ConnectedReplica>,
    /// Whether the replication user may log in (`ACL GETUSER`), when the operator fences it.
    pub replication_admitted: Option<bool>,
    /// `uptime_in_seconds`: how long this server process has run.
    pub uptime_seconds: u64,
    /// Its append-only file (`INFO persistence`; `None` when not given): a restored member's is
    /// turned on live by the parent, and must be written before its snapshot is let go.
    pub aof: Option<Aof>,
}

impl ServerState {
    /// From `INFO server replication` and `DBSIZE`.
    pub fn from_info(address: SocketAddr, info: &Info, keys: u64) -> Result<Self, ParseError> {
        let missing = |key: &str| ParseError::Missing {
            reply: "INFO",
            key: key.to_owned(),
        };
        let upstream = match info.role()? {
            Role::Primary => None,
            Role::Replica => Some(Upstream {
                host: info
                    .get("master_host")
                    .ok_or_else(|| missing("master_host"))?
                    .to_owned(),
                port: info
                    .get("master_port")
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| missing("master_port"))?,
                link: info
                    .master_link_status()?
                    .ok_or_else(|| missing("master_link_status"))?,
                age: LinkAge::from_info(info)
                    .ok_or_else(|| missing("master_link_down_since_seconds"))?,
                last_io_seconds: info
                    .get("master_last_io_seconds_ago")
                    .and_then(|s| s.parse::<u64>().ok()),
                syncing: info.master_sync_in_progress()?.unwrap_or(false),
            }),
        };
        let history =
            ReplicationHistory::from_info(info, keys).ok_or_else(|| missing("master_replid"))?;
        let offset = match &upstream {
            Some(_) => info.slave_repl_offset()?.unwrap_or(history.offset),
            None => history.offset,
        };
        Ok(Self {
            address,
            version: info.server_version()?,
            upstream,
            history,
            offset,
            loading: info.loading()?,
            failover_state: info
                .get("master_failover_state")
                .unwrap_or("no-failover")
                .to_owned(),
            replicas: info.replicas()?,
            replication_admitted: None,
            uptime_seconds: info
                .get("uptime_in_seconds")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            aof: Aof::of(|k| info.get(k).map(str::to_owned)),
        })
    }

    pub fn is_primary(&self) -> bool {
        self.upstream.is_none()
    }

    /// A replica of the placeholder: it restarted and waits for the operator.
    pub fn parked(&self) -> bool {
        self.upstream.as_ref().is_some_and(Upstream::parked)
    }

    /// A replica of `primary` whose link is up and not in a full sync.
    pub fn in_step_with(&self, primary: SocketAddr) -> bool {
        !self.loading
            && self
                .upstream
                .as_ref()
                .is_some_and(|u| u.is(primary) && u.in_step())
    }

    /// A switchover (FAILOVER) is running on this primary.
    pub fn switching_over(&self) -> bool {
        self.failover_state != "no-failover"
    }

    pub fn keys(&self) -> u64 {
        self.history.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::valkey::info;

    const PARKED_9: &str = "# Server\r\nvalkey_version:9.1.2\r\n\r\n# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:0\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\nmaster_sync_in_progress:0\r\nslave_read_repl_offset:1\r\nslave_repl_offset:1\r\nmaster_link_down_since_seconds:-1\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nreplicas_waiting_psync:0\r\nmaster_failover_state:no-failover\r\nmaster_replid:89a5db79cfea34f9c38ae0fd4af063de0311292c\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:0\r\nrepl_backlog_size:10485760\r\nrepl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\n# Persistence\r\nloading:0\r\n";

    const PRIMARY_8: &str = "# Server\r\nredis_version:7.2.4\r\nvalkey_version:8.0.1\r\n\r\n# Persistence\r\nloading:0\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=10.213.1.5,port=6379,state=online,offset=1498,lag=0\r\nmaster_failover_state:no-failover\r\nmaster_replid:ab76ec6fcd08ac846c4cbbe79c044274f69c56b6\r\nmaster_replid2:6ad1e64dae5bb8b5a97c308d56135dd196ecfacb\r\nmaster_repl_offset:1498\r\nsecond_repl_offset:115\r\nrepl_backlog_active:1\r\n";

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap_or_else(|e| panic!("{e}")), 6379)
    }

    #[test]
    fn a_restarted_server_is_parked_and_started_a_history_of_its_own() {
        let info = info::parse(PARKED_9).unwrap_or_else(|e| panic!("{e}"));
        let s =
            ServerState::from_info(at("10.213.1.4"), &info, 100).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.parked() && !s.is_primary());
        assert_eq!(s.upstream.as_ref().map(|u| u.age), Some(LinkAge::Never));
        assert!(s.history.started_fresh());
        assert_eq!((s.history.offset, s.keys()), (0, 100));
        assert_eq!(s.version, Version::new(9, 1, 2));
    }

    #[test]
    fn a_primary_lists_its_replicas() {
        let info = info::parse(PRIMARY_8).unwrap_or_else(|e| panic!("{e}"));
        let s =
            ServerState::from_info(at("10.213.1.4"), &info, 7).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.is_primary() && !s.switching_over());
        assert_eq!(s.offset, 1498);
        assert_eq!(s.replicas.len(), 1);
        assert!(
            !s.history.started_fresh(),
            "promoted: continues another history"
        );
    }

    #[test]
    fn a_replica_in_step_follows_its_primary_by_address() {
        let text = PARKED_9
            .replace("master_host:127.0.0.1", "master_host:10.213.2.9")
            .replace("master_port:0", "master_port:6379")
            .replace("master_link_status:down", "master_link_status:up");
        let info = info::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let s =
            ServerState::from_info(at("10.213.1.4"), &info, 1).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.parked());
        assert!(s.in_step_with(at("10.213.2.9")));
        assert!(!s.in_step_with(at("10.213.2.8")));
    }

    #[test]
    fn a_reply_without_the_fields_names_what_is_missing() {
        let info =
            info::parse("# Replication\r\nrole:slave\r\nvalkey_version:9.1.2\r\nloading:0\r\n")
                .unwrap_or_else(|e| panic!("{e}"));
        let error = ServerState::from_info(at("10.213.1.4"), &info, 0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("master_host"), "{error}");
    }
}
