//! The objects a parent of ValkeyNodes keeps beside them for the people and programs that use
//! Valkey: client Services (a ClusterIP one and a headless one, for seed discovery) and
//! PodDisruptionBudgets (at most one member of a group voluntarily down: a drain cannot take a
//! whole shard). The builders are pure and know no kind: a parent names the objects and says
//! which pods they select (a ValkeyCluster per cluster and per shard).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use valkey_api::contract::VALKEY_PORT;
use valkey_api::v1alpha1::ValkeyCluster;

use super::labels::{CLUSTER_LABEL, FIELD_MANAGER, SHARD_LABEL};
use crate::engine::{Member, Observation};

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

/// The shards whose budget holds every member: those with a member the engine did not find in
/// step this pass (a replica not in sync: linking, full-syncing, loading; or a member it could
/// not read, which might be one). A shard of one member has nothing to wait for.
pub fn shards_out_of_sync(members: &[Member], observed: &Observation) -> BTreeSet<u32> {
    let mut by_shard: BTreeMap<u32, Vec<&Member>> = BTreeMap::new();
    for member in members {
        by_shard.entry(member.shard).or_default().push(member);
    }
    by_shard
        .into_iter()
        .filter(|(_, members)| members.len() > 1)
        .filter(|(_, members)| {
            members.iter().any(|m| {
                observed
                    .state(&m.name)
                    .is_none_or(|s| !s.myself().is_primary() && !s.replica_in_sync())
            })
        })
        .map(|(shard, _)| shard)
        .collect()
}

/// A ValkeyCluster's objects: its client Services, and a PodDisruptionBudget per shard
/// (`<cluster>-shard-<n>`) for every shard in `shards` (wanted, or still holding members), those
/// in `held` holding every member.
pub fn cluster_objects(
    cluster: &ValkeyCluster,
    shards: impl IntoIterator<Item = u32>,
    held: &BTreeSet<u32>,
) -> Option<(Vec<Service>, Vec<PodDisruptionBudget>)> {
    let name = cluster.meta().name.clone()?;
    let owner = Owner::of(cluster, CLUSTER_LABEL)?;
    let of_cluster = BTreeMap::from([(CLUSTER_LABEL.to_owned(), name.clone())]);
    let services = client_services(&owner, &name, &of_cluster).to_vec();
    let budgets = shards
        .into_iter()
        .map(|shard| {
            let mut of_shard = of_cluster.clone();
            of_shard.insert(SHARD_LABEL.to_owned(), shard.to_string());
            let labels = BTreeMap::from([(SHARD_LABEL.to_owned(), shard.to_string())]);
            let name = format!("{name}-shard-{shard}");
            disruption_budget(&owner, name, &labels, &of_shard, held.contains(&shard))
        })
        .collect();
    Some((services, budgets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{CLUSTER, cluster};

    #[test]
    fn a_cluster_gets_two_client_services_and_a_budget_per_shard() {
        let held = BTreeSet::from([2]);
        let Some((services, budgets)) = cluster_objects(&cluster(CLUSTER), 0..3, &held) else {
            panic!("no objects");
        };
        let names: Vec<_> = services
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(names, ["cache", "cache-headless"]);
        let headless = services[1].spec.clone().unwrap_or_default();
        assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
        assert_eq!(
            headless.selector,
            Some(BTreeMap::from([(
                "valkey.io/cluster".to_owned(),
                "cache".to_owned()
            )]))
        );
        assert_eq!(budgets.len(), 3);
        let second = budgets[1].spec.clone().unwrap_or_default();
        assert_eq!(second.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            second.selector.and_then(|s| s.match_labels),
            Some(BTreeMap::from([
                ("valkey.io/cluster".to_owned(), "cache".to_owned()),
                ("valkey.io/shard".to_owned(), "1".to_owned()),
            ]))
        );
        assert_eq!(budgets[1].metadata.name.as_deref(), Some("cache-shard-1"));
        let third = budgets[2].spec.clone().unwrap_or_default();
        assert_eq!(
            third.max_unavailable,
            Some(IntOrString::Int(0)),
            "a shard whose replica is not in sync yet lets none go"
        );
        assert_eq!(
            second.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        let owner = budgets[1]
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| o.kind.as_str()),
            Some("ValkeyCluster")
        );
    }
}
