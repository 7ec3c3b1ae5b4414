//! `CLUSTER SHARDS`: one entry per shard (a primary and its replicas), with the shard's slots
//! as a flat `[start, end, start, end, ...]` list and its nodes. RESP3 sends maps, RESP2 flat
//! `[key, value, ...]` arrays; both read the same.

use redis::Value;

use super::ParseError;
use super::cluster_nodes::NodeId;
use super::slots::{Slot, SlotRange, SlotSet};
use super::value::{self, bad, field, opt_int, opt_text, shape};

const REPLY: &str = "CLUSTER SHARDS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardRole {
    Primary,
    Replica,
}

/// `health` of a shard member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Online,
    Failed,
    Loading,
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardNode {
    pub id: NodeId,
    pub ip: Option<String>,
    pub port: Option<u16>,
    pub tls_port: Option<u16>,
    pub endpoint: Option<String>,
    pub hostname: Option<String>,
    pub role: ShardRole,
    pub replication_offset: i64,
    pub health: Health,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard id; `None` on servers that do not send it (9.1 does, 8.0 does not).
    pub id: Option<String>,
    pub slots: SlotSet,
    pub nodes: Vec<ShardNode>,
}

impl Shard {
    pub fn primary(&self) -> Option<&ShardNode> {
        self.nodes.iter().find(|n| n.role == ShardRole::Primary)
    }
}

pub fn parse(reply: &Value) -> Result<Vec<Shard>, ParseError> {
    value::list(reply)
        .ok_or_else(|| shape(REPLY, "an array of shards", reply))?
        .iter()
        .map(parse_shard)
        .collect()
}

fn parse_shard(shard: &Value) -> Result<Shard, ParseError> {
    let fields = value::pairs(shard).ok_or_else(|| shape(REPLY, "a map per shard", shard))?;
    let slot_list = field(REPLY, &fields, "slots")?;
    let bounds = value::list(slot_list)
        .ok_or_else(|| bad(REPLY, "slots", slot_list))?
        .iter()
        .map(|v| {
            value::int(v)
                .and_then(|n| Slot::try_from(n).ok())
                .ok_or_else(|| bad(REPLY, "slots", slot_list))
        })
        .collect::<Result<Vec<Slot>, _>>()?;
    if bounds.len() % 2 != 0 {
        return Err(bad(REPLY, "slots", slot_list));
    }
    let mut slots = SlotSet::new();
    for pair in bounds.chunks_exact(2) {
        let range =
            SlotRange::new(pair[0], pair[1]).ok_or_else(|| bad(REPLY, "slots", slot_list))?;
        slots.insert_range(range);
    }
    let node_list = field(REPLY, &fields, "nodes")?;
    let nodes = value::list(node_list)
        .ok_or_else(|| bad(REPLY, "nodes", node_list))?
        .iter()
        .map(parse_node)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Shard {
        id: opt_text(REPLY, &fields, "id")?,
        slots,
        nodes,
    })
}

fn parse_node(node: &Value) -> Result<ShardNode, ParseError> {
    let fields = value::pairs(node).ok_or_else(|| shape(REPLY, "a map per node", node))?;
    let text = |key: &str| {
        let v = field(REPLY, &fields, key)?;
        value::text(v).ok_or_else(|| bad(REPLY, key, v))
    };
    let port = |key: &str| -> Result<Option<u16>, ParseError> {
        opt_int(REPLY, &fields, key)?
            .map(|p| {
                u16::try_from(p).map_err(|_| ParseError::BadValue {
                    reply: REPLY,
                    key: key.to_owned(),
                    value: p.to_string(),
                })
            })
            .transpose()
    };
    let id_text = text("id")?;
    let id = NodeId::parse(&id_text).ok_or_else(|| ParseError::BadValue {
        reply: REPLY,
        key: "id".into(),
        value: id_text.clone(),
    })?;
    let role = match text("role")?.as_str() {
        "master" | "primary" => ShardRole::Primary,
        "replica" | "slave" => ShardRole::Replica,
        other => {
            return Err(ParseError::BadValue {
                reply: REPLY,
                key: "role".into(),
                value: other.to_owned(),
            });
        }
    };
    let offset = field(REPLY, &fields, "replication-offset")?;
    Ok(ShardNode {
        id,
        ip: opt_text(REPLY, &fields, "ip")?.filter(|ip| !ip.is_empty()),
        port: port("port")?,
        tls_port: port("tls-port")?,
        endpoint: opt_text(REPLY, &fields, "endpoint")?.filter(|e| !e.is_empty()),
        hostname: opt_text(REPLY, &fields, "hostname")?.filter(|h| !h.is_empty()),
        role,
        replication_offset: value::int(offset)
            .ok_or_else(|| bad(REPLY, "replication-offset", offset))?,
        health: match text("health")?.as_str() {
            "online" => Health::Online,
            "failed" => Health::Failed,
            "loading" => Health::Loading,
            other => Health::Other(other.to_owned()),
        },
    })
}
