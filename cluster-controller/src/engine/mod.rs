//! The cluster-controller's engine: each pass observes every member's Valkey, decides the one
//! next step with a pure function, and takes it. No Kubernetes here: the Kubernetes side
//! passes the members it sees ([`Member`]) and the spec ([`Desired`]), and carries out the
//! Kubernetes actions a decision names ([`Action::AllowRestart`], [`Action::DeleteMember`]).
//!
//! Level-triggered: nothing is remembered between passes, so an engine dropped at any point
//! and started again converges to the same place from what Valkey reports.
//!
//! What the engine expects of every node's configuration (the Kubernetes side writes it):
//! - `cluster-enabled yes`, port 6379, the cluster bus on a port of the cluster's own (every
//!   node announces it; a MEET names it);
//! - `cluster-allow-replica-migration no`: the engine owns the topology, and Valkey moving a
//!   replica to another shard by itself would be undone by the next pass, back and forth;
//! - `masteruser`/`masterauth` of a replication user when ACLs are on; on Valkey 9 atomic slot
//!   migration connects as that user and replays the migrated writes with it, so it needs
//!   the key-space commands too, not only `PSYNC`/`REPLCONF`;
//! - the operator's own user (the [`crate::client::Credentials`] of the client) may run
//!   CLUSTER, INFO, DBSIZE, MIGRATE, and MIGRATE's `AUTH2` lets it write on the target.

mod cluster_mode;
mod config;
mod decide;
mod decision;
mod driver;
mod error;
mod execute;
mod member;
pub mod mode;
mod observe;
pub mod safety;

pub use config::EngineConfig;
pub use decide::{ATOMIC_MAX_ATTEMPTS, Scope, Verdict, bindings, decide, health, judge, judge_in};
pub use decision::ClusterMode;
pub use decision::{Action, Decision, Health, LegacyMigration, NodeRef, Reason};
pub use driver::{Engine, Pass, Taken, Timing};
pub use error::EngineError;
pub use execute::{ExecuteConfig, admit, execute, migrate_auth};
pub use member::{Desired, LostSlotsPolicy, Member, Permit, Place};
pub use mode::{ActionOutcome, Carried, Carrier, Mode};
pub use observe::{
    NodeState, Observation, Reach, observe, observe_fenced, read_admitted, read_every, user_enabled,
};
