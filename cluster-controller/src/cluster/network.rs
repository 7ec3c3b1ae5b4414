//! The network stage: the cluster's NetworkPolicy (`spec.networkPolicy`, on by default). Its
//! members' pods accept the cluster bus only from each other, and the client port only from each
//! other (replication, slot moves), from the peers the spec names (by default every pod of the
//! cluster's namespace) and from the operator's own pods; with `spec.metrics` on, the exporters'
//! port from anywhere. Egress is not restricted.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use valkey_api::contract::{METRICS_PORT, VALKEY_PORT};
use valkey_api::v1alpha1::{NetworkPeer, ValkeyCluster};

use super::bus;
use super::context::Context;
use crate::parent::error::Error;
use crate::parent::labels::{CLUSTER_LABEL, FIELD_MANAGER};

/// The label every pod of the operator's chart carries.
const OPERATOR_POD_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "valkey-operator");

pub fn policy_name(cluster: &str) -> String {
    format!("{cluster}-valkey")
}

/// The NetworkPolicy the spec asks for; `None` when `spec.networkPolicy.enabled` is false.
/// `operator_namespace` is where the controllers' pods run, when they run in pods.
pub fn desired_policy(
    cluster: &ValkeyCluster,
    operator_namespace: Option<&str>,
) -> Option<NetworkPolicy> {
    let access = &cluster.spec.network_policy;
    if !access.enabled {
        return None;
    }
    let name = cluster.meta().name.clone()?;
    let members = NetworkPolicyPeer {
        pod_selector: Some(selector([(CLUSTER_LABEL, name.as_str())])),
        ..Default::default()
    };
    let mut clients: Vec<NetworkPolicyPeer> = match access.clients.as_deref() {
        None | Some([]) => vec![NetworkPolicyPeer {
            // Every pod of the cluster's own namespace.
            pod_selector: Some(LabelSelector::default()),
            ..Default::default()
        }],
        Some(peers) => peers.iter().map(peer).collect(),
    };
    clients.push(members.clone());
    if let Some(namespace) = operator_namespace {
        clients.push(NetworkPolicyPeer {
            namespace_selector: Some(selector([("kubernetes.io/metadata.name", namespace)])),
            pod_selector: Some(selector([OPERATOR_POD_LABEL])),
            ..Default::default()
        });
    }
    let mut ingress = vec![
        NetworkPolicyIngressRule {
            from: Some(vec![members]),
            ports: Some(vec![tcp(bus::port(cluster))]),
        },
        NetworkPolicyIngressRule {
            from: Some(clients),
            ports: Some(vec![tcp(VALKEY_PORT)]),
        },
    ];
    if cluster.spec.metrics.enabled {
        // The exporters' port, from anywhere: where Prometheus runs is the platform's choice. It
        // serves metrics only, and no password leaves through it (see the node-controller's
        // exporter).
        ingress.push(NetworkPolicyIngressRule {
            from: None,
            ports: Some(vec![tcp(METRICS_PORT)]),
        });
    }
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(&name)),
            namespace: cluster.meta().namespace.clone(),
            labels: Some(
                [
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        FIELD_MANAGER.to_owned(),
                    ),
                    (CLUSTER_LABEL.to_owned(), name.clone()),
                ]
                .into(),
            ),
            owner_references: Some(vec![cluster.controller_owner_ref(&())?]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector([(CLUSTER_LABEL, name.as_str())])),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..Default::default()
        }),
    })
}

