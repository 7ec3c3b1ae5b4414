//! `CLUSTER NODES`: one line per node the answering node knows, itself flagged `myself`.
//!
//! `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent> <pong-recv> <config-epoch>
//! <link-state> <slot>...`, where a slot item is `a`, `a-b`, or, on the `myself` line only, an
//! open migration `[a->-<target>]` / `[a-<-<source>]`.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

use super::ParseError;
use super::slots::{Slot, SlotRange, SlotSet};

/// A node's 40-character hexadecimal cluster identity, held inline: an observation of a large
/// cluster holds millions of them and compares them members² times a pass.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId([u8; NodeId::LEN]);

impl NodeId {
    pub const LEN: usize = 40;

    /// `None` unless `text` is 40 hexadecimal digits.
    pub fn parse(text: &str) -> Option<Self> {
        let digits: [u8; Self::LEN] = text.as_bytes().try_into().ok()?;
        digits
            .iter()
            .all(u8::is_ascii_hexdigit)
            .then(|| Self(digits.map(|b| b.to_ascii_lowercase())))
    }

    pub fn as_str(&self) -> &str {
        // Always ASCII hex: `parse` is the only way in.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The id's first 32 bits. Ids are random, so these tell almost any two apart without
    /// comparing 40 characters.
    fn prefix(&self) -> u32 {
        self.0[..8].iter().fold(0, |acc, digit| {
            (acc << 4) | char::from(*digit).to_digit(16).unwrap_or_default()
        })
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NodeId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

/// What a line of `CLUSTER NODES` says of a node apart from the viewer's own contact with it:
/// every view that describes the node alike shares one of these (see [`LineCache`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
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
    pub config_epoch: u64,
    pub slots: SlotSet,
    /// `[slot->-target]`: slots this node is migrating away, and to whom.
    pub migrating: Vec<(Slot, NodeId)>,
    /// `[slot-<-source]`: slots this node is importing, and from whom.
    pub importing: Vec<(Slot, NodeId)>,
    /// `ip`, parsed once: the engine compares addresses members² times a pass.
    ip_addr: Option<IpAddr>,
}

impl NodeLine {
    /// The IP address, when known and well-formed.
    pub fn ip_addr(&self) -> Option<IpAddr> {
        self.ip_addr
    }

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

/// One line of `CLUSTER NODES`: the node as described ([`NodeLine`], which it dereferences to)
/// and when this viewer last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    line: Arc<NodeLine>,
    /// Milliseconds (Unix time) of the unanswered ping in flight, 0 if none.
    pub ping_sent: u64,
    /// Milliseconds (Unix time) of the last pong received.
    pub pong_received: u64,
    pub link: LinkState,
}

impl Deref for ClusterNode {
    type Target = NodeLine;

    fn deref(&self) -> &NodeLine {
        &self.line
    }
}

/// The whole reply, in the order Valkey listed the nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterNodes {
    nodes: Vec<ClusterNode>,
    /// The engine looks nodes up by id in every view, members² times a pass, which scans
    /// would make cubic in the cluster's size: each line's id prefix (high half) and position
    /// (low half), sorted, to search integers rather than strings.
    by_id: Vec<u64>,
    /// Every slot some line serves.
    assigned: SlotSet,
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
    /// A view of `nodes`, listed in this order.
    pub fn new(nodes: Vec<ClusterNode>) -> Self {
        let mut by_id: Vec<u64> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (u64::from(node.id.prefix()) << 32) | i as u64)
            .collect();
        by_id.sort_unstable();
        let mut assigned = SlotSet::new();
        for node in &nodes {
            assigned.union_with(&node.slots);
        }
        Self {
            nodes,
            by_id,
            assigned,
        }
    }

