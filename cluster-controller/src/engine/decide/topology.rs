//! The observation joined with the members: who is live, which Valkey node each member is, and
//! what every live node believes. The rules of [`super`] read only this.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use crate::engine::decision::NodeRef;
use crate::engine::member::{Desired, Member, Place};
use crate::engine::observe::{NodeState, Observation, Reach};
use crate::plan::rebalance::{Rebalance, RebalanceError};
use crate::valkey::cluster_nodes::{ClusterNode, ClusterNodes, NodeId};
use crate::valkey::slots::SlotSet;

/// A member that is ready and answered this pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct Live<'a> {
    pub member: &'a Member,
    pub place: Place,
    pub state: &'a NodeState,
}

impl<'a> Live<'a> {
    pub fn id(&self) -> &'a NodeId {
        self.state.id()
    }

    pub fn me(&self) -> &'a ClusterNode {
        self.state.myself()
    }

    pub fn view(&self) -> &'a ClusterNodes {
        self.state.nodes()
    }

    pub fn address(&self) -> SocketAddr {
        self.state.address()
    }

    pub fn name(&self) -> &'a str {
        &self.member.name
    }

    pub fn is_primary(&self) -> bool {
        self.me().is_primary()
    }

    /// The slots it claims in its own view.
    pub fn slots(&self) -> &'a SlotSet {
        &self.me().slots
    }

    pub fn staying(&self) -> bool {
        self.place == Place::Staying
    }

    /// The primary it replicates, by its own view.
    pub fn primary_id(&self) -> Option<&'a NodeId> {
        self.me()
            .primary_id
            .as_ref()
            .filter(|_| self.me().is_replica())
    }

    pub fn node_ref(&self) -> NodeRef {
        NodeRef {
            member: self.member.name.clone(),
            address: self.address(),
            id: self.id().clone(),
        }
    }

    /// Its entry for `id`, unless that entry is only a handshake.
    pub fn entry(&self, id: &NodeId) -> Option<&'a ClusterNode> {
        self.view().with_id(id).find(|n| !n.flags.handshake)
    }

    /// True when it is in the middle of a handshake with whatever listens at `addr`.
    pub fn handshaking_with(&self, addr: SocketAddr) -> bool {
        self.view()
            .nodes()
            .iter()
            .any(|n| n.flags.handshake && at(n, addr))
    }
}

/// True when the view's entry points at `addr` (same IP and port, address known).
pub(super) fn at(entry: &ClusterNode, addr: SocketAddr) -> bool {
    !entry.flags.noaddr && entry.port == addr.port() && entry.ip_addr() == Some(addr.ip())
}

/// A member that is not live this pass, and why.
#[derive(Debug, Clone)]
pub(super) struct Down<'a> {
    pub member: &'a Member,
    pub place: Place,
    pub reach: Option<&'a Reach>,
    /// Why the node that answers at its address is not taken for it (see [`super::identity`]).
    pub suspicion: Option<String>,
}

impl Down<'_> {
    pub fn why(&self) -> String {
        let name = &self.member.name;
        match self.reach {
            _ if self.suspicion.is_some() => {
                format!("{name}: {}", self.suspicion.as_deref().unwrap_or_default())
            }
            _ if self.member.address.is_none() => format!("{name} has no address yet"),
            Some(Reach::Unreachable { error, .. }) => format!("{name} does not answer: {error}"),
            _ if !self.member.ready => format!("{name} is not ready"),
            _ => format!("{name} was not observed"),
        }
    }
}

/// The cluster as one look found it: every member, live (with what its node answered) or down,
/// indexed by node id and shard. "Topology" in the rules means this observed view only; what
/// the spec asks for is [`Desired`], here as `desired`, and never called a topology.
pub(super) struct Topology<'a> {
    pub desired: &'a Desired,
    /// Every member, in (shard, index, name) order.
    pub members: Vec<&'a Member>,
    /// Members that are ready and answered as the node they are taken for.
    pub live: Vec<Live<'a>>,
    /// Members not live: not ready, silent, or answered by a node not taken for theirs.
    pub down: Vec<Down<'a>>,
    /// The rules look members up by node id and shard for every line of every view: indexes
    /// built once keep a pass from growing with the cube of the cluster's size.
    index: Index<'a>,
    /// The rebalance plan of this look, made the first time a rule asks for it: coverage, the
    /// moves, the moves beside running jobs and the progress all read the same one.
    pub(super) rebalance: OnceCell<Result<Rebalance<u32>, RebalanceError>>,
}

#[derive(Default)]
struct Index<'a> {
    /// The position in `live` of the member each node id answered as (the first, should two).
    live_by_id: HashMap<&'a NodeId, usize>,
    /// Positions in `live`, by shard, in `live`'s order.
    live_by_shard: BTreeMap<u32, Vec<usize>>,
    /// Every node id some member answered as, live or not.
    answering: HashSet<&'a NodeId>,
    /// The nodes staying members that are down are bound to.
    down_bound: HashSet<&'a NodeId>,
    /// Whether a staying member that is down was never bound yet has run (has an address).
    down_unbound_ran: bool,
}