fn peer(p: &NetworkPeer) -> NetworkPolicyPeer {
    if let Some(cidr) = &p.cidr {
        return NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.clone(),
                except: None,
            }),
            ..Default::default()
        };
    }
    NetworkPolicyPeer {
        namespace_selector: p.namespace_labels.as_ref().map(|labels| LabelSelector {
            match_labels: Some(labels.clone()),
            ..Default::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: p.pod_labels.clone().filter(|l| !l.is_empty()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn selector<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(port))),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// Applies the cluster's NetworkPolicy, or deletes the one the operator made when the spec turns
/// it off; a steady cluster writes nothing (see [`crate::parent::applier`]).
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &plumbing::ObjectKey,
) -> Result<(), Error> {
    match desired_policy(cluster, ctx.settings.operator_namespace.as_deref()) {
        Some(policy) => {
            ctx.applier
                .apply(&ctx.client, key, &ctx.policies, &policy)
                .await?;
        }
        None => {
            let name = policy_name(&cluster.name_any());
            ctx.applier
                .delete(&ctx.client, key, &ctx.policies, &name)
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::{CLUSTER, cluster};

    fn rules(policy: &NetworkPolicy) -> Vec<NetworkPolicyIngressRule> {
        policy
            .spec
            .as_ref()
            .and_then(|s| s.ingress.clone())
            .unwrap_or_default()
    }

    fn port(rule: &NetworkPolicyIngressRule) -> Option<IntOrString> {
        rule.ports.as_ref()?.first()?.port.clone()
    }

    #[test]
    fn the_bus_only_between_members_the_client_port_from_the_namespace_members_and_the_operator() {
        let policy = desired_policy(&cluster(CLUSTER), Some("valkey-operator-system"))
            .unwrap_or_else(|| panic!("on by default"));
        let spec = policy.spec.clone().unwrap_or_default();
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
        let members = selector([(CLUSTER_LABEL, "cache")]);
        assert_eq!(spec.pod_selector, Some(members.clone()));
        let rules = rules(&policy);
        assert_eq!(rules.len(), 2);
        assert_eq!(port(&rules[0]), Some(IntOrString::Int(16379)));
        let bus_from = rules[0].from.clone().unwrap_or_default();
        assert_eq!(bus_from.len(), 1);
        assert_eq!(bus_from[0].pod_selector, Some(members.clone()));
        assert!(
            bus_from[0].namespace_selector.is_none(),
            "this namespace only"
        );
        assert_eq!(port(&rules[1]), Some(IntOrString::Int(6379)));
        let clients = rules[1].from.clone().unwrap_or_default();
        assert_eq!(clients.len(), 3);
        assert_eq!(clients[0].pod_selector, Some(LabelSelector::default()));
        assert!(clients[0].namespace_selector.is_none());
        assert_eq!(clients[1].pod_selector, Some(members));
        assert_eq!(
            clients[2].namespace_selector,
            Some(selector([(
                "kubernetes.io/metadata.name",
                "valkey-operator-system"
            )]))
        );
        assert_eq!(
            policy
                .metadata
                .owner_references
                .as_ref()
                .map(|o| o[0].uid.as_str()),
            Some("0000-1")
        );
    }

    #[test]
    fn named_clients_replace_the_namespace_and_off_means_none() {
        let yaml = format!(
            "{CLUSTER}  networkPolicy: {{clients: [{{namespaceLabels: {{team: web}}, podLabels: {{app: front}}}}, {{cidr: 10.1.0.0/16}}]}}\n"
        );
        let policy = desired_policy(&cluster(&yaml), None).unwrap_or_else(|| panic!("on"));
        let clients = rules(&policy)[1].from.clone().unwrap_or_default();
        assert_eq!(clients.len(), 3, "the two named, and the members");
        assert_eq!(
            clients[0].namespace_selector,
            Some(selector([("team", "web")]))
        );
        assert_eq!(clients[0].pod_selector, Some(selector([("app", "front")])));
        assert_eq!(
            clients[1].ip_block.as_ref().map(|b| b.cidr.as_str()),
            Some("10.1.0.0/16")
        );
        let off = format!("{CLUSTER}  networkPolicy: {{enabled: false}}\n");
        assert!(desired_policy(&cluster(&off), None).is_none());
    }

    #[test]
    fn with_metrics_on_the_exporters_port_is_open_and_nothing_else_changes() {
        let plain = desired_policy(&cluster(CLUSTER), None).unwrap_or_else(|| panic!("on"));
        let metered = format!("{CLUSTER}  metrics: {{enabled: true}}\n");
        let policy = desired_policy(&cluster(&metered), None).unwrap_or_else(|| panic!("on"));
        let rules = rules(&policy);
        assert_eq!(rules.len(), 3);
        assert_eq!(
            rules[..2],
            self::rules(&plain)[..],
            "the other rules as they were"
        );
        assert_eq!(port(&rules[2]), Some(IntOrString::Int(9121)));
        assert!(rules[2].from.is_none(), "from anywhere");
    }
}
