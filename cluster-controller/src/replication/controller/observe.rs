//! The observe stage's Kubernetes side: the replication's ValkeyNodes and Services, read from
//! the watch caches (never listed per pass), and the engine's members.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use valkey_api::contract::cluster::INDEX_LABEL;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use crate::engine::Member;
use crate::parent::members;

use super::sentinels::is_sentinel;

/// The replication's member ValkeyNodes, by name: those in its namespace with its label and
/// owned by it (by uid, so what a deleted namesake left behind is not taken for a member) that
/// run a server (its Sentinels are not members).
pub fn member_nodes(
    nodes: &Store<ValkeyNode>,
    replication: &ValkeyReplication,
) -> Vec<Arc<ValkeyNode>> {
    let mut found = owned_nodes(nodes, replication);
    found.retain(|n| !is_sentinel(n));
    found
}

/// The replication's Sentinels' ValkeyNodes, by name.
pub fn sentinel_nodes(
    nodes: &Store<ValkeyNode>,
    replication: &ValkeyReplication,
) -> Vec<Arc<ValkeyNode>> {
    let mut found = owned_nodes(nodes, replication);
    found.retain(|n| is_sentinel(n));
    found
}

fn owned_nodes(nodes: &Store<ValkeyNode>, replication: &ValkeyReplication) -> Vec<Arc<ValkeyNode>> {
    let namespace = replication.namespace();
    let name = replication.name_any();
    let uid = replication.meta().uid.clone().unwrap_or_default();
    let mut found: Vec<Arc<ValkeyNode>> = nodes
        .state()
        .into_iter()
        .filter(|n| {
            n.namespace() == namespace
                && n.labels().get(REPLICATION_LABEL) == Some(&name)
                && n.owner_references().iter().any(|o| o.uid == uid)
        })
        .collect();
    found.sort_by_key(|n| n.name_any());
    found
}

/// The engine's view of the nodes (shard 0, index from the label).
pub fn engine_members(nodes: &[Arc<ValkeyNode>]) -> Vec<Member> {
    nodes
        .iter()
        .filter_map(|n| {
            let index = n.labels().get(INDEX_LABEL)?.parse().ok()?;
            Some(members::member_at(n, 0, index))
        })
        .collect()
}

/// A Service of the replication's namespace, as the cache holds it.
/// The replication's external Services in the cache (those of its name and label, owned by it).
pub fn external_services(
    services: &Store<Service>,
    replication: &ValkeyReplication,
) -> Vec<Arc<Service>> {
    let namespace = replication.namespace();
    let name = replication.name_any();
    let uid = replication.meta().uid.clone().unwrap_or_default();
    services
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace() == namespace
                && s.labels().get(REPLICATION_LABEL) == Some(&name)
                && s.labels()
                    .get(crate::parent::external::EXTERNAL_LABEL)
                    .map(String::as_str)
                    == Some("true")
                && s.owner_references().iter().any(|o| o.uid == uid)
        })
        .collect()
}

pub fn service(
    services: &Store<Service>,
    replication: &ValkeyReplication,
    name: &str,
) -> Option<Arc<Service>> {
    services.get(&ObjectRef::new(name).within(&replication.namespace().unwrap_or_default()))
}

/// Every Sentinel with a pod IP, by node name, at the Sentinel port.
pub fn sentinel_addresses(nodes: &[Arc<ValkeyNode>]) -> Vec<(String, std::net::SocketAddr)> {
    nodes
        .iter()
        .filter_map(|n| {
            let ip = n.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            Some((
                n.name_any(),
                std::net::SocketAddr::new(ip, valkey_api::contract::SENTINEL_PORT),
            ))
        })
        .collect()
}
