//! What every mode of the engine shares: the shape of a decision and of a look's verdict, who
//! carries a step out ([`Carried`]), and the [`Mode`] trait a mode (a cluster, a replication) implements to
//! run on the one driver ([`super::driver`]). A mode brings its own vocabulary (actions,
//! reasons, health), its own observation and its own pure rules; the driver brings the pass:
//! budgets, timing, one judgement per look, acting and logging.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use crate::client::ValkeyClient;
use crate::valkey::cluster_nodes::NodeId;

use super::config::EngineConfig;
use super::error::EngineError;
use super::member::Member;

/// Which of the rules a look may apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every rule: the Kubernetes side is in step with the spec.
    Everything,
    /// Only the rules that protect data, which run whatever else is wrong (a Secret missing, an
    /// apply failing, the spec unreadable): a failed primary's slots taken over when no election
    /// can happen, a primary back without its data handing over to the replica that holds it,
    /// and settled servers admitted (the fence's own checks). Nothing that follows the spec.
    /// With none of them to apply, the look is steady as far as this scope goes.
    Safety,
}

/// What executing an action achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    /// The command was accepted (or the batch finished).
    Done,
    /// Part of the work is done; the next pass continues.
    Progress(String),
    /// The slot machine cannot go on safely; a person must look.
    Blocked(String),
    /// A Kubernetes action: the caller carries it out.
    Delegated,
}

/// Who carries a step out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// The engine sends it to Valkey within the pass.
    Valkey,
    /// The engine sends it to Valkey once the Kubernetes side has recorded the decision: a
    /// replication's new primary is written to the status before the command that makes it
    /// one, so a controller that dies between the two finds the member it chose.
    ValkeyOnceRecorded,
    /// The Kubernetes side carries it out (a pod's restart released, a member deleted).
    Kubernetes,
}

/// An action a mode can decide, and who carries it out.
pub trait Carried {
    fn carrier(&self) -> Carrier;

    /// Whether the step moves keys between servers: it has its own time budget, and a pass
    /// stops after it so the status reports progress between such steps.
    fn moves_data(&self) -> bool {
        false
    }

    /// True for the steps the Kubernetes side carries out.
    fn is_kubernetes(&self) -> bool {
        self.carrier() == Carrier::Kubernetes
    }
}

/// A mode of the engine: its vocabulary, how it reads Valkey, its rules and how it acts.
pub trait Mode: Sized + fmt::Debug + Clone + PartialEq + Eq + Send + Sync + 'static {
    /// One step.
    type Action: Carried + fmt::Debug + fmt::Display + Clone + PartialEq + Eq + Send + Sync;
    /// Why, as the CamelCase word the status shows.
    type Reason: fmt::Debug + fmt::Display + Copy + PartialEq + Eq + Send + Sync;
    /// What a steady decision carries.
    type Steady: fmt::Debug + Clone + PartialEq + Eq + Send + Sync;
    /// How the servers stand after a look, whatever the decision.
    type Health: fmt::Debug + Clone + Send + Sync;
    /// What the Kubernetes side asks of a pass (the spec, and what it recorded).
    type Desired: Send + Sync;
    /// What one look read from the servers.
    type Observation: fmt::Debug + Send + Sync;

    /// The reason a steady decision reports.
    const STEADY: Self::Reason;

    /// What a steady decision says.
    fn steady_message(steady: &Self::Steady) -> String;

    /// One look at every member's server.
    fn observe<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        desired: &Self::Desired,
        members: &[Member],
    ) -> impl Future<Output = Self::Observation> + Send;

    /// The pure rules: the one next step, the members' bindings and the health, from one look.
    fn judge(
        scope: Scope,
        desired: &Self::Desired,
        members: &[Member],
        observed: &Self::Observation,
    ) -> Verdict<Self>;

    /// Carries out a Valkey step.
    fn execute<C: ValkeyClient>(
        client: &C,
        config: &EngineConfig,
        action: &Self::Action,
    ) -> impl Future<Output = Result<ActionOutcome, EngineError>> + Send;

    /// Waits that end within moments by themselves (a handshake, a small first sync): a pass
    /// with time left watches them settle rather than coming back a second later.
    fn settles_soon(reason: Self::Reason) -> bool;

    /// Waits for a job Valkey runs by itself (an atomic slot migration): a pass that has not
    /// acted watches it for up to `job_watch_budget`.
    fn watches_job(_reason: Self::Reason) -> bool {
        false
    }

    /// Slots left to move, as far as the health says (the progress a watched job makes).
    fn slots_left(_health: &Self::Health) -> Option<usize> {
        None
    }
}