    /// The lines, in the order Valkey listed them.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    pub fn myself(&self) -> Result<&ClusterNode, ParseError> {
        self.nodes
            .iter()
            .find(|n| n.flags.myself)
            .ok_or(ParseError::NodesNoMyself)
    }

    /// The lines of `id`, in listing order: one, except for handshakes, whose ids are random.
    pub fn with_id<'a, 'b>(
        &'a self,
        id: &'b NodeId,
    ) -> impl Iterator<Item = &'a ClusterNode> + use<'a, 'b> {
        let prefix = u64::from(id.prefix());
        let start = self.by_id.partition_point(|key| key >> 32 < prefix);
        let len = self.by_id[start..].partition_point(|key| key >> 32 == prefix);
        // Sorted by prefix then position, so lines sharing the prefix come in listing order.
        self.by_id[start..start + len]
            .iter()
            .map(move |key| &self.nodes[(key & u64::from(u32::MAX)) as usize])
            .filter(move |node| &node.id == id)
    }

    pub fn get(&self, id: &NodeId) -> Option<&ClusterNode> {
        self.with_id(id).next()
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
    pub fn assigned_slots(&self) -> &SlotSet {
        &self.assigned
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
    parse_with(text, None)
}

/// Parsed lines shared between the replies of one observation. Each member lists every node, so
/// an observation holds members² lines; the views that describe a node alike (in a settled
/// cluster all do, but for the times they last heard from it and their links to it) share one
/// parsed line and its 2 KiB slot set, and each view keeps only a few words of its own per line.
#[derive(Debug, Default)]
pub struct LineCache {
    /// By the line's text without its per-viewer fields.
    lines: Mutex<HashMap<String, Arc<NodeLine>>>,
}

impl LineCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// [`parse`], sharing lines with the replies parsed before through this cache.
    pub fn parse(&self, text: &str) -> Result<ClusterNodes, ParseError> {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        parse_with(text, Some(&mut lines))
    }
}

/// `CLUSTER NODES` as the members reach each other. A node that announces an address to clients
/// (`cluster-announce-client-ipv4`, for clients outside Kubernetes) is shown at that address to
/// every client over IPv4, the operator included, while the cluster bus and replication use its
/// pod IP; behind a NodePort its announced client port (`cluster-announce-client-port`) stands
/// in for its port too. `internal` maps each announced address and port back to the pod IP and
/// port of the member that announces them (what the operator set, not what it read: members on
/// one Kubernetes node share its address and differ by port), so the rules that compare
/// addresses judge the addresses the cluster itself uses. Lines with no announced address are
/// left as they are.
pub fn with_internal_addresses<'a>(
    text: &'a str,
    internal: &std::collections::BTreeMap<std::net::SocketAddr, std::net::SocketAddr>,
) -> std::borrow::Cow<'a, str> {
    if internal.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let mut fields = line.splitn(3, ' ');
        let (Some(id), Some(address), rest) = (fields.next(), fields.next(), fields.next()) else {
            out.push_str(line);
            continue;
        };
        let mapped = address.split_once('@').and_then(|(client, bus)| {
            let to = internal.get(&client.parse::<std::net::SocketAddr>().ok()?)?;
            Some(format!("{to}@{bus}"))
        });
        match (mapped, rest) {
            (Some(address), Some(rest)) => {
                out.push_str(id);
                out.push(' ');
                out.push_str(&address);
                out.push(' ');
                out.push_str(rest);
            }
            _ => out.push_str(line),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The fields of a line that are the viewer's own: ping-sent, pong-recv, link-state.
const VIEWER_FIELDS: [usize; 3] = [4, 5, 7];
/// The fields every line has before its slots.
const FIELDS: usize = 8;

fn parse_with(
    text: &str,
    mut cache: Option<&mut HashMap<String, Arc<NodeLine>>>,
) -> Result<ClusterNodes, ParseError> {
    let mut fields = Vec::new();
    let mut key = String::new();
    let mut nodes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        fields.clear();
        fields.extend(line.split_ascii_whitespace());
        // A line missing fields is an error: a full parse names the first one missing.
        let cache = cache.as_deref_mut().filter(|_| fields.len() >= FIELDS);
        let Some(cache) = cache else {
            let (line, own) = parse_line(i + 1, &fields)?;
            nodes.push(own.of(Arc::new(line)));
            continue;
        };
        key.clear();
        for (_, field) in fields
            .iter()
            .enumerate()
            .filter(|(n, _)| !VIEWER_FIELDS.contains(n))
        {
            key.push_str(field);
            key.push(' ');
        }
        // A cached line parsed from the same shared fields, so only the viewer's own fields
        // can be malformed here, and they are checked as a full parse would.
        let node = match cache.get(key.as_str()) {
            Some(shared) => Viewer::parse(i + 1, &fields)?.of(Arc::clone(shared)),
            None => {
                let (line, own) = parse_line(i + 1, &fields)?;
                let shared = Arc::new(line);
                cache.insert(key.clone(), Arc::clone(&shared));
                own.of(shared)
            }
        };
        nodes.push(node);
    }
    Ok(ClusterNodes::new(nodes))
}

/// A line's fields that are the viewer's own.
struct Viewer {
    ping_sent: u64,
    pong_received: u64,
    link: LinkState,
}

impl Viewer {
    /// From a line whose other fields are known to be well-formed.
    fn parse(line_no: usize, fields: &[&str]) -> Result<Self, ParseError> {
        let field = Fields { line_no, fields };
        Ok(Self {
            ping_sent: field.number(4, "ping-sent")?,
            pong_received: field.number(5, "pong-recv")?,
            link: field.link()?,
        })
    }

