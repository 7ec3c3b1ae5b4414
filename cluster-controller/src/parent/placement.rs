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

/// Which members to keep apart: `together` selects the members that hold the same data (a
/// shard's, or a replication's primary and replicas); `first`, when given, the members created
/// first in each group (a cluster's first primaries), spread over zones and nodes as well.
#[derive(Debug, Clone)]
pub struct Spread<'a> {
    pub together: &'a [(&'a str, &'a str)],
    pub first: Option<&'a [(&'a str, &'a str)]>,
}

impl Spread<'_> {
    /// A ValkeyCluster member of `shard`: apart from its shard, first members spread.
    pub fn shard<R>(cluster: &str, shard: u32, then: impl FnOnce(Spread<'_>) -> R) -> R {
        let shard = shard.to_string();
        let together = [(CLUSTER_LABEL, cluster), (SHARD_LABEL, shard.as_str())];
        let first = [(CLUSTER_LABEL, cluster), (INDEX_LABEL, "0")];
        then(Spread {
            together: &together,
            first: Some(&first),
        })
    }
}

/// The affinity of a member: the user's own, plus the placement policy's terms.
pub fn affinity(
    user: Option<&Affinity>,
    policy: PlacementPolicy,
    spread: &Spread<'_>,
) -> Option<Affinity> {
    let mut affinity = user.cloned().unwrap_or_default();
    let together = selector(spread.together);
    let first = spread.first.map(selector);
    let spread_first = |zone: i32, host: i32| {
        first
            .iter()
            .flat_map(move |f| [weighted(zone, f, ZONE), weighted(host, f, HOST)])
            .collect::<Vec<_>>()
    };
    let (required, preferred) = match policy {
        PlacementPolicy::Disabled => return user.cloned(),
        PlacementPolicy::Required => (
            vec![term(&together, ZONE)],
            [vec![weighted(100, &together, HOST)], spread_first(20, 10)].concat(),
        ),
        PlacementPolicy::Preferred => (
            Vec::new(),
            [
                vec![
                    weighted(100, &together, HOST),
                    weighted(80, &together, ZONE),
                ],
                spread_first(20, 10),
            ]
            .concat(),
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
        let a = Spread::shard("c", 2, |s| affinity(None, PlacementPolicy::Required, &s))
            .unwrap_or_default();
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
        let a = Spread::shard("c", 0, |s| affinity(None, PlacementPolicy::Preferred, &s))
            .unwrap_or_default();
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
        let a = Spread::shard("c", 0, |s| {
            affinity(Some(&user), PlacementPolicy::Required, &s)
        })
        .unwrap_or_default();
        assert!(a.node_affinity.is_some());
        assert_eq!(required(&a).len(), 2);
        assert_eq!(
            Spread::shard("c", 0, |s| affinity(
                Some(&user),
                PlacementPolicy::Disabled,
                &s
            )),
            Some(user)
        );
        assert_eq!(
            Spread::shard("c", 0, |s| affinity(None, PlacementPolicy::Disabled, &s)),
            None
        );
    }
}
