//! What the replication engine decides: one action with its reason, a wait, a block that needs a
//! person, or a steady state; and how the replication stands.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use valkey_api::v1alpha1::StatusReason;

use super::sentinel::Watch;

/// A member and the address the engine reaches it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub member: String,
    pub address: SocketAddr,
}

/// A planned switchover handed to Sentinel: from the primary `from` to `to`; the `others` are
/// the other replicas, kept from being elected meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    pub from: Target,
    pub to: Target,
    pub others: Vec<Target>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.member, self.address)
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `REPLICAOF NO ONE`: the member becomes the primary.
    Promote { on: Target },
    /// `REPLICAOF <primary>`: the member replicates the primary.
    Follow { on: Target, primary: Target },
    /// `FAILOVER TO <to> TIMEOUT`: a planned switchover. The primary pauses writes until `to`
    /// has every one of them, then they swap roles; nothing acknowledged is lost.
    Switchover {
        on: Target,
        to: Target,
        timeout: Duration,
    },
    /// `ACL SETUSER <user> on`: the member may serve replicas (the fence of the ACL file).
    Admit { on: Target, user: String },
    /// `SENTINEL MONITOR` (when `monitor`) and `SENTINEL SET` on the Sentinel `on`: it watches
    /// `primary` as `watch` says.
    SentinelWatch {
        on: Target,
        primary: Target,
        watch: Box<Watch>,
        monitor: bool,
    },
    /// A planned switchover away from `from` to `to`, handed to Sentinel: the `others`' replica
    /// priority 0 (so Sentinel elects `to`), `from`'s writes paused until every replica has them,
    /// then `SENTINEL FAILOVER` on the Sentinel `on`; the priorities back once it is done.
    SentinelFailover {
        on: Target,
        master_name: String,
        handover: Box<Handover>,
    },
    /// `SENTINEL RESET` on the Sentinel `on`: it forgets the replicas and Sentinels it knows of
    /// the master name and learns the live ones again.
    SentinelReset { on: Target, master_name: String },
    /// Kubernetes: release the member's pod restart (`spec.allowedRevision`).
    AllowRestart { member: String },
    /// Kubernetes: delete a member the spec no longer wants.
    DeleteMember { member: String },
}

impl Action {
    /// The member the action is about.
    pub fn member(&self) -> &str {
        match self {
            Action::Promote { on } | Action::Follow { on, .. } | Action::Admit { on, .. } => {
                &on.member
            }
            Action::Switchover { to, .. } => &to.member,
            Action::SentinelFailover { handover, .. } => &handover.to.member,
            Action::SentinelWatch { on, .. } | Action::SentinelReset { on, .. } => &on.member,
            Action::AllowRestart { member } | Action::DeleteMember { member } => member,
        }
    }

    /// A short verb for Events.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Promote { .. } => "Promote",
            Action::Follow { .. } => "Replicate",
            Action::Switchover { .. } => "Switchover",
            Action::Admit { .. } => "AdmitReplication",
            Action::SentinelWatch { .. } => "WatchWithSentinel",
            Action::SentinelFailover { .. } => "SentinelFailover",
            Action::SentinelReset { .. } => "SentinelReset",
            Action::AllowRestart { .. } => "AllowRestart",
            Action::DeleteMember { .. } => "DeleteNode",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Promote { on } => write!(f, "REPLICAOF NO ONE on {on}"),
            Action::Follow { on, primary } => write!(f, "REPLICAOF {primary} on {on}"),
            Action::Switchover { on, to, .. } => write!(f, "FAILOVER TO {to} on {on}"),
            Action::Admit { on, user } => write!(f, "ACL SETUSER {user} on, on {on}"),
            Action::SentinelWatch {
                on,
                primary,
                watch,
                monitor,
            } => {
                let verb = if *monitor { "MONITOR" } else { "SET" };
                write!(
                    f,
                    "SENTINEL {verb} {} ({primary}) on {on}",
                    watch.master_name
                )
            }
            Action::SentinelFailover {
                on,
                master_name,
                handover,
            } => write!(
                f,
                "SENTINEL FAILOVER {master_name} on {on} (from {}, toward {})",
                handover.from, handover.to
            ),
            Action::SentinelReset { on, master_name } => {
                write!(f, "SENTINEL RESET {master_name} on {on}")
            }
            Action::AllowRestart { member } => write!(f, "allow {member} to restart"),
            Action::DeleteMember { member } => write!(f, "delete {member}"),
        }
    }
}