    fn of(self, line: Arc<NodeLine>) -> ClusterNode {
        ClusterNode {
            line,
            ping_sent: self.ping_sent,
            pong_received: self.pong_received,
            link: self.link,
        }
    }
}

struct Fields<'a, 'b> {
    line_no: usize,
    fields: &'a [&'b str],
}

impl<'b> Fields<'_, 'b> {
    fn get(&self, i: usize, field: &'static str) -> Result<&'b str, ParseError> {
        self.fields
            .get(i)
            .copied()
            .ok_or(ParseError::NodesMissingField {
                line: self.line_no,
                field,
            })
    }

    fn bad(&self, field: &'static str, value: &str) -> ParseError {
        ParseError::NodesBadField {
            line: self.line_no,
            field,
            value: value.to_owned(),
        }
    }

    fn number(&self, i: usize, field: &'static str) -> Result<u64, ParseError> {
        let value = self.get(i, field)?;
        value.parse::<u64>().map_err(|_| self.bad(field, value))
    }

    fn link(&self) -> Result<LinkState, ParseError> {
        match self.get(7, "link-state")? {
            "connected" => Ok(LinkState::Connected),
            "disconnected" => Ok(LinkState::Disconnected),
            other => Err(self.bad("link-state", other)),
        }
    }
}

