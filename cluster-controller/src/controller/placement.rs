//! Where a member's pod may run: members of one shard kept apart, primaries spread. Expressed as
//! pod anti-affinity over the labels every member's pod carries, so the scheduler enforces it and
//! the cluster-controller never needs to read a Node or a Pod.

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use valkey_api::v1alpha1::PlacementPolicy;

use super::labels::{CLUSTER_LABEL, INDEX_LABEL, SHARD_LABEL};

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const HOST: &str = "kubernetes.io/hostname";

/// The affinity of member `(shard, index)`: the user's own, plus the placement policy's terms.
pub fn affinity(
    user: Option<&Affinity>,
    policy: PlacementPolicy,
    cluster: &str,
    shard: u32,
) -> Option<Affinity> {
    let mut affinity = user.cloned().unwrap_or_default();
    let same_shard = selector(&[(CLUSTER_LABEL, cluster), (SHARD_LABEL, &shard.to_string())]);
    // The members created first are the first primaries: spread them over zones and nodes too.
    let first_members = selector(&[(CLUSTER_LABEL, cluster), (INDEX_LABEL, "0")]);
    let (required, preferred) = match policy {
        PlacementPolicy::Disabled => return user.cloned(),
        PlacementPolicy::Required => (
            vec![term(&same_shard, ZONE)],
            vec![
                weighted(100, &same_shard, HOST),
                weighted(20, &first_members, ZONE),
                weighted(10, &first_members, HOST),
            ],
        ),
        PlacementPolicy::Preferred => (
            Vec::new(),
            vec![
                weighted(100, &same_shard, HOST),
                weighted(80, &same_shard, ZONE),
                weighted(20, &first_members, ZONE),
                weighted(10, &first_members, HOST),
            ],
        ),
    };
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default);
    if !required.is_empty() {
        anti.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .extend(required);
    }
    anti.preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .extend(preferred);
    Some(affinity)
}

fn selector(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn term(selector: &LabelSelector, topology_key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector.clone()),
        topology_key: topology_key.to_owned(),
        ..Default::default()
    }
}

fn weighted(weight: i32, selector: &LabelSelector, topology_key: &str) -> WeightedPodAffinityTerm {
    WeightedPodAffinityTerm {
        weight,
        pod_affinity_term: term(selector, topology_key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required(a: &Affinity) -> Vec<PodAffinityTerm> {
        a.pod_anti_affinity
            .as_ref()
            .and_then(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default()
    }

    #[test]
    fn required_keeps_a_shard_out_of_one_zone() {
        let a = affinity(None, PlacementPolicy::Required, "c", 2).unwrap_or_default();
        let terms = required(&a);
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, ZONE);
        let labels = terms[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default();
        assert_eq!(labels.get(SHARD_LABEL).map(String::as_str), Some("2"));
        assert_eq!(labels.get(CLUSTER_LABEL).map(String::as_str), Some("c"));
    }

    #[test]
    fn preferred_only_prefers() {
        let a = affinity(None, PlacementPolicy::Preferred, "c", 0).unwrap_or_default();
        assert!(required(&a).is_empty());
        let preferred = a
            .pod_anti_affinity
            .and_then(|p| p.preferred_during_scheduling_ignored_during_execution)
            .unwrap_or_default();
        assert!(
            preferred
                .iter()
                .any(|w| w.pod_affinity_term.topology_key == HOST && w.weight == 100)
        );
    }

    #[test]
    fn the_users_affinity_is_kept() {
        let user: Affinity = serde_json::from_value(serde_json::json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "rack", "labelSelector": {"matchLabels": {"app": "other"}}}]}
        })).unwrap_or_default();
        let a = affinity(Some(&user), PlacementPolicy::Required, "c", 0).unwrap_or_default();
        assert!(a.node_affinity.is_some());
        assert_eq!(required(&a).len(), 2);
        assert_eq!(
            affinity(Some(&user), PlacementPolicy::Disabled, "c", 0),
            Some(user)
        );
        assert_eq!(affinity(None, PlacementPolicy::Disabled, "c", 0), None);
    }
}
