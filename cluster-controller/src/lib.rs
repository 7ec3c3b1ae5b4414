//! The cluster-controller, in layers; each imports only the layers listed before it:
//! - [`valkey`]: slot sets and what Valkey says, parsed (pure, tested from captured replies);
//! - [`plan`]: rebalancing and the per-slot migration machines (pure; imports `valkey`);
//! - [`client`]: the one small trait the engine talks to Valkey through, and its redis impl
//!   (imports nothing of this crate: it carries commands and replies);
//! - [`access`]: the users every server holds, their rights, and applying them to running
//!   servers (imports `valkey` and `client`);
//! - [`engine`]: observe every member, decide one step with a pure function, take it (tested
//!   against real valkey-server processes, no Kubernetes; imports the three above);
//! - [`tls`]: the certificates the operator issues (pure; imports nothing of this crate);
//! - [`parent`]: the floor every parent kind of ValkeyNodes stands on: Secrets, TLS, member
//!   nodes, access, placement, monitoring, conditions, the per-object memory (imports the
//!   layers above, never a kind);
//! - [`cluster`]: the ValkeyCluster kind: ValkeyClusters in, ValkeyNodes, Secrets, status out
//!   (imports [`engine`] and [`parent`]);
//! - [`replication`]: the ValkeyReplication kind: its own engine and a controller on [`parent`]
//!   (imports [`parent`], never [`cluster`]);
//! - [`backup`]: the ValkeyBackup kind: captures of either kind's shards into an object store
//!   (imports [`parent`], and reads the members of [`cluster`] and [`replication`] the way
//!   they do).

pub mod access;
pub mod backup;
pub mod client;
pub mod cluster;
pub mod crds;
pub mod engine;
pub mod parent;
pub mod plan;
pub mod replication;
pub mod tls;
pub mod valkey;
