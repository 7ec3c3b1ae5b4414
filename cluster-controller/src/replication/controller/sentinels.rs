//! The Sentinels of a ValkeyReplication with `spec.sentinel.enabled`: their ValkeyNodes
//! (`<name>-sentinel-<index>`, `server: Sentinel`, built by the floor's
//! [`crate::parent::node::sentinel_node`]), the client Service `<name>-sentinel` that Sentinel
//! clients ask where the primary is, and what the engine tells each Sentinel to watch. Pure.
//!
//! A Sentinel's node carries the replication label (so the replication's watch cache sees it and
//! a change of it wakes the replication) but is never a member: members are the nodes that run a
//! server ([`is_sentinel`] tells them apart), and a Sentinel's pod carries neither the
//! replication label nor an index, so the members' Services, disruption budget and anti-affinity,
//! which select that label, never select a Sentinel.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use valkey_api::contract::SENTINEL_PORT;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{NodeServer, ValkeyNode, ValkeyReplication};

use crate::parent::labels::FIELD_MANAGER;
use crate::parent::node::{DesiredMember, NodeAuth, NodeParts, sentinel_node};
use crate::parent::placement::{self, Spread};
use crate::replication::engine::sentinel::Watch;

/// On a Sentinel's node and pod: the replication it watches. The Sentinels' Service and their
/// anti-affinity select it.
pub const SENTINEL_LABEL: &str = "valkey.io/sentinel";
/// On a Sentinel's node: its index.
pub const SENTINEL_INDEX_LABEL: &str = "valkey.io/sentinel-index";

/// `<replication>-sentinel-<index>`.
pub fn sentinel_name(replication: &str, index: u32) -> String {
    format!("{replication}-sentinel-{index}")
}

/// `<replication>-sentinel`: the Service Sentinel clients ask.
pub fn service_name(replication: &str) -> String {
    format!("{replication}-sentinel")
}

/// Whether a node of the replication is one of its Sentinels rather than a member.
pub fn is_sentinel(node: &ValkeyNode) -> bool {
    node.spec.server == NodeServer::Sentinel
}

/// What the Sentinels watch, when Sentinel is on: the master name (the replication's name by
/// default), the quorum (a majority of the Sentinels by default) and Sentinel's timeouts.
pub fn watch(replication: &ValkeyReplication) -> Option<Watch> {
    let sentinel = &replication.spec.sentinel;
    if !sentinel.enabled {
        return None;
    }
    let count = u32::try_from(sentinel.replicas.max(1)).unwrap_or(3);
    let quorum = sentinel
        .quorum
        .and_then(|q| u32::try_from(q).ok())
        .unwrap_or(count / 2 + 1);
    let millis = |m: i32| u64::try_from(m.max(1)).unwrap_or(1);
    Some(Watch {
        master_name: sentinel
            .master_name
            .clone()
            .unwrap_or_else(|| replication.name_any()),
        quorum,
        sentinels: count,
        down_after_ms: millis(sentinel.down_after_milliseconds),
        failover_timeout_ms: millis(sentinel.failover_timeout_milliseconds),
        login: None,
    })
}

/// The Sentinels' ValkeyNodes, by index (none when Sentinel is off).
pub fn desired(replication: &ValkeyReplication, auth: &NodeAuth) -> Vec<DesiredMember> {
    let Some(watch) = watch(replication) else {
        return Vec::new();
    };
    (0..watch.sentinels)
        .filter_map(|index| {
            let node = desired_node(replication, index, auth)?;
            Some(DesiredMember {
                shard: 0,
                index,
                name: node.metadata.name.clone()?,
                place: format!("sentinel {index}"),
                node,
            })
        })
        .collect()
}

fn common_labels(replication: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
        (
            "app.kubernetes.io/instance".to_owned(),
            replication.to_owned(),
        ),
        (
            "app.kubernetes.io/component".to_owned(),
            "sentinel".to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            FIELD_MANAGER.to_owned(),
        ),
        (SENTINEL_LABEL.to_owned(), replication.to_owned()),
    ])
}

