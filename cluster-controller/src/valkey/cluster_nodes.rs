//! `CLUSTER NODES`: one line per node the answering node knows, itself flagged `myself`.
//!
//! `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent> <pong-recv> <config-epoch>
//! <link-state> <slot>...`, where a slot item is `a`, `a-b`, or, on the `myself` line only, an
//! open migration `[a->-<target>]` / `[a-<-<source>]`.

use std::fmt;

use super::ParseError;
use super::slots::{Slot, SlotRange, SlotSet};

/// A node's 40-character hexadecimal cluster identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

impl NodeId {
    pub const LEN: usize = 40;

    /// `None` unless `text` is 40 hexadecimal digits.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == Self::LEN && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(text.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The flags of a node line. Unknown flags are kept, not rejected, so a newer server does not
/// break an older controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    pub myself: bool,
    /// `master` (or `primary`).
    pub primary: bool,
    /// `slave` (or `replica`).
    pub replica: bool,
    /// `fail?`: this node suspects it is down (PFAIL).
    pub pfail: bool,
    /// `fail`: a majority of primaries agreed it is down.
    pub fail: bool,
    /// `handshake`: met but not yet answered; its id is provisional.
    pub handshake: bool,
    /// `noaddr`: its address is unknown (e.g. the address now answers with another id).
    pub noaddr: bool,
    /// `nofailover`: a replica that will not try to fail over.
    pub nofailover: bool,
    pub other: Vec<String>,
}

impl Flags {
    fn parse(text: &str) -> Self {
        let mut flags = Flags::default();
        for flag in text.split(',') {
            match flag {
                "myself" => flags.myself = true,
                "master" | "primary" => flags.primary = true,
                "slave" | "replica" => flags.replica = true,
                "fail?" => flags.pfail = true,
                "fail" => flags.fail = true,
                "handshake" => flags.handshake = true,
                "noaddr" => flags.noaddr = true,
                "nofailover" => flags.nofailover = true,
                "noflags" | "" => {}
                other => flags.other.push(other.to_owned()),
            }
        }
        flags
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Connected,
    Disconnected,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: NodeId,
    /// `None` when the address is unknown: an empty IP, as in `:0@0` or a fresh node's own
    /// `:7100@17100` before it learned its address from a peer.
    pub ip: Option<String>,
    pub port: u16,
    pub bus_port: u16,
    /// The announced hostname, if any.
    pub hostname: Option<String>,
    pub flags: Flags,
    /// The primary this node replicates; `None` for `-`.
    pub primary_id: Option<NodeId>,
    /// Milliseconds (Unix time) of the unanswered ping in flight, 0 if none.
    pub ping_sent: u64,
    /// Milliseconds (Unix time) of the last pong received.
    pub pong_received: u64,
    pub config_epoch: u64,
    pub link: LinkState,
    pub slots: SlotSet,
    /// `[slot->-target]`: slots this node is migrating away, and to whom.
    pub migrating: Vec<(Slot, NodeId)>,
    /// `[slot-<-source]`: slots this node is importing, and from whom.
    pub importing: Vec<(Slot, NodeId)>,
}

impl ClusterNode {
    pub fn is_primary(&self) -> bool {
        self.flags.primary
    }

    pub fn is_replica(&self) -> bool {
        self.flags.replica
    }

    /// Neither suspected nor failed, in handshake, nor without an address.
    pub fn is_healthy(&self) -> bool {
        let f = &self.flags;
        !(f.fail || f.pfail || f.handshake || f.noaddr) && self.ip.is_some()
    }
}

/// The whole reply, in the order Valkey listed the nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterNodes {
    pub nodes: Vec<ClusterNode>,
}

/// What one node's view says about one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotView {
    /// The primary serving the slot in this view, `None` if unassigned.
    pub owner: Option<NodeId>,
    /// Set when the viewing node is migrating the slot away (`[slot->-target]`).
    pub migrating_to: Option<NodeId>,
    /// Set when the viewing node is importing the slot (`[slot-<-source]`).
    pub importing_from: Option<NodeId>,
}

impl ClusterNodes {
    pub fn myself(&self) -> Result<&ClusterNode, ParseError> {
        self.nodes
            .iter()
            .find(|n| n.flags.myself)
            .ok_or(ParseError::NodesNoMyself)
    }

    pub fn get(&self, id: &NodeId) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| &n.id == id)
    }

    pub fn primaries(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| n.is_primary())
    }

    pub fn replicas_of<'a>(&'a self, primary: &'a NodeId) -> impl Iterator<Item = &'a ClusterNode> {
        self.nodes
            .iter()
            .filter(move |n| n.is_replica() && n.primary_id.as_ref() == Some(primary))
    }

    /// The node serving `slot` in this view.
    pub fn owner_of(&self, slot: Slot) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.slots.contains(slot))
    }

    /// Every slot some node serves in this view.
    pub fn assigned_slots(&self) -> SlotSet {
        self.nodes
            .iter()
            .fold(SlotSet::new(), |acc, n| acc.union(&n.slots))
    }

    /// What the answering node (`myself`) says about `slot`: its owner and any open migration.
    pub fn slot_view(&self, slot: Slot) -> SlotView {
        let me = self.nodes.iter().find(|n| n.flags.myself);
        let marker = |list: fn(&ClusterNode) -> &Vec<(Slot, NodeId)>| {
            me.and_then(|n| list(n).iter().find(|(s, _)| *s == slot))
                .map(|(_, id)| id.clone())
        };
        SlotView {
            owner: self.owner_of(slot).map(|n| n.id.clone()),
            migrating_to: marker(|n| &n.migrating),
            importing_from: marker(|n| &n.importing),
        }
    }
}

