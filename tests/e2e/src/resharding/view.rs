//! One server's CLUSTER NODES, parsed as far as the benchmark needs: who is there, at which
//! address, and which slots each primary serves.

use std::collections::BTreeMap;

use crate::{E2eError, Result, valkey_cmd};

pub const SLOTS: usize = 16384;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub id: String,
    pub ip: String,
    pub bus_port: u16,
    pub myself: bool,
    pub primary: bool,
    /// Slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
    /// A slot is marked importing or migrating on it.
    pub open: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub nodes: Vec<NodeLine>,
}

impl ClusterView {
    pub fn parse(text: &str) -> Result<Self> {
        let bad =
            |line: &str| E2eError::Check(format!("CLUSTER NODES line not understood: {line}"));
        let mut nodes = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(bad(line));
            }
            // ip:port@cport[,hostname]
            let (ip, rest) = fields[1].split_once(':').ok_or_else(|| bad(line))?;
            let bus = rest
                .split_once('@')
                .map(|(_, b)| b.split(',').next().unwrap_or(b))
                .and_then(|b| b.parse().ok())
                .unwrap_or(0);
            let flags: Vec<&str> = fields[2].split(',').collect();
            let mut slots = Vec::new();
            let mut open = false;
            for field in &fields[8..] {
                if field.starts_with('[') {
                    open = true;
                    continue;
                }
                let range = match field.split_once('-') {
                    Some((a, b)) => (a.parse(), b.parse()),
                    None => (field.parse(), field.parse()),
                };
                match range {
                    (Ok(a), Ok(b)) => slots.push((a, b)),
                    _ => return Err(bad(line)),
                }
            }
            nodes.push(NodeLine {
                id: fields[0].to_owned(),
                ip: ip.to_owned(),
                bus_port: bus,
                myself: flags.contains(&"myself"),
                primary: flags.contains(&"master"),
                slots,
                open,
            });
        }
        Ok(Self { nodes })
    }

    /// The id of each slot's owner.
    pub fn owners(&self) -> Vec<Option<String>> {
        let mut owners = vec![None; SLOTS];
        for node in &self.nodes {
            for (a, b) in &node.slots {
                for slot in *a..=*b {
                    owners[usize::from(slot)] = Some(node.id.clone());
                }
            }
        }
        owners
    }

    pub fn node(&self, id: &str) -> Option<&NodeLine> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn by_ip(&self, ip: &str) -> Option<&NodeLine> {
        self.nodes.iter().find(|n| n.ip == ip)
    }

    pub fn myself(&self) -> Option<&NodeLine> {
        self.nodes.iter().find(|n| n.myself)
    }

    /// How many primaries serve at least one slot.
    pub fn serving(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.primary && !n.slots.is_empty())
            .count()
    }

    /// Each slot's owner as the index of its address in `ips` (a shard number).
    pub fn shard_owners(&self, ips: &[String]) -> Vec<Option<usize>> {
        self.owners()
            .into_iter()
            .map(|owner| {
                let ip = &self.node(owner.as_deref()?)?.ip;
                ips.iter().position(|i| i == ip)
            })
            .collect()
    }
}

/// CLUSTER NODES of the server at `ip` (default user, no password).
pub async fn read(ip: &str) -> Result<ClusterView> {
    let mut conn = super::data::bulk_connection(ip).await?;
    ClusterView::parse(&valkey_cmd(&mut conn, &["CLUSTER", "NODES"]).await?)
}

/// Slots that change shard between `before` and `after` (shard numbers by slot), grouped by
/// (from, to).
pub fn moves(
    before: &[Option<usize>],
    after: &[Option<usize>],
) -> Result<BTreeMap<(usize, usize), Vec<u16>>> {
    let mut moves: BTreeMap<(usize, usize), Vec<u16>> = BTreeMap::new();
    for (slot, (b, a)) in before.iter().zip(after).enumerate() {
        match (b, a) {
            (Some(b), Some(a)) if b != a => moves
                .entry((*b, *a))
                .or_default()
                .push(u16::try_from(slot).unwrap_or(0)),
            (Some(_), Some(_)) => {}
            _ => return Err(E2eError::Check(format!("slot {slot} has no owner"))),
        }
    }
    Ok(moves)
}

/// Consecutive slots as inclusive ranges.
pub fn ranges(slots: &[u16]) -> Vec<(u16, u16)> {
    let mut out: Vec<(u16, u16)> = Vec::new();
    for slot in slots {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == *slot => *end = *slot,
            _ => out.push((*slot, *slot)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 10.213.1.5:6379@21000 myself,master - 0 0 1 connected 0-5460 [5461->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 10.213.2.7:6379@21000,host master - 0 1 2 connected 5461-10922
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 10.213.3.2:6379@21000 master - 0 1 3 connected 10923-16383
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 10.213.1.9:6379@21000 master - 0 1 0 connected
";

    #[test]
    fn parses_owners_addresses_and_open_slots() {
        let view = ClusterView::parse(NODES).unwrap_or_default();
        assert_eq!(view.nodes.len(), 4);
        assert_eq!(view.serving(), 3);
        let me = view
            .myself()
            .cloned()
            .unwrap_or_else(|| panic!("no myself"));
        assert!(me.open && me.primary && me.bus_port == 21000);
        assert_eq!(view.nodes[1].ip, "10.213.2.7");
        let ips: Vec<String> = ["10.213.1.5", "10.213.2.7", "10.213.3.2", "10.213.1.9"]
            .map(String::from)
            .to_vec();
        let shards = view.shard_owners(&ips);
        assert_eq!(
            (shards[0], shards[5461], shards[16383]),
            (Some(0), Some(1), Some(2))
        );
        let mut after = shards.clone();
        after[5461] = Some(3);
        after[5462] = Some(3);
        after[7] = Some(3);
        let moved = moves(&shards, &after).unwrap_or_default();
        assert_eq!(moved.get(&(1, 3)), Some(&vec![5461, 5462]));
        assert_eq!(moved.get(&(0, 3)), Some(&vec![7]));
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 7), (9, 10)]);
    }
}