fn desired_node(
    replication: &ValkeyReplication,
    index: u32,
    auth: &NodeAuth,
) -> Option<ValkeyNode> {
    let name = replication.meta().name.as_deref()?;
    let settings = replication.spec.server_settings();
    // Sentinels apart from each other, by node then zone, as members are: losing one machine
    // or zone must leave a majority of them.
    let together = [(SENTINEL_LABEL, name)];
    let spread = Spread {
        together: &together,
        first: None,
    };
    let mut labels = common_labels(name);
    labels.insert(REPLICATION_LABEL.to_owned(), name.to_owned());
    labels.insert(SENTINEL_INDEX_LABEL.to_owned(), index.to_string());
    let parts = NodeParts {
        name: sentinel_name(name, index),
        namespace: replication.meta().namespace.clone(),
        labels,
        owner: replication.controller_owner_ref(&())?,
        affinity: placement::affinity(settings.affinity.as_ref(), settings.placement, &spread),
        mode: BTreeMap::from([
            // Sentinels and servers talk over pod IPs, as the members do: no name resolution,
            // and nothing announced but the pod's own address.
            ("sentinel".to_owned(), "resolve-hostnames no".to_owned()),
            // Clients and the operator reach Sentinel from other pods: who may do what is the
            // ACL file's business (as on the servers), so Valkey's protected mode, which
            // refuses every remote client while the default user needs no password, stays off.
            ("protected-mode".to_owned(), "no".to_owned()),
        ]),
    };
    Some(sentinel_node(&settings, parts, common_labels(name), auth))
}

/// The Sentinel whose pod may restart now for a new spec (its name and the revision to allow),
/// if any: one at a time, by index, and only while every Sentinel is ready and none is mid-way
/// through a restart, and the replication `settled` (its status Ready: the engine has told the
/// last restarted Sentinel what to watch and every Sentinel has learned the replicas and the
/// others). Restarted together, every Sentinel would forget the primary at once: clients asking
/// one would get no answer, and a failure meanwhile would find nobody to elect a replica.
pub fn next_to_restart(existing: &[Arc<ValkeyNode>], settled: bool) -> Option<(String, String)> {
    let mut sorted: Vec<&ValkeyNode> = existing.iter().map(AsRef::as_ref).collect();
    sorted.sort_by_key(|n| n.name_any());
    let mut pending = None;
    for node in sorted {
        let status = node.status.as_ref()?;
        let (current, desired) = (
            status.current_revision.as_deref(),
            status.desired_revision.as_deref(),
        );
        if !status.ready {
            return None;
        }
        let Some(desired) = desired.filter(|d| current != Some(d)) else {
            continue;
        };
        if node.spec.allowed_revision.as_deref() == Some(desired) {
            // Released already, and not restarted yet.
            return None;
        }
        pending = pending.or_else(|| Some((node.name_any(), desired.to_owned())));
    }
    pending.filter(|_| settled)
}