/// Every field of a line, checked in the order they appear.
fn parse_line(line_no: usize, fields: &[&str]) -> Result<(NodeLine, Viewer), ParseError> {
    let f = Fields { line_no, fields };
    let bad = |field: &'static str, value: &str| f.bad(field, value);

    let id_text = f.get(0, "id")?;
    let id = NodeId::parse(id_text).ok_or_else(|| bad("id", id_text))?;
    let address = f.get(1, "address")?;
    let (ip, port, bus_port, hostname) =
        parse_address(address).ok_or_else(|| bad("address", address))?;
    let flags = Flags::parse(f.get(2, "flags")?);
    let primary_text = f.get(3, "primary")?;
    let primary_id = match primary_text {
        "-" => None,
        other => Some(NodeId::parse(other).ok_or_else(|| bad("primary", other))?),
    };
    let ping_sent = f.number(4, "ping-sent")?;
    let pong_received = f.number(5, "pong-recv")?;
    let config_epoch = f.number(6, "config-epoch")?;
    let link = f.link()?;

    let mut slots = SlotSet::new();
    let mut migrating = Vec::new();
    let mut importing = Vec::new();
    for item in fields.iter().skip(FIELDS) {
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

    let line = NodeLine {
        id,
        ip_addr: ip.as_deref().and_then(|ip| ip.parse().ok()),
        ip,
        port,
        bus_port,
        hostname,
        flags,
        primary_id,
        config_epoch,
        slots,
        migrating,
        importing,
    };
    let own = Viewer {
        ping_sent,
        pong_received,
        link,
    };
    Ok((line, own))
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

    #[test]
    fn announced_client_addresses_read_back_as_the_members_pod_ips() {
        let text = "\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.213.255.7:6379@20001 myself,master - 0 0 1 connected 0-8191
bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 10.213.255.9:6379@20001,host master - 0 1 2 connected 8192-16383
cccccccccccccccccccccccccccccccccccccccc 10.213.1.5:6379@20001 slave aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 1 1 connected
";
        let internal = std::collections::BTreeMap::from([
            (at("10.213.255.7:6379"), at("10.213.1.3:6379")),
            (at("10.213.255.9:6379"), at("10.213.2.4:6379")),
        ]);
        let nodes = parse(&with_internal_addresses(text, &internal)).unwrap_or_default();
        let ips: Vec<_> = nodes.nodes().iter().map(|n| n.ip_addr()).collect();
        assert_eq!(
            ips,
            [
                Some(ip("10.213.1.3")),
                Some(ip("10.213.2.4")),
                Some(ip("10.213.1.5"))
            ],
            "announced addresses map back; others stay"
        );
        assert_eq!(nodes.nodes()[1].bus_port, 20001);
        assert_eq!(nodes.nodes()[1].hostname.as_deref(), Some("host"));
        assert_eq!(nodes.nodes()[0].slots.count(), 8192);
        assert!(matches!(
            with_internal_addresses(text, &Default::default()),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn at(text: &str) -> std::net::SocketAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// Behind NodePorts two members on one Kubernetes node announce its address with their own
    /// node ports (as Valkey 9.1 shows them): each maps back to its own pod, port included.
    #[test]
    fn members_sharing_a_node_address_map_back_by_their_announced_ports() {
        let text = "\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.213.1.1:30123@16379 myself,master - 0 0 1 connected 0-8191
bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 10.213.1.1:30124@16379 master - 0 1 2 connected 8192-16383
";
        let internal = std::collections::BTreeMap::from([
            (at("10.213.1.1:30123"), at("10.213.1.7:6379")),
            (at("10.213.1.1:30124"), at("10.213.1.8:6379")),
        ]);
        let nodes = parse(&with_internal_addresses(text, &internal)).unwrap_or_default();
        let found: Vec<_> = nodes
            .nodes()
            .iter()
            .map(|n| (n.ip_addr(), n.port, n.bus_port))
            .collect();
        assert_eq!(
            found,
            [
                (Some(ip("10.213.1.7")), 6379, 16379),
                (Some(ip("10.213.1.8")), 6379, 16379)
            ]
        );
    }

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

    const ID_B: &str = "78514dbdf501ed4087795bd22be670b0f944f3b7";

    #[test]
    fn views_share_the_lines_they_agree_on() {
        let view = |a: &str, b: &str| format!("{ID_A} 127.0.0.1:7100@17100 {a} 1 0-5\n{ID_B} {b}");
        let replica = format!("127.0.0.2:7100@17100 slave {ID_A} 0 1700000000900 1 connected");
        let texts = [
            view("myself,master - 0 0 1 connected", &replica),
            view("master - 0 1700000000500 1 connected", &replica),
            view(
                "master - 1700000000700 1700000000600 1 disconnected",
                &replica,
            ),
        ];
        let cache = LineCache::new();
        let views: Vec<ClusterNodes> = texts.iter().map(|t| cache.parse(t).unwrap()).collect();
        for (view, text) in views.iter().zip(&texts) {
            assert_eq!(view, &parse(text).unwrap());
        }
        let (a, b, c) = (&views[0].nodes, &views[1].nodes, &views[2].nodes);
        assert!(Arc::ptr_eq(&b[0].line, &c[0].line));
        assert!(Arc::ptr_eq(&a[1].line, &c[1].line));
        assert!(
            !Arc::ptr_eq(&a[0].line, &b[0].line),
            "myself is the viewer's alone"
        );
        assert_eq!(
            (c[0].ping_sent, c[0].pong_received),
            (1700000000700, 1700000000600)
        );
        assert_eq!(c[0].link, LinkState::Disconnected);
        assert_eq!(b[0].link, LinkState::Connected);

        let bad = texts[1].replace(" 1700000000500 ", " soon ");
        assert_eq!(cache.parse(&bad), parse(&bad));
        assert!(matches!(
            parse(&bad),
            Err(ParseError::NodesBadField {
                field: "pong-recv",
                ..
            })
        ));
        let short = format!("{ID_A} 127.0.0.1:7100@17100 master - 0 0 1");
        assert_eq!(cache.parse(&short), parse(&short));
    }

    #[test]
    fn lines_are_found_by_id_in_listing_order() {
        // TWIN shares B's first 32 bits, which the index sorts by.
        let twin = format!("{}{}", &ID_B[..8], "0".repeat(32));
        let text = format!(
            "{ID_B} 127.0.0.2:7100@17100 handshake - 0 0 0 connected\n\
             {twin} 127.0.0.4:7100@17100 master - 0 0 3 connected\n\
             {ID_A} 127.0.0.1:7100@17100 myself,master - 0 0 1 connected 0-5\n\
             {ID_B} 127.0.0.3:7100@17100 master - 0 0 2 connected 6-9"
        );
        let view = parse(&text).unwrap();
        let b = NodeId::parse(ID_B).unwrap();
        let ips: Vec<Option<&str>> = view.with_id(&b).map(|n| n.ip.as_deref()).collect();
        assert_eq!(ips, [Some("127.0.0.2"), Some("127.0.0.3")]);
        let twin = NodeId::parse(&twin).unwrap();
        let ips: Vec<Option<&str>> = view.with_id(&twin).map(|n| n.ip.as_deref()).collect();
        assert_eq!(ips, [Some("127.0.0.4")]);
        assert_eq!(
            view.get(&twin).unwrap().ip_addr(),
            Some(IpAddr::from([127, 0, 0, 4]))
        );
        assert!(view.get(&b).unwrap().flags.handshake);
        assert_eq!(view.get(&NodeId::parse(ID_A).unwrap()).unwrap().port, 7100);
        assert!(view.get(&NodeId::parse(&"0".repeat(40)).unwrap()).is_none());
        assert_eq!(view.assigned_slots().to_string(), "0-9");
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