/// The one next step a look decides, in every mode: an action with its reason, a wait, a steady
/// state, or a block that needs a person; each with a message a person can read.
// One Decision per pass: its size costs nothing, and boxing the action would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<M: Mode> {
    /// Exactly one next step. `forced` marks a step that overrides Valkey or may lose data
    /// (a takeover without a vote, a failover forced on a live primary, forgetting a node that
    /// held slots, serving lost slots again empty, a replica promoted in a lost primary's
    /// place): the Kubernetes side announces it with a Warning Event, not a Normal one.
    Act {
        action: M::Action,
        reason: M::Reason,
        message: String,
        forced: bool,
        /// Taken on the user's acknowledgement of a loss (see
        /// [`Decision::spends_acknowledgement`]).
        acknowledged: bool,
    },
    /// Something is in progress (handshake, sync, failover election, a migration job).
    Wait { reason: M::Reason, message: String },
    /// Nothing to do.
    Steady(M::Steady),
    /// Cannot proceed without a person or a spec change.
    Blocked { reason: M::Reason, message: String },
}

impl<M: Mode> Decision<M> {
    pub fn act(action: M::Action, reason: M::Reason, message: impl Into<String>) -> Self {
        Decision::Act {
            action,
            reason,
            message: message.into(),
            forced: false,
            acknowledged: false,
        }
    }

    /// A step to announce with a Warning (see [`Decision::Act`]).
    pub fn forced(action: M::Action, reason: M::Reason, message: impl Into<String>) -> Self {
        Decision::Act {
            action,
            reason,
            message: message.into(),
            forced: true,
            acknowledged: false,
        }
    }

    pub fn wait(reason: M::Reason, message: impl Into<String>) -> Self {
        Decision::Wait {
            reason,
            message: message.into(),
        }
    }

    pub fn blocked(reason: M::Reason, message: impl Into<String>) -> Self {
        Decision::Blocked {
            reason,
            message: message.into(),
        }
    }

    pub fn reason(&self) -> M::Reason {
        match self {
            Decision::Act { reason, .. }
            | Decision::Wait { reason, .. }
            | Decision::Blocked { reason, .. } => *reason,
            Decision::Steady(_) => M::STEADY,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Decision::Act { message, .. }
            | Decision::Wait { message, .. }
            | Decision::Blocked { message, .. } => message.clone(),
            Decision::Steady(steady) => M::steady_message(steady),
        }
    }

    /// The step, when the decision is to act.
    pub fn action(&self) -> Option<&M::Action> {
        match self {
            Decision::Act { action, .. } => Some(action),
            _ => None,
        }
    }

    /// True for a forced step (see [`Decision::Act`]).
    pub fn is_forced(&self) -> bool {
        matches!(self, Decision::Act { forced: true, .. })
    }

    /// True for a step taken on the user's acknowledgement of a loss (`acceptLostSlots`): the
    /// Kubernetes side records that it was acted on, and once the cluster is whole again it
    /// allows nothing more.
    pub fn spends_acknowledgement(&self) -> bool {
        matches!(
            self,
            Decision::Act {
                acknowledged: true,
                ..
            }
        )
    }
}

impl<M: Mode> fmt::Display for Decision<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Act { action, reason, .. } => write!(f, "{reason}: {action}"),
            other => write!(f, "{}: {}", other.reason(), other.message()),
        }
    }
}

/// What one look comes to: the next step, the members' bindings and the health, judged together
/// from one view of the servers (building that view is most of a decision's cost).
#[derive(Debug)]
pub struct Verdict<M: Mode> {
    pub decision: Decision<M>,
    /// The node each member is bound to from now on (a cluster's node ids; none elsewhere).
    pub bindings: BTreeMap<String, NodeId>,
    pub health: M::Health,
}