/// Parses a whole `CLUSTER NODES` reply. Blank lines are skipped; any malformed line is an
/// error naming the line (1-based) and field.
pub fn parse(text: &str) -> Result<ClusterNodes, ParseError> {
    let nodes = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| parse_line(i + 1, line))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ClusterNodes { nodes })
}

fn parse_line(line_no: usize, line: &str) -> Result<ClusterNode, ParseError> {
    let mut fields = line.split_ascii_whitespace();
    let mut next = |field: &'static str| {
        fields.next().ok_or(ParseError::NodesMissingField {
            line: line_no,
            field,
        })
    };
    let bad = |field: &'static str, value: &str| ParseError::NodesBadField {
        line: line_no,
        field,
        value: value.to_owned(),
    };
    let number =
        |field: &'static str, value: &str| value.parse::<u64>().map_err(|_| bad(field, value));

    let id_text = next("id")?;
    let id = NodeId::parse(id_text).ok_or_else(|| bad("id", id_text))?;
    let address = next("address")?;
    let (ip, port, bus_port, hostname) =
        parse_address(address).ok_or_else(|| bad("address", address))?;
    let flags = Flags::parse(next("flags")?);
    let primary_text = next("primary")?;
    let primary_id = match primary_text {
        "-" => None,
        other => Some(NodeId::parse(other).ok_or_else(|| bad("primary", other))?),
    };
    let ping_sent = number("ping-sent", next("ping-sent")?)?;
    let pong_received = number("pong-recv", next("pong-recv")?)?;
    let config_epoch = number("config-epoch", next("config-epoch")?)?;
    let link = match next("link-state")? {
        "connected" => LinkState::Connected,
        "disconnected" => LinkState::Disconnected,
        other => return Err(bad("link-state", other)),
    };

    let mut slots = SlotSet::new();
    let mut migrating = Vec::new();
    let mut importing = Vec::new();
    for item in fields {
        if let Some(inner) = item.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            let (slot, target, list) = if let Some((slot, target)) = inner.split_once("->-") {
                (slot, target, &mut migrating)
            } else if let Some((slot, source)) = inner.split_once("-<-") {
                (slot, source, &mut importing)
            } else {
                return Err(bad("slot marker", item));
            };
            let slot = SlotRange::single(slot.parse().map_err(|_| bad("slot marker", item))?)
                .ok_or_else(|| bad("slot marker", item))?;
            let peer = NodeId::parse(target).ok_or_else(|| bad("slot marker", item))?;
            list.push((slot.start(), peer));
        } else {
            let range: SlotRange = item.parse().map_err(|_| bad("slot", item))?;
            slots.insert_range(range);
        }
    }

    Ok(ClusterNode {
        id,
        ip,
        port,
        bus_port,
        hostname,
        flags,
        primary_id,
        ping_sent,
        pong_received,
        config_epoch,
        link,
        slots,
        migrating,
        importing,
    })
}

type Address = (Option<String>, u16, u16, Option<String>);

/// `ip:port@cport[,hostname[,key=value...]]`; the IP may be empty and may be IPv6 (whose colons
/// are why the port is taken after the last one). Extra `key=value` fields are ignored.
fn parse_address(text: &str) -> Option<Address> {
    let mut parts = text.split(',');
    let endpoint = parts.next()?;
    let hostname = parts
        .next()
        .filter(|h| !h.is_empty() && !h.contains('='))
        .map(str::to_owned);
    let (ip_port, bus) = endpoint.split_once('@')?;
    let (ip, port) = ip_port.rsplit_once(':')?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let ip = (!ip.is_empty()).then(|| ip.to_owned());
    Some((ip, port.parse().ok()?, bus.parse().ok()?, hostname))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID_A: &str = "cafe8f0ee03094df09eaac79907865f1b906ad6e";

    #[test]
    fn addresses() {
        assert_eq!(
            parse_address("127.0.0.61:7100@17100,valkey-0.example.test"),
            Some((
                Some("127.0.0.61".into()),
                7100,
                17100,
                Some("valkey-0.example.test".into())
            ))
        );
        assert_eq!(parse_address(":0@0"), Some((None, 0, 0, None)));
        assert_eq!(
            parse_address(":7100@17100"),
            Some((None, 7100, 17100, None))
        );
        assert_eq!(
            parse_address("::1:7100@17100,,shard-id=abc"),
            Some((Some("::1".into()), 7100, 17100, None))
        );
        assert_eq!(parse_address("127.0.0.1:7100"), None);
        assert_eq!(parse_address("127.0.0.1:x@1"), None);
    }

    #[test]
    fn errors_name_line_and_field() {
        let text = format!("\n{ID_A} 127.0.0.1:7100@17100 master - 0 0 1 connected 0-5\n{ID_A} x");
        assert_eq!(
            parse(&text),
            Err(ParseError::NodesBadField {
                line: 3,
                field: "address",
                value: "x".into()
            })
        );
        let text = format!("{ID_A} 127.0.0.1:7100@17100 master - 0 0 1 connected 0-16384");
        assert!(matches!(
            parse(&text),
            Err(ParseError::NodesBadField { field: "slot", .. })
        ));
        let text = format!("{ID_A} 127.0.0.1:7100@17100 master - 0 0 1 connected [5-?-{ID_A}]");
        assert!(matches!(
            parse(&text),
            Err(ParseError::NodesBadField {
                field: "slot marker",
                ..
            })
        ));
    }

    #[test]
    fn unknown_flags_are_kept() {
        let text = format!("{ID_A} 127.0.0.1:7100@17100 myself,primary,shiny - 0 0 1 connected");
        let nodes = parse(&text).unwrap();
        let me = nodes.myself().unwrap();
        assert!(me.is_primary());
        assert_eq!(me.flags.other, ["shiny"]);
    }
}
