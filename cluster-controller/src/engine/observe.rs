//! Reading what every member's Valkey says about itself and the cluster, in one round of
//! concurrent commands. What cannot be read is kept as an error, never dropped: the decision
//! must know a member is silent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures::future::join_all;
use redis::Value;

use crate::client::ValkeyClient;
use crate::valkey::ParseError;
use crate::valkey::cluster_info::{self, ClusterInfo};
use crate::valkey::cluster_nodes::{self, ClusterNode, ClusterNodes, NodeId};
use crate::valkey::info::{self, Info};
use crate::valkey::slot_migrations::{self, SlotMigrationJob};
use crate::valkey::value;
use crate::valkey::{Version, supports_atomic_slot_migration};

use super::member::Member;

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
            .nodes
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
        })
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
        &self.nodes.nodes[self.myself]
    }

    pub fn id(&self) -> &NodeId {
        &self.myself().id
    }

    /// INFO `server` and `replication`.
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
pub enum Reach {
    /// The member has no address yet (no pod IP).
    NoAddress,
    /// The address did not answer, or answered something that could not be understood.
    Unreachable {
        address: SocketAddr,
        error: String,
    },
    Up(Box<NodeState>),
}

impl Reach {
    pub fn state(&self) -> Option<&NodeState> {
        match self {
            Reach::Up(state) => Some(state),
            _ => None,
        }
    }
}

/// One pass's reading of every member, by member name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub members: BTreeMap<String, Reach>,
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
    let reads = members.iter().map(|member| async move {
        let reach = match member.address {
            None => Reach::NoAddress,
            Some(address) => match read_node(client, address, timeout).await {
                Ok(state) => Reach::Up(Box::new(state)),
                Err(error) => Reach::Unreachable { address, error },
            },
        };
        (member.name.clone(), reach)
    });
    Observation {
        members: join_all(reads).await.into_iter().collect(),
    }
}

async fn read_node(
    client: &impl ValkeyClient,
    address: SocketAddr,
    timeout: Duration,
) -> Result<NodeState, String> {
    let run = |args: &'static [&'static str]| async move {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        client.command(address, &cmd, timeout).await
    };
    let (nodes, info, cluster_info, keys) = futures::join!(
        run(&["CLUSTER", "NODES"]),
        run(&["INFO", "server", "replication"]),
        run(&["CLUSTER", "INFO"]),
        run(&["DBSIZE"]),
    );
    let nodes = cluster_nodes::parse(&text("CLUSTER NODES", nodes.map_err(say)?)?).map_err(say)?;
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
        let reply = run(&["CLUSTER", "GETSLOTMIGRATIONS"]).await.map_err(say)?;
        slot_migrations::parse(&reply).map_err(say)?
    } else {
        Vec::new()
    };
    NodeState::new(address, nodes, info, cluster_info, keys, migrations).map_err(say)
}

fn text(reply: &str, value: Value) -> Result<String, String> {
    value::text(&value).ok_or_else(|| format!("{reply}: not text: {}", value::describe(&value)))
}

fn say(error: impl ToString) -> String {
    error.to_string()
}
