//! What a pass decides: one action, a wait, a steady state, or a block, each with a reason a
//! person can read in `kubectl get valkeycluster -o wide`.

use std::fmt;
use std::net::SocketAddr;

use valkey_api::v1alpha1::StatusReason;

use super::member::Permit;
use super::mode::{Carried, Carrier};
use crate::plan::migration::legacy::Intent;
use crate::valkey::cluster_nodes::NodeId;
use crate::valkey::slots::{SlotRange, SlotSet};

/// A member's Valkey node, as far as an action needs it: who (for messages), where (to send
/// the command) and which cluster identity (to check it is still the same node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub member: String,
    pub address: SocketAddr,
    pub id: NodeId,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.member, self.address)
    }
}

/// One target's part of a `CLUSTER MIGRATESLOTS` naming several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtomicMove {
    pub target: NodeRef,
    pub ranges: Vec<SlotRange>,
}

/// Legacy (pre-9) slot migration of a set of slots from one primary to another, run by the
/// executor slot by slot with the stateless machine of [`crate::plan::migration::legacy`],
/// as many slots as fit in one pass's time budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMigration {
    pub source: NodeRef,
    pub target: NodeRef,
    /// Every other primary, told the new owner at the end of each slot.
    pub others: Vec<NodeRef>,
    pub slots: SlotSet,
    pub intent: Intent,
    /// Other moves of the same rebalance plan, each between its own pair of primaries, run side
    /// by side with this one in the same step (each with no `also` of its own): a shard that
    /// gives slots to several, or several that give to a new one, move them all at once rather
    /// than one pair a pass.
    pub also: Vec<LegacyMigration>,
}

/// The one next step. Valkey actions are executed by [`super::execute`]; the Kubernetes
/// actions are only named, for the Kubernetes side to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `CLUSTER MEET <peer> <bus_port>` sent to `on`: `bus_port` is the one the peer itself
    /// announces, since each cluster's bus has a port of its own (not the client port + 10000).
    Meet {
        on: NodeRef,
        peer: SocketAddr,
        bus_port: u16,
    },
    /// `CLUSTER ADDSLOTSRANGE` on `on`: slots nobody owns.
    AddSlots { on: NodeRef, slots: SlotSet },
    /// `CLUSTER REPLICATE <primary_id>` on `on`.
    Replicate { on: NodeRef, primary_id: NodeId },
    /// `CLUSTER FORGET <node_id>` on `on`.
    Forget { on: NodeRef, node_id: NodeId },
    /// Pre-9 migration of some slots (a batch per pass).
    MigrateSlots(LegacyMigration),
    /// `CLUSTER MIGRATESLOTS` on the source (Valkey 9+); progress is read from
    /// `CLUSTER GETSLOTMIGRATIONS` on later passes.
    StartAtomicMigration {
        source: NodeRef,
        target: NodeRef,
        ranges: Vec<SlotRange>,
        /// The source's moves to other targets, started by the same command (a job each), so
        /// a shard that gives slots to several others starts them all at once rather than one
        /// job per pass after the one before it ended.
        also: Box<[AtomicMove]>,
    },
    /// `CLUSTER CANCELSLOTMIGRATIONS ALL` on `on`.
    CancelMigrations { on: NodeRef },
    /// `CLUSTER SETSLOT <slot> STABLE` on `on` for each slot: migration markers whose peer no
    /// longer exists, or markers left on `on`'s replicas (a primary replicates SETSLOT to
    /// them) after the primary closed the slot.
    ClearSlot { on: NodeRef, slots: SlotSet },
    /// A planned `CLUSTER FAILOVER` on `on_replica`, which takes over from `primary`.
    Failover {
        on_replica: NodeRef,
        primary: NodeRef,
    },
    /// `CLUSTER FAILOVER FORCE` on `on_replica`: an election without its primary's agreement,
    /// for a primary that is alive but must not stay primary (it restarted without the data its
    /// replica holds, so the replica's link to it stays fenced and a planned failover, which
    /// waits for the replica to catch up with the primary, could never start).
    ForcedFailover {
        on_replica: NodeRef,
        primary: NodeRef,
    },
    /// `CLUSTER FAILOVER TAKEOVER` on `on_replica`: its primary `failed` has been silent for
    /// longer than Valkey needs to notice, and no election can happen (too few primaries left
    /// to vote, as in a two-shard cluster). The replica takes the slots without a vote.
    Takeover { on_replica: NodeRef, failed: NodeId },
    /// `ACL SETUSER ... on` for every user of `on`, the replication user `user` last: the node
    /// is settled in the cluster, so replicas (and slot imports) may log in to it as the
    /// replication user, and clients (fenced too on a server that keeps no data) may use it.
    AdmitReplication {
        on: NodeRef,
        /// Other nodes admitted in the same step, each as `on` (after a mass restart, one look
        /// admits every settled node rather than one per look).
        also: Vec<NodeRef>,
        user: String,
    },
    /// Kubernetes: set the member's `allowedRevision` to its desired revision.
    AllowRestart { member: String },
    /// Kubernetes: delete the member's ValkeyNode (drained and forgotten).
    DeleteMember { member: String },
}

