//! The floor every parent kind of ValkeyNodes stands on (a ValkeyCluster: [`crate::cluster`]; a
//! ValkeyReplication: [`crate::replication::controller`]). A kind is a pipeline on it: it brings
//! its context, its desired members (through [`node::server_node`]), its engine, the objects it
//! serves and its status; the stages below know no kind (each takes the parent as a generic
//! `K: Resource`, or the few fields it needs), and nothing here imports a kind.
//!
//! | what every parent shares | module | Kubernetes? |
//! | --- | --- | --- |
//! | the controller's settings; what it keeps per object (engine, [`context::ParentMemory`], applied objects) | [`context`] | no |
//! | the object's Lease; when to look again after the engine's step | [`pass`] | yes |
//! | Secrets: the clients' password, the operator's users | [`secrets`] ([`auth`] builds them) | yes |
//! | the Secrets a parent reads, from a watch of their metadata; who reads a Secret that changed | [`secret_cache`] | yes (a GET per change) |
//! | TLS: the certificate Secret the members serve, the CA to verify them | [`tls`] ([`crate::tls`] issues) | yes |
//! | a member's ValkeyNode; its labels; where its pod may run | [`node`], [`labels`], [`placement`] | no |
//! | member nodes applied, restarts released, drained members deleted | [`apply`] | yes |
//! | any other child applied when it changed, deleted by label when no longer wanted | [`applier`] | yes |
//! | ValkeyNodes read back: the engine's members, restart gates, stuck pods | [`members`] | no (cache) |
//! | client Services and disruption budgets, built | [`serving`] | no |
//! | external access: Services per member, the addresses members announce to clients | [`external`] | no |
//! | the PodMonitor of the members' exporters | [`monitoring`] | yes |
//! | every member's users, applied live | [`access`] ([`crate::access`] does it) | no (Valkey) |
//! | Ready / Progressing / Degraded, problems in a person's words; progress | [`conditions`], [`progress`] | no |
//! | the caches a kind's controller fills that the others read (its parents, its nodes) | [`kind_caches`] | no (caches) |
//! | what can fail; what stops a pass | [`error`], [`stop`] | |
//! | `spec.restoreFrom`: the backup, its manifest, each shard's snapshot and slots | [`restore`] | no (the store) |
//! | `spec.restoreFrom` in a pass: the plan read once, first members shaped, the restore's end recorded, the append-only file turned on | [`restoring`] | yes |

pub mod access;
pub mod applier;
pub mod apply;
pub mod auth;
pub mod conditions;
pub mod context;
pub mod error;
pub mod external;
pub mod kind_caches;
pub mod labels;
pub mod members;
pub mod monitoring;
pub mod node;
pub mod pass;
pub mod placement;
pub mod progress;
pub mod restore;
pub mod restoring;
pub mod secret_cache;
pub mod secret_names;
pub mod secrets;
pub mod serving;
pub mod stop;
pub mod tls;

pub use context::Settings;
