//! The members as the Kubernetes side sees them (one ValkeyNode each) and what the spec wants.

use std::net::SocketAddr;
use std::time::Duration;

use crate::valkey::cluster_nodes::NodeId;
use crate::valkey::slots::SlotSet;

/// One ValkeyNode, as the Kubernetes side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `<cluster>-<shard>-<index>`.
    pub name: String,
    pub shard: u32,
    pub index: u32,
    /// `status.podIP:6379` when known.
    pub address: Option<SocketAddr>,
    /// `status.ready`: the pod is Ready and answered PING.
    pub ready: bool,
    /// The pod template revision the member runs.
    pub current_revision: Option<String>,
    /// The pod template revision the member should run.
    pub desired_revision: Option<String>,
    /// What the parent currently allows (`spec.allowedRevision`).
    pub allowed_revision: Option<String>,
    /// The cluster node id the member was last seen with (the engine's own earlier
    /// [`crate::engine::Pass::bindings`], kept by the Kubernetes side): a member is bound to its
    /// node, so a reused address or a stale status cannot make another node pass for it, and
    /// the node of a member that is down is never taken for a stranger.
    pub node_id: Option<NodeId>,
    /// The Kubernetes node and zone the member's pod runs on (`status.nodeName`, `status.zone`),
    /// when known: primaries are kept apart by them.
    pub node_name: Option<String>,
    pub zone: Option<String>,
    /// The address and port the member tells clients outside Kubernetes (its ValkeyNode's
    /// `cluster-announce-client-ipv4` and, behind a NodePort, `cluster-announce-client-port`),
    /// which Valkey shows in place of its pod IP and port: the engine reads them back as the
    /// member's (see `with_internal_addresses`).
    pub announced: Option<std::net::SocketAddr>,
}

impl Member {
    /// A member with no revisions, for callers that do not roll.
    pub fn new(shard: u32, index: u32, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            shard,
            index,
            address: None,
            ready: false,
            current_revision: None,
            desired_revision: None,
            allowed_revision: None,
            node_id: None,
            node_name: None,
            zone: None,
            announced: None,
        }
    }

    /// Runs an older revision than wanted and has not been released to restart yet.
    pub fn needs_restart(&self) -> bool {
        self.is_outdated() && self.allowed_revision != self.desired_revision
    }

    /// Released to restart (`allowed == desired`) but not yet running the desired revision.
    pub fn is_restarting(&self) -> bool {
        self.is_outdated() && self.allowed_revision == self.desired_revision
    }

    /// Runs another revision than its spec asks for, released to restart or not.
    pub fn is_outdated(&self) -> bool {
        matches!((&self.current_revision, &self.desired_revision),
            (Some(current), Some(desired)) if current != desired)
    }
}

/// What the spec asks of the engine (how many shards and replicas, whether the servers keep
/// their data, what the user allows when data is lost) and what the Kubernetes side adds to it
/// (the cluster formed or held keys before, a restore's slots, a backup holding slot moves, how
/// long the cluster has been steady).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub shards: u32,
    /// Replicas per shard: each shard has members with index `0..=replicas`.
    pub replicas: u32,
    /// The servers keep their data on disk across restarts (append-only file). Without it a
    /// restarted primary with no replica comes back empty.
    pub persistent: bool,
    /// The cluster has served slots before (a later pass, not its formation): slots that then
    /// have no owner anywhere lost their data, even when no surviving node holds a key.
    pub formed: bool,
    /// The cluster held keys when the Kubernetes side last looked (in an earlier pass of this
    /// controller): a primary that restarts without its data and with no copy elsewhere then
    /// lost data, never merely came up new.
    pub held_keys: bool,
    /// What the user allows when every copy of some slots is gone.
    pub lost_slots: LostSlotsPolicy,
    /// A cluster restored from a backup (`spec.restoreFrom`): each shard's slots as the
    /// backup's manifest has them, by shard index. Each shard's first member (index 0) loaded
    /// the shard's snapshot, so it holds keys and still forms, and it takes exactly these slots,
    /// never an even split nor another member. The parent sets it from creation until every slot
    /// has been served once, and never after: a slot lost later must stay a loss the user
    /// decides on, not be handed again to a first member.
    pub restore: Option<Vec<SlotSet>>,
    /// Why no slot move may start now, when one may not: a backup of the cluster is being
    /// captured (its name). Moves already under way go on.
    pub slot_moves_held: Option<String>,
    /// How long the cluster has been steady (whole, every slot served, nothing to do) as the
    /// Kubernetes side saw it in its earlier passes; zero when its last pass was not.
    pub steady_for: Duration,
    /// How long the cluster must have been steady before a planned failover spreads its
    /// primaries apart: each costs clients a write pause, and right after a failover Valkey
    /// made they have just paid one; a cluster still settling may move again anyway.
    pub spread_after: Duration,
}

