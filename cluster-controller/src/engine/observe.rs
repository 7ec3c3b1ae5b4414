//! Reading what every member's Valkey says about itself and the cluster, in one round of
//! concurrent commands. What cannot be read is kept as an error, never dropped: the decision
//! must know a member is silent.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::future::join_all;
use redis::{Cmd, Value};

use crate::access::rights;
use crate::client::ValkeyClient;
use crate::valkey::ParseError;
pub use crate::valkey::acl::user_enabled;
use crate::valkey::cluster_info::{self, ClusterInfo};
use crate::valkey::cluster_nodes::{
    ClusterNode, ClusterNodes, LineCache, NodeId, with_internal_addresses,
};
use crate::valkey::commands::{self, InfoSection};
use crate::valkey::info::{self, Info};
use crate::valkey::slot_migrations::{self, SlotMigrationJob};
use crate::valkey::value;
use crate::valkey::{Version, supports_atomic_slot_migration};

use super::member::Member;
use super::safety::{FailoverSettings, LinkAge, ReplicationHistory};

/// What one member's Valkey reported, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    address: SocketAddr,
    nodes: ClusterNodes,
    myself: usize,
    info: Info,
    cluster_info: ClusterInfo,
    version: Version,
    keys: u64,
    migrations: Vec<SlotMigrationJob>,
    /// Whether the replication user may log in here (`ACL GETUSER`), when the engine fences it.
    replication_admitted: Option<bool>,
    /// Its failover settings (CONFIG GET), or why they could not be read.
    settings: Result<FailoverSettings, String>,
}

impl NodeState {
    /// Builds the state from parsed replies; fails when CLUSTER NODES has no `myself` line or
    /// INFO no version.
    pub fn new(
        address: SocketAddr,
        nodes: ClusterNodes,
        info: Info,
        cluster_info: ClusterInfo,
        keys: u64,
        migrations: Vec<SlotMigrationJob>,
    ) -> Result<Self, ParseError> {
        let myself = nodes
            .nodes()
            .iter()
            .position(|n| n.flags.myself)
            .ok_or(ParseError::NodesNoMyself)?;
        let version = info.server_version()?;
        Ok(Self {
            address,
            nodes,
            myself,
            info,
            cluster_info,
            version,
            keys,
            migrations,
            replication_admitted: None,
            settings: Err("its settings were not read".into()),
        })
    }

    /// The same state, with `keys` keys (DBSIZE).
    pub fn with_keys(mut self, keys: u64) -> Self {
        self.keys = keys;
        self
    }

    /// The same state, with what `CONFIG GET` said of its failover settings.
    pub fn with_settings(mut self, settings: Result<FailoverSettings, String>) -> Self {
        self.settings = settings;
        self
    }

    /// Its failover settings, or why they are unknown.
    pub fn settings(&self) -> Result<&FailoverSettings, &str> {
        self.settings.as_ref().map_err(String::as_str)
    }

    /// Where it stands in replication history; `None` when INFO lacks the fields.
    pub fn history(&self) -> Option<ReplicationHistory> {
        ReplicationHistory::from_info(&self.info, self.keys)
    }

    /// How long a replica has been without its primary; `None` on a primary.
    pub fn link_age(&self) -> Option<LinkAge> {
        LinkAge::from_info(&self.info)
    }