impl Carried for Action {
    fn carrier(&self) -> Carrier {
        match self {
            Action::AllowRestart { .. } | Action::DeleteMember { .. } => Carrier::Kubernetes,
            _ => Carrier::Valkey,
        }
    }

    /// Steps that move keys between primaries.
    fn moves_data(&self) -> bool {
        matches!(
            self,
            Action::MigrateSlots(_) | Action::StartAtomicMigration { .. }
        )
    }
}

impl Action {
    /// The kind of step, as a CamelCase word (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Meet { .. } => "Meet",
            Action::AddSlots { .. } => "AddSlots",
            Action::Replicate { .. } => "Replicate",
            Action::Forget { .. } => "Forget",
            Action::MigrateSlots(_) => "MigrateSlots",
            Action::StartAtomicMigration { .. } => "StartAtomicMigration",
            Action::CancelMigrations { .. } => "CancelMigrations",
            Action::ClearSlot { .. } => "ClearSlot",
            Action::Failover { .. } => "Failover",
            Action::ForcedFailover { .. } => "ForcedFailover",
            Action::Takeover { .. } => "Takeover",
            Action::AdmitReplication { .. } => "AdmitReplication",
            Action::AllowRestart { .. } => "AllowRestart",
            Action::DeleteMember { .. } => "DeleteMember",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Meet { on, peer, bus_port } => {
                write!(f, "CLUSTER MEET {peer}@{bus_port} on {on}")
            }
            Action::AddSlots { on, slots } => write!(f, "CLUSTER ADDSLOTSRANGE {slots} on {on}"),
            Action::Replicate { on, primary_id } => {
                write!(f, "CLUSTER REPLICATE {primary_id} on {on}")
            }
            Action::Forget { on, node_id } => write!(f, "CLUSTER FORGET {node_id} on {on}"),
            Action::MigrateSlots(m) => {
                write!(
                    f,
                    "migrate slots {} from {} to {} ({:?})",
                    m.slots, m.source, m.target, m.intent
                )?;
                for o in &m.also {
                    write!(f, ", {} from {} to {}", o.slots, o.source, o.target)?;
                }
                Ok(())
            }
            Action::StartAtomicMigration {
                source,
                target,
                ranges,
                also,
            } => {
                write!(
                    f,
                    "CLUSTER MIGRATESLOTS {} from {source} to {target}",
                    SlotSet::from_ranges(ranges.iter().copied())
                )?;
                for m in also {
                    write!(
                        f,
                        ", {} to {}",
                        SlotSet::from_ranges(m.ranges.iter().copied()),
                        m.target
                    )?;
                }
                Ok(())
            }
            Action::CancelMigrations { on } => write!(f, "CLUSTER CANCELSLOTMIGRATIONS on {on}"),
            Action::ClearSlot { on, slots } => {
                write!(f, "CLUSTER SETSLOT {slots} STABLE on {on}")
            }
            Action::Failover {
                on_replica,
                primary,
            } => write!(
                f,
                "CLUSTER FAILOVER on {on_replica} (taking over from {primary})"
            ),
            Action::ForcedFailover {
                on_replica,
                primary,
            } => write!(
                f,
                "CLUSTER FAILOVER FORCE on {on_replica} (taking over from {primary})"
            ),
            Action::Takeover { on_replica, failed } => write!(
                f,
                "CLUSTER FAILOVER TAKEOVER on {on_replica} (its primary {failed} failed and no election can happen)"
            ),
            Action::AdmitReplication { on, also, user } => {
                write!(f, "ACL SETUSER {user} on on {on}")?;
                for other in also {
                    write!(f, ", {other}")?;
                }
                f.write_str(" (they may now serve replicas and clients)")
            }
            Action::AllowRestart { member } => write!(f, "allow {member} to restart"),
            Action::DeleteMember { member } => write!(f, "delete {member}"),
        }
    }
}

