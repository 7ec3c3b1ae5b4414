//! A ValkeyCluster's serving objects, on the floor's [`crate::parent::serving`] builders: its
//! client Services (per cluster) and a PodDisruptionBudget per shard, held while a shard has a
//! member out of step.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use valkey_api::v1alpha1::ValkeyCluster;

use crate::engine::{Member, Observation};
use crate::parent::labels::{CLUSTER_LABEL, SHARD_LABEL};
use crate::parent::serving::{Owner, client_services, disruption_budget};

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
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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
