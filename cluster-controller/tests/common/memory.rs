//! A Valkey cluster that answers from memory: every member's CLUSTER NODES generated in
//! Valkey's own format, the captured INFO and CLUSTER INFO of a healthy Valkey 9 cluster, and
//! CLUSTER GETSLOTMIGRATIONS as a test scripts it. What a pass's observation reads, without a
//! server: the engine's pass at scale (`pass_scale`) and how a pass watches (`engine_watch`).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use cluster_controller::client::{ClientError, ValkeyClient};
use cluster_controller::engine::{Desired, Member};
use cluster_controller::valkey::cluster_nodes::NodeId;
use cluster_controller::valkey::slots::{SlotRange, even_split};
use redis::{Arg, Cmd, Value};

pub const PORT: u16 = 6379;
pub const BUS_PORT: u16 = 16379;
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Deterministic bits for ids and listing order (splitmix64).
pub fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One node of the simulated cluster.
pub struct Node {
    pub id: String,
    pub ip: Ipv4Addr,
    pub shard: u32,
    pub index: u32,
    /// The node it replicates (an index into the cluster's nodes).
    pub primary: Option<usize>,
    pub slots: Option<SlotRange>,
    pub keys: i64,
}

impl Node {
    pub fn name(&self) -> String {
        format!("c-{}-{}", self.shard, self.index)
    }

    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.ip.into(), PORT)
    }
}

/// A cluster of `shards` shards of a primary and one replica, slots split evenly, formed and
/// healthy: what every member's CLUSTER NODES says of it.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The order every view lists the nodes in (Valkey's is that of a hash table).
    pub order: Vec<usize>,
}

impl Cluster {
    pub fn new(members: usize) -> Self {
        assert!(
            members >= 2 && members.is_multiple_of(2),
            "pairs of primary and replica"
        );
        let shards = members / 2;
        let ranges = even_split(shards);
        let nodes = (0..members)
            .map(|i| {
                let (shard, index) = (i / 2, i % 2);
                let id = format!(
                    "{:016x}{:016x}{:08x}",
                    mix(3 * i as u64),
                    mix(3 * i as u64 + 1),
                    mix(3 * i as u64 + 2) as u32
                );
                Node {
                    id,
                    ip: Ipv4Addr::new(10, 1 + (i / 250) as u8, (i % 250) as u8 + 1, 7),
                    shard: shard as u32,
                    index: index as u32,
                    primary: (index == 1).then(|| i - 1),
                    slots: (index == 0).then(|| ranges[shard]),
                    keys: 100,
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..members).collect();
        order.sort_by_key(|i| mix(0x5eed ^ *i as u64));
        Self { nodes, order }
    }

    /// Shard 0's replica as a node that just started: a primary of no slots, knowing only that
    /// it was met.
    pub fn with_fresh_replica(mut self) -> Self {
        let fresh = &mut self.nodes[1];
        fresh.primary = None;
        fresh.keys = 0;
        self
    }

    pub fn shards(&self) -> u32 {
        (self.nodes.len() / 2) as u32
    }

    /// CLUSTER NODES as `viewer` answers it, in Valkey's format: its own line flagged `myself`
    /// with no ping or pong times, each other line with the times this viewer last heard of it.
    pub fn view(&self, viewer: usize) -> String {
        let mut text = String::new();
        for &n in &self.order {
            let node = &self.nodes[n];
            let role = if node.primary.is_some() {
                "slave"
            } else {
                "master"
            };
            let (flags, pong) = if n == viewer {
                (format!("myself,{role}"), 0)
            } else {
                (
                    role.to_owned(),
                    1_795_993_009_000 + (viewer * 31 + n * 17) as u64 % 1000,
                )
            };
            let primary = node.primary.map_or("-", |p| self.nodes[p].id.as_str());
            let epoch = node.shard + 1;
            let slots = node.slots.map(|r| format!(" {r}")).unwrap_or_default();
            text.push_str(&format!(
                "{} {}:{PORT}@{BUS_PORT},{}.valkey-c.default.svc {flags} {primary} 0 {pong} \
                 {epoch} connected{slots}\n",
                node.id,
                node.ip,
                node.name(),
            ));
        }
        text
    }

    /// The members as the Kubernetes side passes them on a later pass: ready, bound to their
    /// node, on a Kubernetes node of their own, in three zones.
    pub fn members(&self) -> Vec<Member> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let mut m = Member::new(node.shard, node.index, node.name());
                m.address = Some(node.address());
                m.ready = true;
                for revision in [
                    &mut m.current_revision,
                    &mut m.desired_revision,
                    &mut m.allowed_revision,
                ] {
                    *revision = Some("r1".into());
                }
                m.node_id = NodeId::parse(&node.id);
                m.node_name = Some(format!("k8s-node-{i}"));
                m.zone = Some(ZONES[(node.shard + node.index) as usize % ZONES.len()].into());
                m
            })
            .collect()
    }

    pub fn desired(&self) -> Desired {
        let mut desired = Desired::new(self.shards(), 1);
        desired.formed = true;
        desired
    }
}