/// Why the cluster is in the state a decision reports. Shown as CamelCase words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    ClusterHealthy,
    InvalidSpec,
    WaitingForNodes,
    BackupRunning,
    NodeUnreachable,
    Forming,
    Joining,
    NodeAddressChanged,
    FailingOver,
    SlotsLost,
    UnknownNode,
    RemovingNodes,
    MigratingSlots,
    MigrationFailed,
    Draining,
    DrainBlocked,
    SlotsConflict,
    ShardConflict,
    NodeNotEmpty,
    AttachingReplicas,
    ReplicaSyncing,
    Converging,
    Rolling,
    /// A primary came back without the data its replica holds; the replica takes over.
    PrimaryRestartedEmpty,
    /// Every replica that could take over from a failed primary missed too many writes.
    ReplicaTooStale,
    /// A member's address answers as another member's node, or as a node of another cluster.
    IdentityConflict,
    /// Restarting a member as asked would lose its data (no replica, no persistence).
    RestartWouldLoseData,
    /// Two primaries share a node or a zone; a replica elsewhere takes over with a planned
    /// failover.
    SpreadingPrimaries,
}

impl Reason {
    /// The word of the schema's vocabulary the status shows for it: an engine reason the
    /// vocabulary lacks does not compile.
    pub const fn status(&self) -> StatusReason {
        match self {
            Reason::ClusterHealthy => StatusReason::ClusterHealthy,
            Reason::InvalidSpec => StatusReason::InvalidSpec,
            Reason::WaitingForNodes => StatusReason::WaitingForNodes,
            Reason::BackupRunning => StatusReason::BackupRunning,
            Reason::NodeUnreachable => StatusReason::NodeUnreachable,
            Reason::Forming => StatusReason::Forming,
            Reason::Joining => StatusReason::Joining,
            Reason::NodeAddressChanged => StatusReason::NodeAddressChanged,
            Reason::FailingOver => StatusReason::FailingOver,
            Reason::SlotsLost => StatusReason::SlotsLost,
            Reason::UnknownNode => StatusReason::UnknownNode,
            Reason::RemovingNodes => StatusReason::RemovingNodes,
            Reason::MigratingSlots => StatusReason::MigratingSlots,
            Reason::MigrationFailed => StatusReason::MigrationFailed,
            Reason::Draining => StatusReason::Draining,
            Reason::DrainBlocked => StatusReason::DrainBlocked,
            Reason::SlotsConflict => StatusReason::SlotsConflict,
            Reason::ShardConflict => StatusReason::ShardConflict,
            Reason::NodeNotEmpty => StatusReason::NodeNotEmpty,
            Reason::AttachingReplicas => StatusReason::AttachingReplicas,
            Reason::ReplicaSyncing => StatusReason::ReplicaSyncing,
            Reason::Converging => StatusReason::Converging,
            Reason::Rolling => StatusReason::Rolling,
            Reason::PrimaryRestartedEmpty => StatusReason::PrimaryRestartedEmpty,
            Reason::ReplicaTooStale => StatusReason::ReplicaTooStale,
            Reason::IdentityConflict => StatusReason::IdentityConflict,
            Reason::RestartWouldLoseData => StatusReason::RestartWouldLoseData,
            Reason::SpreadingPrimaries => StatusReason::SpreadingPrimaries,
        }
    }