    /// How long the server has been running, in milliseconds (0 when INFO does not say).
    pub fn uptime_ms(&self) -> u64 {
        self.info
            .get("uptime_in_seconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(0, |s| s.saturating_mul(1000))
    }

    /// The same state, with what `ACL GETUSER <replication user>` said.
    pub fn with_replication_admitted(mut self, admitted: Option<bool>) -> Self {
        self.replication_admitted = admitted;
        self
    }

    /// Whether replicas (and slot imports) may log in to this node as the replication user;
    /// `None` when the engine does not fence that user.
    pub fn replication_admitted(&self) -> Option<bool> {
        self.replication_admitted
    }

    /// The address the member was reached at.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its CLUSTER NODES view.
    pub fn nodes(&self) -> &ClusterNodes {
        &self.nodes
    }

    /// Its own line of CLUSTER NODES.
    pub fn myself(&self) -> &ClusterNode {
        &self.nodes.nodes()[self.myself]
    }

    pub fn id(&self) -> &NodeId {
        &self.myself().id
    }

    /// INFO `server`, `replication` and `persistence`.
    pub fn info(&self) -> &Info {
        &self.info
    }

    pub fn cluster_info(&self) -> &ClusterInfo {
        &self.cluster_info
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// DBSIZE.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// CLUSTER GETSLOTMIGRATIONS, newest first; empty before Valkey 9.
    pub fn migrations(&self) -> &[SlotMigrationJob] {
        &self.migrations
    }

    pub fn supports_atomic_migration(&self) -> bool {
        supports_atomic_slot_migration(self.version)
    }

    /// How far this node has replicated: `slave_repl_offset` on a replica, the primary's own
    /// offset otherwise.
    pub fn replication_offset(&self) -> i64 {
        self.info
            .slave_repl_offset()
            .ok()
            .flatten()
            .or_else(|| self.info.master_repl_offset().ok())
            .unwrap_or(0)
    }

    /// A replica whose link to its primary is up and not in a full sync.
    pub fn replica_in_sync(&self) -> bool {
        self.myself().is_replica()
            && matches!(
                self.info.master_link_status(),
                Ok(Some(info::LinkStatus::Up))
            )
            && !matches!(self.info.master_sync_in_progress(), Ok(Some(true)))
            && !self.info.loading().unwrap_or(false)
    }
}

/// Whether a member could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach<S = NodeState> {
    /// The member has no address yet (no pod IP).
    NoAddress,
    /// The address did not answer, or answered something that could not be understood.
    Unreachable {
        address: SocketAddr,
        error: String,
    },
    Up(Box<S>),
}

impl<S> Reach<S> {
    pub fn state(&self) -> Option<&S> {
        match self {
            Reach::Up(state) => Some(state),
            _ => None,
        }
    }
}

/// Reads every member concurrently with `read`, keeping each member's answer or its silence by
/// name. Both modes (cluster and replication) read their members through this one loop; only what
/// they ask each server differs.
pub async fn read_every<S, F, Fut>(members: &[Member], read: F) -> BTreeMap<String, Reach<S>>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = Result<S, String>>,
{
    let read = &read;
    let reads = members.iter().map(|member| async move {
        let reach = match member.address {
            None => Reach::NoAddress,
            Some(address) => match read(address).await {
                Ok(state) => Reach::Up(Box::new(state)),
                Err(error) => Reach::Unreachable { address, error },
            },
        };
        (member.name.clone(), reach)
    });
    join_all(reads).await.into_iter().collect()
}

/// Whether `user` (the fenced replication user) may log in at `address`, from `ACL GETUSER`.
pub async fn read_admitted(
    client: &impl ValkeyClient,
    address: SocketAddr,
    timeout: Duration,
    user: &str,
) -> Result<bool, String> {
    let reply = client
        .command(address, &commands::acl_getuser(user), timeout)
        .await
        .map_err(say)?;
    user_enabled(&reply).ok_or_else(|| format!("ACL GETUSER {user}: no flags in the reply"))
}

/// One pass's reading of every member, by member name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub members: BTreeMap<String, Reach>,
    /// The replication user, when the engine fences it (see `decide`).
    pub fence_user: Option<String>,
}

impl Observation {
    pub fn get(&self, member: &str) -> Option<&Reach> {
        self.members.get(member)
    }

    pub fn state(&self, member: &str) -> Option<&NodeState> {
        self.get(member).and_then(Reach::state)
    }
}

/// Reads every member concurrently, each command bounded by `timeout`.
pub async fn observe(
    client: &impl ValkeyClient,
    members: &[Member],
    timeout: Duration,
) -> Observation {
    observe_fenced(client, members, timeout, None).await
}

/// [`observe`], also reading whether `fence_user` (the replication user) may log in.
pub async fn observe_fenced(
    client: &impl ValkeyClient,
    members: &[Member],
    timeout: Duration,
    fence_user: Option<&str>,
) -> Observation {
    let lines = LineCache::new();
    let internal: BTreeMap<SocketAddr, SocketAddr> = members
        .iter()
        .filter_map(|m| Some((m.announced?, m.address?)))
        .collect();
    Observation {
        members: read_every(members, |address| {
            read_node(client, address, timeout, fence_user, &lines, &internal)
        })
        .await,
        fence_user: fence_user.map(str::to_owned),
    }
}