/// Servers that answer the observation's commands from memory: each its own CLUSTER NODES, and
/// the captured INFO and CLUSTER INFO of a healthy Valkey 9 cluster.
pub struct Servers {
    by_address: HashMap<SocketAddr, Server>,
    info_primary: Vec<u8>,
    info_replica: Vec<u8>,
    cluster_info: Vec<u8>,
    migrations: Value,
    /// Per server, the CLUSTER GETSLOTMIGRATIONS replies still to give, in order; the last one
    /// is given again and again.
    scripted: Mutex<HashMap<SocketAddr, VecDeque<Value>>>,
}

struct Server {
    nodes: Vec<u8>,
    replica: bool,
    keys: i64,
}

pub const REPLICATION_USER: &str = "replicator";

/// The sections of a captured INFO that `INFO server replication` returns.
fn info_sections(name: &str) -> Vec<u8> {
    let text = super::text(name);
    let mut keep = false;
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        if let Some(section) = line.strip_prefix("# ") {
            keep = matches!(section.trim(), "Server" | "Replication");
        }
        if keep {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

impl Servers {
    pub fn new(cluster: &Cluster) -> Self {
        let by_address = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let server = Server {
                    nodes: cluster.view(i).into_bytes(),
                    replica: node.primary.is_some(),
                    keys: node.keys,
                };
                (node.address(), server)
            })
            .collect();
        Self {
            by_address,
            info_primary: info_sections("v9/info_primary"),
            info_replica: info_sections("v9/info_replica"),
            cluster_info: super::text("v9/cluster_info_ok").into_bytes(),
            migrations: super::value("v9/getslotmigrations_none.resp2"),
            scripted: Mutex::new(HashMap::new()),
        }
    }

    /// From now on the server at `addr` answers CLUSTER GETSLOTMIGRATIONS with `replies`, one
    /// per call, then the last one for good: a job that runs for a few looks, then ends.
    pub fn script_migrations(&self, addr: SocketAddr, replies: Vec<Value>) {
        self.scripted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(addr, replies.into());
    }

    fn migrations(&self, addr: SocketAddr) -> Value {
        let mut scripted = self
            .scripted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match scripted.get_mut(&addr) {
            Some(replies) if replies.len() > 1 => replies.pop_front().unwrap_or(Value::Nil),
            Some(replies) => replies.front().cloned().unwrap_or(Value::Nil),
            None => self.migrations.clone(),
        }
    }

    fn answer(&self, addr: SocketAddr, cmd: &Cmd) -> Result<Value, ClientError> {
        let server = self.by_address.get(&addr).ok_or(ClientError::Connect {
            addr,
            message: "nothing listens there".into(),
        })?;
        let args: Vec<String> = cmd
            .args_iter()
            .filter_map(|arg| match arg {
                Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).to_ascii_uppercase()),
                _ => None,
            })
            .collect();
        let bulk = |bytes: &[u8]| Value::BulkString(bytes.to_vec());
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        Ok(match words.as_slice() {
            ["CLUSTER", "NODES"] => bulk(&server.nodes),
            ["CLUSTER", "INFO"] => bulk(&self.cluster_info),
            ["CLUSTER", "GETSLOTMIGRATIONS"] => self.migrations(addr),
            ["INFO", ..] if server.replica => bulk(&self.info_replica),
            ["INFO", ..] => bulk(&self.info_primary),
            ["DBSIZE"] => Value::Int(server.keys),
            ["CONFIG", "GET", ..] => Value::Array(
                [
                    ("cluster-node-timeout", "15000"),
                    ("cluster-replica-no-failover", "no"),
                    ("cluster-replica-validity-factor", "10"),
                    ("repl-ping-replica-period", "10"),
                ]
                .iter()
                .flat_map(|(k, v)| [bulk(k.as_bytes()), bulk(v.as_bytes())])
                .collect(),
            ),
            ["ACL", "GETUSER", ..] => Value::Array(vec![
                bulk(b"flags"),
                Value::Array(vec![bulk(b"on"), bulk(b"sanitize-payload")]),
            ]),
            _ => {
                return Err(ClientError::Server {
                    addr,
                    command: args.join(" "),
                    code: Some("ERR".into()),
                    message: "not simulated".into(),
                });
            }
        })
    }
}

impl ValkeyClient for Servers {
    fn command(
        &self,
        addr: SocketAddr,
        cmd: &Cmd,
        _timeout: Duration,
    ) -> impl Future<Output = Result<Value, ClientError>> + Send {
        std::future::ready(self.answer(addr, cmd))
    }
}