/// Why, as the CamelCase word the status shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    InvalidSpec,
    WaitingForNodes,
    /// The first primary is chosen, replicas attached.
    Forming,
    /// A member is told its place: a restarted one, a new one, an old primary.
    Attaching,
    /// The restarted primary came back with its data and serves again.
    PrimaryRestarted,
    /// The primary came back without its data: the replica that has it takes over.
    PrimaryEmptied,
    /// The primary is lost: the replica with the most of its writes takes over.
    FailingOver,
    /// The primary does not answer the operator; not (yet) proof that it is lost.
    PrimaryUnreachable,
    /// A planned switchover (spec.primary, a roll, a scale-in).
    SwitchingOver,
    ReplicaSyncing,
    ScalingDown,
    Rolling,
    /// Servers claim what the operator cannot reconcile without losing data.
    DataConflict,
    /// No member can take over without losing acknowledged writes.
    NoSafeCandidate,
    Converging,
    /// Sentinel is on and no majority of the Sentinels names one primary.
    SentinelsDisagree,
    /// Sentinel is on and the primary is lost or not serving: Sentinel elects the next one.
    SentinelFailingOver,
    Healthy,
}

impl Reason {
    /// The word of the schema's vocabulary the status shows for it: an engine reason the
    /// vocabulary lacks does not compile.
    pub const fn status(&self) -> StatusReason {
        match self {
            Reason::InvalidSpec => StatusReason::InvalidSpec,
            Reason::WaitingForNodes => StatusReason::WaitingForNodes,
            Reason::Forming => StatusReason::Forming,
            Reason::Attaching => StatusReason::Attaching,
            Reason::PrimaryRestarted => StatusReason::PrimaryRestarted,
            Reason::PrimaryEmptied => StatusReason::PrimaryEmptied,
            Reason::FailingOver => StatusReason::FailingOver,
            Reason::PrimaryUnreachable => StatusReason::PrimaryUnreachable,
            Reason::SwitchingOver => StatusReason::SwitchingOver,
            Reason::ReplicaSyncing => StatusReason::ReplicaSyncing,
            Reason::ScalingDown => StatusReason::ScalingDown,
            Reason::Rolling => StatusReason::Rolling,
            Reason::DataConflict => StatusReason::DataConflict,
            Reason::NoSafeCandidate => StatusReason::NoSafeCandidate,
            Reason::Converging => StatusReason::Converging,
            Reason::SentinelsDisagree => StatusReason::SentinelsDisagree,
            Reason::SentinelFailingOver => StatusReason::SentinelFailingOver,
            Reason::Healthy => StatusReason::Healthy,
        }
    }

    pub const fn as_str(&self) -> &'static str {
        self.status().as_str()
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the replication stands this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// The member that is primary (a reachable server that says so, or the one last known).
    pub primary: Option<String>,
    /// Replicas the spec wants.
    pub replicas_wanted: u32,
    /// Replicas in step with the primary.
    pub replicas_in_step: u32,
    /// Members that answered.
    pub answering: u32,
    /// Members the spec keeps that run another revision than their spec asks for (a roll's
    /// work left).
    pub members_to_restart: u32,
}

/// The one next step: the engine's one decision type ([`crate::engine::mode::Decision`]), in
/// the replication's vocabulary. Its steady state carries nothing (the health is judged beside
/// it).
pub type Decision = crate::engine::mode::Decision<ReplicationMode>;

/// A ValkeyReplication: one primary and its replicas, without slots. The mode the engine runs in
/// for it (see `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationMode;

#[cfg(test)]
mod vocabulary_tests {
    use super::Reason;

    /// Every reason; `listed` stops compiling when one is added and not listed here.
    const ALL: &[Reason] = &[
        Reason::InvalidSpec,
        Reason::WaitingForNodes,
        Reason::Forming,
        Reason::Attaching,
        Reason::PrimaryRestarted,
        Reason::PrimaryEmptied,
        Reason::FailingOver,
        Reason::PrimaryUnreachable,
        Reason::SwitchingOver,
        Reason::ReplicaSyncing,
        Reason::ScalingDown,
        Reason::Rolling,
        Reason::DataConflict,
        Reason::NoSafeCandidate,
        Reason::Converging,
        Reason::SentinelsDisagree,
        Reason::SentinelFailingOver,
        Reason::Healthy,
    ];

    #[allow(dead_code)]
    fn listed(reason: Reason) -> bool {
        match reason {
            Reason::InvalidSpec
            | Reason::WaitingForNodes
            | Reason::Forming
            | Reason::Attaching
            | Reason::PrimaryRestarted
            | Reason::PrimaryEmptied
            | Reason::FailingOver
            | Reason::PrimaryUnreachable
            | Reason::SwitchingOver
            | Reason::ReplicaSyncing
            | Reason::ScalingDown
            | Reason::Rolling
            | Reason::DataConflict
            | Reason::NoSafeCandidate
            | Reason::Converging
            | Reason::SentinelsDisagree
            | Reason::SentinelFailingOver
            | Reason::Healthy => true,
        }
    }

    #[test]
    fn every_reason_is_a_word_of_the_valkeyreplication_vocabulary_spelt_as_before() {
        for reason in ALL {
            let word = reason.status();
            assert!(
                word.kinds().contains(&"ValkeyReplication"),
                "{word} is not declared for ValkeyReplication in valkey-api/schema/reasons.yaml"
            );
            // The variant and the word share a name: the status says what it said before.
            assert_eq!(format!("{reason:?}"), word.as_str());
        }
    }
}