/// The Service `<name>-sentinel` on port 26379, selecting every Sentinel's pod (none when
/// Sentinel is off).
pub fn service(replication: &ValkeyReplication) -> Option<Service> {
    watch(replication)?;
    let name = replication.meta().name.clone()?;
    let mut labels = common_labels(&name);
    // The replication's Services are watched by this label.
    labels.insert(REPLICATION_LABEL.to_owned(), name.clone());
    Some(Service {
        metadata: ObjectMeta {
            name: Some(service_name(&name)),
            namespace: replication.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![replication.controller_owner_ref(&())?]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(BTreeMap::from([(SENTINEL_LABEL.to_owned(), name)])),
            ports: Some(vec![ServicePort {
                name: Some("sentinel".into()),
                port: i32::from(SENTINEL_PORT),
                target_port: Some(IntOrString::String("sentinel".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::controller::desired;
    use crate::replication::controller::fixtures::{REPLICATION, replication};

    fn with_sentinel(extra: &str) -> ValkeyReplication {
        replication(&format!(
            "{REPLICATION}  sentinel: {{enabled: true{extra}}}\n"
        ))
    }

    #[test]
    fn without_sentinel_there_is_no_sentinel_node_and_no_service() {
        let r = replication(REPLICATION);
        assert!(desired(&r, &NodeAuth::of("orders")).is_empty());
        assert!(service(&r).is_none());
        assert!(watch(&r).is_none());
    }

    /// Three Sentinels by default, spread apart like members, running Sentinel on the
    /// replication's image with no data and no secret in their config: they mount the Sentinels'
    /// ACL file only, and their probes log in as the healthcheck user.
    #[test]
    fn sentinels_are_sentinel_nodes_of_the_replications_image_spread_apart() {
        let r = with_sentinel("");
        let sentinels = desired(&r, &NodeAuth::of("orders"));
        let names: Vec<&str> = sentinels.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "orders-sentinel-0",
                "orders-sentinel-1",
                "orders-sentinel-2"
            ]
        );
        let node = &sentinels[1].node;
        assert_eq!(node.spec.server, NodeServer::Sentinel);
        assert_eq!(node.spec.image, r.spec.image);
        assert!(node.spec.persistence.is_none() && node.spec.exporter.is_none());
        let credentials = node.spec.credentials.clone().expect("credentials");
        assert_eq!(credentials.secret_name, "orders-acl");
        assert_eq!(credentials.username, "healthcheck");
        assert_eq!(credentials.files, Some(vec!["sentinel.acl".to_owned()]));
        let config = node.spec.config.clone().unwrap_or_default();
        assert_eq!(
            config.get("sentinel").map(String::as_str),
            Some("resolve-hostnames no")
        );
        assert_eq!(
            config.get("aclfile").map(String::as_str),
            Some("/etc/valkey/credentials/sentinel.acl")
        );
        assert!(
            !config.contains_key("maxmemory") && !config.contains_key("include"),
            "the servers' settings are not Sentinel's: {config:?}"
        );
        let terms = node
            .spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|p| {
                p.preferred_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default();
        assert_eq!(terms.len(), 2, "apart by node, then by zone: {terms:?}");
        let selects = &terms[0].pod_affinity_term.label_selector;
        let selected = selects
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default();
        assert_eq!(
            selected.get(SENTINEL_LABEL).map(String::as_str),
            Some("orders")
        );
        let owner = node.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| o.kind.as_str()),
            Some("ValkeyReplication")
        );
    }

    fn sentinel_at(
        name: &str,
        ready: bool,
        current: &str,
        desired: &str,
        allowed: Option<&str>,
    ) -> Arc<ValkeyNode> {
        let r = with_sentinel("");
        let index = name
            .rsplit('-')
            .next()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let mut node = desired_node(&r, index, &NodeAuth::of("orders")).expect("a node");
        node.spec.allowed_revision = allowed.map(str::to_owned);
        node.status = Some(valkey_api::v1alpha1::ValkeyNodeStatus {
            ready,
            current_revision: Some(current.to_owned()),
            desired_revision: Some(desired.to_owned()),
            ..Default::default()
        });
        Arc::new(node)
    }

    /// A new spec restarts the Sentinels one at a time, by index, each once every Sentinel is
    /// ready, none is mid-restart and the replication is Ready again.
    #[test]
    fn sentinels_restart_one_at_a_time_once_everything_settled() {
        let all_new = [
            sentinel_at("orders-sentinel-0", true, "a", "b", Some("a")),
            sentinel_at("orders-sentinel-1", true, "a", "b", Some("a")),
            sentinel_at("orders-sentinel-2", true, "a", "b", Some("a")),
        ];
        assert_eq!(
            next_to_restart(&all_new, true),
            Some(("orders-sentinel-0".to_owned(), "b".to_owned()))
        );
        assert_eq!(
            next_to_restart(&all_new, false),
            None,
            "not while unsettled"
        );
        // 0 released and not restarted yet: nobody else.
        let released = [
            sentinel_at("orders-sentinel-0", true, "a", "b", Some("b")),
            sentinel_at("orders-sentinel-1", true, "a", "b", Some("a")),
        ];
        assert_eq!(next_to_restart(&released, true), None);
        // 0 restarted but not ready: nobody else.
        let restarting = [
            sentinel_at("orders-sentinel-0", false, "b", "b", Some("b")),
            sentinel_at("orders-sentinel-1", true, "a", "b", Some("a")),
        ];
        assert_eq!(next_to_restart(&restarting, true), None);
        // 0 done: 1 next.
        let done = [
            sentinel_at("orders-sentinel-0", true, "b", "b", Some("b")),
            sentinel_at("orders-sentinel-1", true, "a", "b", Some("a")),
        ];
        assert_eq!(
            next_to_restart(&done, true),
            Some(("orders-sentinel-1".to_owned(), "b".to_owned()))
        );
        // Nothing to restart.
        let current = [sentinel_at("orders-sentinel-0", true, "b", "b", Some("b"))];
        assert_eq!(next_to_restart(&current, true), None);
    }

    /// A Sentinel's node is watched with the replication's label, but its pod carries neither
    /// that label nor an index: the members' Services, budget and anti-affinity (which select
    /// the replication label) never count it, and it is never taken for a member.
    #[test]
    fn a_sentinels_pod_is_never_selected_as_a_member() {
        let r = with_sentinel("");
        let sentinel = &desired(&r, &NodeAuth::of("orders"))[0].node;
        let node_labels = sentinel.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            node_labels.get(REPLICATION_LABEL).map(String::as_str),
            Some("orders")
        );
        assert!(!node_labels.contains_key(valkey_api::contract::cluster::INDEX_LABEL));
        let pod_labels = sentinel.spec.pod_labels.clone().unwrap_or_default();
        assert!(
            !pod_labels.contains_key(REPLICATION_LABEL),
            "{pod_labels:?}"
        );
        assert!(is_sentinel(sentinel));
        let member = &desired::members(&r, &crate::parent::node::NodeAuth::of("orders"))[0];
        assert!(!is_sentinel(&member.node));
        let member_terms = member
            .node
            .spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|p| {
                p.preferred_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default();
        for term in member_terms {
            let labels = term
                .pod_affinity_term
                .label_selector
                .and_then(|s| s.match_labels)
                .unwrap_or_default();
            assert!(
                !labels.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
                "a member's anti-affinity selects a Sentinel's pod: {labels:?}"
            );
        }
    }

    #[test]
    fn the_quorum_is_a_majority_and_the_master_name_the_replications_by_default() {
        let w = watch(&with_sentinel("")).unwrap_or_else(|| panic!("no watch"));
        assert_eq!((w.sentinels, w.quorum), (3, 2));
        assert_eq!(w.master_name, "orders");
        assert_eq!((w.down_after_ms, w.failover_timeout_ms), (5000, 60000));
        let w = watch(&with_sentinel(", replicas: 5, masterName: shop"))
            .unwrap_or_else(|| panic!("no watch"));
        assert_eq!((w.sentinels, w.quorum), (5, 3));
        assert_eq!(w.master_name, "shop");
        let w =
            watch(&with_sentinel(", replicas: 5, quorum: 2")).unwrap_or_else(|| panic!("no watch"));
        assert_eq!(w.quorum, 2);
        assert_eq!(
            desired(&with_sentinel(", replicas: 5"), &NodeAuth::of("orders")).len(),
            5
        );
    }

    #[test]
    fn the_sentinel_service_selects_every_sentinel_on_26379() {
        let r = with_sentinel("");
        let s = service(&r).unwrap_or_else(|| panic!("no Service"));
        assert_eq!(s.metadata.name.as_deref(), Some("orders-sentinel"));
        let spec = s.spec.unwrap_or_default();
        assert_eq!(
            spec.selector,
            Some(BTreeMap::from([(
                SENTINEL_LABEL.to_owned(),
                "orders".to_owned()
            )]))
        );
        let port = &spec.ports.unwrap_or_default()[0];
        assert_eq!(port.port, 26379);
        let pod_labels = desired(&r, &NodeAuth::of("orders"))[0]
            .node
            .spec
            .pod_labels
            .clone()
            .unwrap_or_default();
        assert_eq!(
            pod_labels.get(SENTINEL_LABEL).map(String::as_str),
            Some("orders")
        );
    }
}