/// What the user allows when data is lost (`spec.onSlotsLost`, `spec.acceptLostSlots`). The
/// operator never serves slots again empty, nor promotes a replica that missed writes, on its
/// own: a store must not silently answer "no such key" for data it had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostSlotsPolicy {
    /// A cache: serve lost slots again at once, empty (`onSlotsLost: Refill`).
    pub refill: bool,
    /// Slots the user named as accepted lost (`acceptLostSlots`).
    pub accepted: Option<SlotSet>,
}

/// What lets the operator lose what some slots held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// The cluster is a cache (`onSlotsLost: Refill`): always.
    Refill,
    /// The user named them (`acceptLostSlots`): once, for the loss at hand; a step taken on it
    /// spends the acknowledgement (see [`crate::engine::Decision::spends_acknowledgement`]).
    Accepted,
}

impl LostSlotsPolicy {
    /// Whether the user allows losing what `slots` held.
    pub fn allows(&self, slots: &SlotSet) -> bool {
        self.permits(slots).is_some()
    }

    /// What allows losing what `slots` held, if anything does.
    pub fn permits(&self, slots: &SlotSet) -> Option<Permit> {
        if self.refill {
            Some(Permit::Refill)
        } else if self.accepted.as_ref().is_some_and(|a| slots.is_subset(a)) {
            Some(Permit::Accepted)
        } else {
            None
        }
    }
}

/// Where a member stands relative to [`Desired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A member the spec asks for.
    Staying,
    /// Its shard is `>= shards`: drain, forget, delete.
    LeavingShard,
    /// Its index is `> replicas` in a staying shard: forget, delete (after a failover if it
    /// is the primary).
    Surplus,
}

impl Desired {
    /// `shards` × (1 + `replicas`) members, without persistence, never formed before, and the
    /// safe policy for lost slots (wait for the user).
    pub const fn new(shards: u32, replicas: u32) -> Self {
        Self {
            shards,
            replicas,
            persistent: false,
            formed: false,
            held_keys: false,
            lost_slots: LostSlotsPolicy {
                refill: false,
                accepted: None,
            },
            restore: None,
            slot_moves_held: None,
            steady_for: Duration::ZERO,
            spread_after: Duration::ZERO,
        }
    }

    pub fn place(&self, member: &Member) -> Place {
        if member.shard >= self.shards {
            Place::LeavingShard
        } else if member.index > self.replicas {
            Place::Surplus
        } else {
            Place::Staying
        }
    }

    /// The `(shard, index)` pairs the spec asks for.
    pub fn slots_of_members(&self) -> impl Iterator<Item = (u32, u32)> + use<> {
        let replicas = self.replicas;
        (0..self.shards).flat_map(move |shard| (0..=replicas).map(move |index| (shard, index)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places() {
        let desired = Desired::new(2, 1);
        assert_eq!(desired.place(&Member::new(1, 1, "c-1-1")), Place::Staying);
        assert_eq!(desired.place(&Member::new(1, 2, "c-1-2")), Place::Surplus);
        assert_eq!(
            desired.place(&Member::new(2, 0, "c-2-0")),
            Place::LeavingShard
        );
        assert_eq!(desired.slots_of_members().count(), 4);
    }

    #[test]
    fn revisions() {
        let mut m = Member::new(0, 0, "c-0-0");
        assert!(!m.needs_restart() && !m.is_restarting());
        m.current_revision = Some("a".into());
        m.desired_revision = Some("b".into());
        m.allowed_revision = Some("a".into());
        assert!(m.needs_restart());
        m.allowed_revision = Some("b".into());
        assert!(m.is_restarting() && !m.needs_restart());
        m.current_revision = Some("b".into());
        assert!(!m.is_restarting() && !m.needs_restart());
    }

    #[test]
    fn lost_slots_need_the_users_word() {
        let lost: SlotSet = "0-99".parse().expect("slots");
        let mut policy = LostSlotsPolicy::default();
        assert!(!policy.allows(&lost));
        policy.accepted = Some("0-50".parse().expect("slots"));
        assert!(!policy.allows(&lost), "only part of them accepted");
        policy.accepted = Some("0-5460".parse().expect("slots"));
        assert!(policy.allows(&lost));
        assert!(
            LostSlotsPolicy {
                refill: true,
                accepted: None
            }
            .allows(&lost)
        );
    }
}
