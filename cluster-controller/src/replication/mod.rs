//! The replication mode: a ValkeyReplication is one primary and its replicas, without cluster
//! mode. Its [`engine`] observes the servers and decides one step at a time (no Kubernetes); its
//! [`controller`] turns the object into ValkeyNodes and Services and reports its status, on the
//! floor every parent kind shares ([`crate::parent`]: secrets, access, apply, placement,
//! conditions).

pub mod controller;
pub mod engine;