    pub const fn as_str(&self) -> &'static str {
        self.status().as_str()
    }

    /// True when the cluster cannot serve some of its slots until a person acts: the status
    /// says `Failed` rather than `Degraded`.
    pub fn is_failure(&self) -> bool {
        matches!(self, Reason::SlotsLost | Reason::ReplicaTooStale)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a steady cluster looks like, for status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    pub shards: u32,
    /// Shards whose primary serves slots and has every wanted replica in sync.
    pub ready_shards: u32,
    pub slots_assigned: usize,
    pub replicas_wanted: u32,
    pub replicas_in_sync: u32,
    pub nodes: usize,
    /// Slots that still have to move to reach the wanted shards (0 when balanced); `None` while
    /// the primaries' own views of their slots overlap (a migration in flight), when no count
    /// is possible.
    pub slots_to_move: Option<usize>,
    /// Staying members that run another revision than their spec asks for (a roll's work left).
    pub members_to_restart: usize,
    /// Shards the spec wants.
    pub shards_wanted: u32,
    /// A planned failover that would spread the primaries apart, held until the cluster has
    /// been steady for long enough (see [`super::Desired::spread_after`]): what it will do.
    pub spread_held: Option<String>,
}

/// A ValkeyCluster: shards of a primary and replicas, slots moved between them. The mode the
/// engine runs in for it (see `cluster_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterMode;

/// The one next step [`super::decide()`] chooses: the engine's one decision type, in the
/// cluster's vocabulary.
pub type Decision = super::mode::Decision<ClusterMode>;

impl Decision {
    /// A step that loses data only the user's word allows (`permit`), announced with a Warning;
    /// taken on an acknowledgement (`acceptLostSlots`), it spends it.
    pub(crate) fn lossy(
        permit: Permit,
        action: Action,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        Decision::Act {
            action,
            reason,
            message: message.into(),
            forced: true,
            acknowledged: permit == Permit::Accepted,
        }
    }
}

#[cfg(test)]
mod vocabulary_tests {
    use super::Reason;

    /// Every reason; `listed` stops compiling when one is added and not listed here.
    const ALL: &[Reason] = &[
        Reason::ClusterHealthy,
        Reason::InvalidSpec,
        Reason::WaitingForNodes,
        Reason::BackupRunning,
        Reason::NodeUnreachable,
        Reason::Forming,
        Reason::Joining,
        Reason::NodeAddressChanged,
        Reason::FailingOver,
        Reason::SlotsLost,
        Reason::UnknownNode,
        Reason::RemovingNodes,
        Reason::MigratingSlots,
        Reason::MigrationFailed,
        Reason::Draining,
        Reason::DrainBlocked,
        Reason::SlotsConflict,
        Reason::ShardConflict,
        Reason::NodeNotEmpty,
        Reason::AttachingReplicas,
        Reason::ReplicaSyncing,
        Reason::Converging,
        Reason::Rolling,
        Reason::PrimaryRestartedEmpty,
        Reason::ReplicaTooStale,
        Reason::IdentityConflict,
        Reason::RestartWouldLoseData,
        Reason::SpreadingPrimaries,
    ];

    #[allow(dead_code)]
    fn listed(reason: Reason) -> bool {
        match reason {
            Reason::ClusterHealthy
            | Reason::InvalidSpec
            | Reason::WaitingForNodes
            | Reason::BackupRunning
            | Reason::NodeUnreachable
            | Reason::Forming
            | Reason::Joining
            | Reason::NodeAddressChanged
            | Reason::FailingOver
            | Reason::SlotsLost
            | Reason::UnknownNode
            | Reason::RemovingNodes
            | Reason::MigratingSlots
            | Reason::MigrationFailed
            | Reason::Draining
            | Reason::DrainBlocked
            | Reason::SlotsConflict
            | Reason::ShardConflict
            | Reason::NodeNotEmpty
            | Reason::AttachingReplicas
            | Reason::ReplicaSyncing
            | Reason::Converging
            | Reason::Rolling
            | Reason::PrimaryRestartedEmpty
            | Reason::ReplicaTooStale
            | Reason::IdentityConflict
            | Reason::RestartWouldLoseData
            | Reason::SpreadingPrimaries => true,
        }
    }

    #[test]
    fn every_reason_is_a_word_of_the_valkeycluster_vocabulary_spelt_as_before() {
        for reason in ALL {
            let word = reason.status();
            assert!(
                word.kinds().contains(&"ValkeyCluster"),
                "{word} is not declared for ValkeyCluster in valkey-api/schema/reasons.yaml"
            );
            // The variant and the word share a name: the status says what it said before.
            assert_eq!(format!("{reason:?}"), word.as_str());
        }
    }
}
