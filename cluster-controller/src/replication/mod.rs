//! The replication mode: a ValkeyReplication is one primary and its replicas, without cluster
//! mode. Its [`engine`] observes the servers and decides one step at a time (no Kubernetes); its
//! [`controller`] turns the object into ValkeyNodes and Services and reports its status, on the
//! stages the ValkeyCluster controller shares (secrets, access, apply, placement, status).

pub mod controller;
pub mod engine;