impl<'a> Index<'a> {
    fn new(live: &[Live<'a>], down: &[Down<'a>]) -> Self {
        let mut index = Index::default();
        for (i, l) in live.iter().enumerate() {
            index.live_by_id.entry(l.id()).or_insert(i);
            index
                .live_by_shard
                .entry(l.member.shard)
                .or_default()
                .push(i);
            index.answering.insert(l.id());
        }
        for d in down {
            if let Some(state) = d.reach.and_then(Reach::state) {
                index.answering.insert(state.id());
            }
            if d.place != Place::Staying {
                continue;
            }
            match &d.member.node_id {
                Some(bound) => {
                    index.down_bound.insert(bound);
                }
                None => index.down_unbound_ran |= d.member.address.is_some(),
            }
        }
        index
    }
}

impl<'a> Topology<'a> {
    pub fn new(desired: &'a Desired, members: &'a [Member], observed: &'a Observation) -> Self {
        let mut sorted: Vec<&Member> = members.iter().collect();
        sorted.sort_by(|a, b| (a.shard, a.index, &a.name).cmp(&(b.shard, b.index, &b.name)));
        let answering: Vec<(&Member, &NodeState)> = sorted
            .iter()
            .filter(|m| m.ready)
            .filter_map(|m| Some((*m, observed.state(&m.name)?)))
            .collect();
        let mut suspicions = super::identity::suspicions(&sorted, &answering);
        let mut live = Vec::new();
        let mut down = Vec::new();
        for member in &sorted {
            let place = desired.place(member);
            let reach = observed.get(&member.name);
            let suspicion = suspicions.remove(&member.name);
            match reach.and_then(Reach::state) {
                Some(state) if member.ready && suspicion.is_none() => live.push(Live {
                    member,
                    place,
                    state,
                }),
                _ => down.push(Down {
                    member,
                    place,
                    reach,
                    suspicion,
                }),
            }
        }
        let index = Index::new(&live, &down);
        Self {
            desired,
            members: sorted,
            live,
            down,
            index,
            rebalance: OnceCell::new(),
        }
    }

    /// True when every staying member is live: rules that concern the whole cluster (moving
    /// slots between shards, rolling, declaring it healthy) need every member.
    pub fn whole(&self) -> bool {
        self.down.iter().all(|d| d.place != Place::Staying)
    }

    /// The staying members that are down.
    pub fn down_staying(&self) -> impl Iterator<Item = &Down<'a>> {
        self.down.iter().filter(|d| d.place == Place::Staying)
    }

    /// True when `id` is the node some member answered as this pass, live or not taken for its
    /// own (a node answering at two members is real, whoever it belongs to).
    pub fn answers(&self, id: &NodeId) -> bool {
        self.index.answering.contains(id)
    }

    /// True when `id` may be the node of a staying member that is down: its bound node, or any
    /// node at all for a member never bound that has run (it has an address). Such a node is
    /// never forgotten: the member returns as it.
    pub fn may_be_down_member(&self, id: &NodeId) -> bool {
        self.index.down_unbound_ran || self.index.down_bound.contains(id)
    }

    /// The node each member is bound to after this pass: the node a live member answered as,
    /// otherwise the one it was bound to before.
    pub fn bindings(&self) -> BTreeMap<String, NodeId> {
        let mut out: BTreeMap<String, NodeId> = self
            .members
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.node_id.clone()?)))
            .collect();
        for l in &self.live {
            out.insert(l.name().to_owned(), l.id().clone());
        }
        out
    }

    /// True when `shard` has a staying member that is down.
    pub fn shard_has_down(&self, shard: u32) -> bool {
        self.down_staying().any(|d| d.member.shard == shard)
    }

    pub fn staying(&self) -> impl Iterator<Item = &Live<'a>> {
        self.live.iter().filter(|l| l.staying())
    }

    /// The live member whose node has `id`.
    pub fn by_id(&self, id: &NodeId) -> Option<&Live<'a>> {
        self.index.live_by_id.get(id).map(|i| &self.live[*i])
    }

    pub fn shard(&self, shard: u32) -> impl Iterator<Item = &Live<'a>> {
        self.index
            .live_by_shard
            .get(&shard)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|i| &self.live[*i])
    }

    /// The node of `shard` that serves (or is to serve) its slots: the live primary that
    /// claims slots; without one, the lowest-index live primary that stays. `Err` names two
    /// members that both claim slots.
    pub fn shard_primary(&self, shard: u32) -> Result<Option<&Live<'a>>, (String, String)> {
        let mut with_slots = self
            .shard(shard)
            .filter(|l| l.is_primary() && !l.slots().is_empty());
        if let Some(first) = with_slots.next() {
            if let Some(second) = with_slots.next() {
                return Err((first.name().to_owned(), second.name().to_owned()));
            }
            return Ok(Some(first));
        }
        Ok(self
            .shard(shard)
            .filter(|l| l.is_primary())
            .min_by_key(|l| (!l.staying(), l.member.index)))
    }

    /// Every slot some live node's view assigns to someone.
    pub fn assigned_anywhere(&self) -> SlotSet {
        let mut assigned = SlotSet::new();
        for l in &self.live {
            assigned.union_with(l.view().assigned_slots());
        }
        assigned
    }

    /// The slots the live primaries claim for themselves.
    pub fn claimed(&self) -> SlotSet {
        let mut claimed = SlotSet::new();
        for l in self.live.iter().filter(|l| l.is_primary()) {
            claimed.union_with(l.slots());
        }
        claimed
    }
}
