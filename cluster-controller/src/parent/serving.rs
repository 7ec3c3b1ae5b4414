//! The objects a parent of ValkeyNodes keeps beside them for the people and programs that use
//! Valkey: client Services (a ClusterIP one and a headless one, for seed discovery) and
//! PodDisruptionBudgets (at most one member of a group voluntarily down: a drain cannot take a
//! whole shard). The builders are pure and know no kind: a parent names the objects and says
//! which pods they select.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use valkey_api::contract::VALKEY_PORT;

use super::labels::FIELD_MANAGER;

/// Who owns the objects and what they carry.
#[derive(Debug, Clone)]
pub struct Owner {
    pub namespace: String,
    pub reference: OwnerReference,
    pub labels: BTreeMap<String, String>,
}

impl Owner {
    /// `parent` owns the objects, which carry the usual labels and `<parent_label>=<its name>`.
    pub fn of<K: Resource<DynamicType = ()>>(parent: &K, parent_label: &str) -> Option<Self> {
        let name = parent.meta().name.clone()?;
        Some(Self {
            namespace: parent.meta().namespace.clone()?,
            reference: parent.controller_owner_ref(&())?,
            labels: BTreeMap::from([
                ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
                ("app.kubernetes.io/instance".to_owned(), name.clone()),
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    FIELD_MANAGER.to_owned(),
                ),
                (parent_label.to_owned(), name),
            ]),
        })
    }
}

fn meta(owner: &Owner, name: String, extra: &BTreeMap<String, String>) -> ObjectMeta {
    let mut labels = owner.labels.clone();
    labels.extend(extra.clone());
    ObjectMeta {
        name: Some(name),
        namespace: Some(owner.namespace.clone()),
        labels: Some(labels),
        owner_references: Some(vec![owner.reference.clone()]),
        ..Default::default()
    }
}

/// The one port of every client Service: Valkey's, by the pods' port name.
pub fn valkey_port() -> ServicePort {
    ServicePort {
        name: Some("valkey".into()),
        port: i32::from(VALKEY_PORT),
        target_port: Some(IntOrString::String("valkey".into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The client Services of a group of pods: `<name>` (a ClusterIP) and `<name>-headless` (one
/// address per ready pod, for clients that discover every member).
pub fn client_services(
    owner: &Owner,
    name: &str,
    selector: &BTreeMap<String, String>,
) -> [Service; 2] {
    let service = |service_name: String, headless: bool| Service {
        metadata: meta(owner, service_name, &BTreeMap::new()),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: headless.then(|| "None".into()),
            selector: Some(selector.clone()),
            ports: Some(vec![valkey_port()]),
            ..Default::default()
        }),
        status: None,
    };
    [
        service(name.to_owned(), false),
        service(format!("{name}-headless"), true),
    ]
}

/// Whether the Service as it is already says what `want` says (what this controller sets).
pub fn service_as_wanted(current: &Service, want: &Service) -> bool {
    let spec = |s: &Service| {
        s.spec.as_ref().map(|spec| {
            (
                spec.selector.clone(),
                spec.ports.clone(),
                spec.type_.clone(),
            )
        })
    };
    let ports_match = match (spec(current), spec(want)) {
        (Some((selector, ports, kind)), Some((want_selector, want_ports, want_kind))) => {
            selector == want_selector
                && kind == want_kind
                && ports
                    .unwrap_or_default()
                    .iter()
                    .zip(want_ports.unwrap_or_default().iter())
                    .all(|(p, w)| {
                        p.port == w.port && p.target_port == w.target_port && p.name == w.name
                    })
        }
        _ => false,
    };
    let balancer = |s: &Service| {
        s.spec.as_ref().map(|spec| {
            (
                spec.load_balancer_class.clone(),
                spec.load_balancer_source_ranges.clone().unwrap_or_default(),
            )
        })
    };
    ports_match
        && balancer(current) == balancer(want)
        && want
            .metadata
            .annotations
            .iter()
            .flatten()
            .all(|(k, v)| current.annotations().get(k) == Some(v))
        && current.metadata.owner_references == want.metadata.owner_references
        && want
            .metadata
            .labels
            .iter()
            .flatten()
            .all(|(k, v)| current.labels().get(k) == Some(v))
}

/// A PodDisruptionBudget over the pods `selector` picks: at most one evicted at once, or none
/// while the group is `held` (a replica does not hold its primary's data yet: a replica answers
/// PING, so counts as healthy, while it full-syncs or loads, and the eviction of its primary would
/// leave the data nowhere else). Pods that are not ready may always be evicted: they serve
/// nothing, and a budget that waited for them could hold a drain forever.
pub fn disruption_budget(
    owner: &Owner,
    name: String,
    labels: &BTreeMap<String, String>,
    selector: &BTreeMap<String, String>,
    held: bool,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(owner, name, labels),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(if held { 0 } else { 1 })),
            selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            ..Default::default()
        }),
        status: None,
    }
}