async fn read_node(
    client: &impl ValkeyClient,
    address: SocketAddr,
    timeout: Duration,
    fence_user: Option<&str>,
    lines: &LineCache,
    internal: &BTreeMap<SocketAddr, SocketAddr>,
) -> Result<NodeState, String> {
    let run = |cmd: Cmd| async move { client.command(address, &cmd, timeout).await };
    let (nodes, info, cluster_info, keys, config) = futures::join!(
        run(commands::cluster_nodes()),
        run(commands::info(&[
            InfoSection::Server,
            InfoSection::Replication,
            InfoSection::Persistence,
        ])),
        run(commands::cluster_info()),
        run(commands::dbsize()),
        run(commands::config_get(&FailoverSettings::KEYS)),
    );
    let nodes = lines
        .parse(&with_internal_addresses(
            &text("CLUSTER NODES", nodes.map_err(say)?)?,
            internal,
        ))
        .map_err(say)?;
    let info = info::parse(&text("INFO", info.map_err(say)?)?).map_err(say)?;
    let cluster_info =
        cluster_info::parse(&text("CLUSTER INFO", cluster_info.map_err(say)?)?).map_err(say)?;
    let keys = keys.map_err(say).and_then(|v| {
        value::int(&v)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| format!("DBSIZE: not a count: {}", value::describe(&v)))
    })?;
    let version = info.server_version().map_err(say)?;
    let migrations = if supports_atomic_slot_migration(version) {
        let reply = match run(commands::cluster_getslotmigrations()).await {
            Err(error) if is_no_permission(&error) => {
                give_version_rights(client, address, timeout).await?;
                run(commands::cluster_getslotmigrations()).await
            }
            read => read,
        };
        slot_migrations::parse(&reply.map_err(say)?).map_err(say)?
    } else {
        Vec::new()
    };
    let admitted = match fence_user {
        None => None,
        Some(user) => Some(read_admitted(client, address, timeout, user).await?),
    };
    // Unreadable settings do not make the node unreachable: only the rules that need them
    // (taking over for Valkey) hold back, and say why.
    let settings = config
        .map_err(say)
        .and_then(|reply| pairs(&reply).ok_or_else(|| "CONFIG GET: not a list of pairs".into()))
        .and_then(|pairs| FailoverSettings::from_config(&pairs));
    Ok(
        NodeState::new(address, nodes, info, cluster_info, keys, migrations)
            .map_err(say)?
            .with_replication_admitted(admitted)
            .with_settings(settings),
    )
}

/// Whether the server refused a command to the operator's user (`NOPERM`).
fn is_no_permission(error: &crate::client::ClientError) -> bool {
    matches!(error, crate::client::ClientError::Server { code: Some(code), .. } if code.eq_ignore_ascii_case("NOPERM"))
}

/// Gives the operator's user the rights that exist only on this server's version (see
/// [`rights::OPERATOR_RULES_9`]). A server that restarted since the access stage last gave them
/// holds only what its ACL file gives, and the file cannot name them (8.0 would not load it).
/// The engine gives them itself, rather than wait for the access stage: that stage stops with a
/// missing Secret, and the data-safety rules must read every server all the same. The rules
/// are added (`+command`), nothing else of the user changes.
async fn give_version_rights(
    client: &impl ValkeyClient,
    address: SocketAddr,
    timeout: Duration,
) -> Result<(), String> {
    let cmd = commands::acl_setuser(
        rights::OPERATOR_USER,
        rights::OPERATOR_RULES_9.split_whitespace(),
    );
    client
        .command(address, &cmd, timeout)
        .await
        .map(|_| ())
        .map_err(say)
}

/// The key/value pairs of a RESP2 flat list or a RESP3 map, as text.
fn pairs(reply: &Value) -> Option<BTreeMap<String, String>> {
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .map(|c| Some((value::text(c.first()?)?, value::text(c.get(1)?)?)))
            .collect(),
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| Some((value::text(k)?, value::text(v)?)))
            .collect(),
        _ => None,
    }
}

fn text(reply: &str, value: Value) -> Result<String, String> {
    value::text(&value).ok_or_else(|| format!("{reply}: not text: {}", value::describe(&value)))
}

fn say(error: impl ToString) -> String {
    error.to_string()
}
