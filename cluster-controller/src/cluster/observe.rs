//! The observe stage's Kubernetes side: the cluster's ValkeyNodes, read from the watch cache
//! (never listed per pass), as they are and as the engine's members.

use std::sync::Arc;

use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyCluster, ValkeyNode};

use crate::engine::Member;
use crate::parent::labels::CLUSTER_LABEL;
use crate::parent::members;
use crate::valkey::cluster_nodes::NodeId;

/// The cluster's ValkeyNodes, by name: those in its namespace with its label and owned by it (by
/// uid, so what a deleted namesake left behind is not taken for a member).
pub fn member_nodes(nodes: &Store<ValkeyNode>, cluster: &ValkeyCluster) -> Vec<Arc<ValkeyNode>> {
    let namespace = cluster.namespace();
    let name = cluster.name_any();
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    let mut found: Vec<Arc<ValkeyNode>> = nodes
        .state()
        .into_iter()
        .filter(|n| {
            n.namespace() == namespace
                && n.labels().get(CLUSTER_LABEL) == Some(&name)
                && n.owner_references().iter().any(|o| o.uid == uid)
        })
        .collect();
    found.sort_by_key(|n| n.name_any());
    found
}

/// The engine's view of the nodes.
///
/// Each member is bound to the node it was last seen as: the engine's bindings, which the
/// status keeps (`status.nodeIds`).
pub fn engine_members(nodes: &[Arc<ValkeyNode>], cluster: &ValkeyCluster) -> Vec<Member> {
    let bound = cluster.status.as_ref().and_then(|s| s.node_ids.as_ref());
    let external = cluster.spec.external_access.is_some();
    nodes
        .iter()
        .filter_map(|n| Some((n, members::member(n)?)))
        .map(|(node, mut m)| {
            m.node_id = bound
                .and_then(|b| b.get(&m.name))
                .and_then(|id| NodeId::parse(id));
            // A member that never joined joins only once it tells clients its external address:
            // until then clients would be sent to its pod IP (see `parent::external`).
            if external && m.node_id.is_none() && !crate::parent::external::joinable(node) {
                m.ready = false;
            }
            m
        })
        .collect()
}

/// The name of a backup of the ValkeyCluster `cluster` (namespace, name) being captured, if any.
pub fn running_backup(
    backups: &kube::runtime::reflector::Store<DeserializeGuard<ValkeyBackup>>,
    namespace: &str,
    cluster: &str,
) -> Option<String> {
    use valkey_api::v1alpha1::{BackupPhase, BackupSourceKind};
    let mut running: Vec<String> = backups
        .state()
        .iter()
        .filter_map(|guarded| guarded.0.as_ref().ok())
        .filter(|b| {
            b.namespace().as_deref() == Some(namespace)
                && b.spec.source.kind == BackupSourceKind::ValkeyCluster
                && b.spec.source.name == cluster
                && b.meta().deletion_timestamp.is_none()
                && b.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Running)
        })
        .map(|b| b.name_any())
        .collect();
    running.sort();
    running.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::desired::members;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use crate::parent::node::NodeAuth;
    use kube::runtime::watcher::Event;

    #[test]
    fn only_the_clusters_own_nodes_are_members() {
        let cache = cluster(CLUSTER);
        let (store, mut writer) = kube::runtime::reflector::store::<ValkeyNode>();
        let mine: Vec<ValkeyNode> = members(&cache, &NodeAuth::of("cache"))
            .into_iter()
            .map(|m| m.node)
            .collect();
        let mut namesakes_leftover = mine[0].clone();
        namesakes_leftover.metadata.name = Some("cache-9-0".into());
        if let Some(owners) = namesakes_leftover.metadata.owner_references.as_mut() {
            owners[0].uid = "an-older-uid".into();
        }
        let mut elsewhere = mine[1].clone();
        elsewhere.metadata.namespace = Some("staging".into());
        writer.apply_watcher_event(&Event::Init);
        for node in mine.iter().chain([&namesakes_leftover, &elsewhere]) {
            writer.apply_watcher_event(&Event::InitApply(node.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);

        let found = member_nodes(&store, &cache);
        let names: Vec<String> = found.iter().map(|n| n.name_any()).collect();
        assert_eq!(names.len(), 6, "{names:?}");
        assert!(!names.contains(&"cache-9-0".to_owned()));
        assert!(
            found
                .iter()
                .all(|n| n.namespace().as_deref() == Some("prod"))
        );
        assert_eq!(engine_members(&found, &cache).len(), 6);
    }
}
