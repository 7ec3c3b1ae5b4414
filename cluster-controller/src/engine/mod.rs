//! The cluster-controller's engine: each pass observes every member's Valkey, decides the one
//! next step with a pure function, and takes it. No Kubernetes here: the Kubernetes side
//! passes the members it sees ([`Member`]) and the spec ([`Desired`]), and carries out the
//! Kubernetes actions a decision names ([`Action::AllowRestart`], [`Action::DeleteMember`]).
//!
//! Level-triggered: nothing is remembered between passes, so an engine dropped at any point
//! and started again converges to the same place from what Valkey reports.

mod decide;
mod decision;
mod driver;
mod error;
mod execute;
mod legacy;
mod member;
mod observe;

pub use decide::{ATOMIC_MAX_ATTEMPTS, decide};
pub use decision::{Action, Decision, Health, LegacyMigration, NodeRef, Reason};
pub use driver::{Engine, EngineConfig, Pass};
pub use error::EngineError;
pub use execute::{ExecuteConfig, Outcome, execute};
pub use member::{Desired, Member, Place};
pub use observe::{NodeState, Observation, Reach, observe};
