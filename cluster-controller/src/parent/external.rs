//! External access (`spec.externalAccess`): Services of type LoadBalancer through which clients
//! outside Kubernetes reach the servers, while the members keep talking to each other over pod
//! IPs.
//!
//! A cluster member tells clients where to reach it with Valkey's client-only announce setting
//! [`ANNOUNCE`] (Valkey 8.0 and later; live, so a changed address needs no restart): MOVED, ASK,
//! CLUSTER SLOTS and CLUSTER SHARDS answers carry it, while the cluster bus, gossip and
//! replication keep the pod IP. The operator itself keeps identifying members by node ID and
//! pod IP, never by an announced address. The setting is part of the member's ValkeyNode config,
//! so a restarted server comes up announcing it (valkey.conf) and the node-controller sets a
//! changed one live.
//!
//! A member that never joined the cluster does not join before its address is announced (see
//! [`joinable`]): otherwise clients would be sent to its pod IP, which they cannot reach, until
//! the load balancer answered. Every external port is the client port 6379, so one setting says
//! it all on every version: Valkey 8.0 has no client-only port setting (9.0 adds
//! `cluster-announce-client-port`), which a NodePort would need.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use valkey_api::v1alpha1::StatusReason;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use valkey_api::contract::CONFIG_APPLIED_CONDITION;
use valkey_api::v1alpha1::{ExternalAccess, ValkeyNode};

use super::conditions::Problem;
use super::node::DesiredMember;
use super::serving::{Owner, valkey_port};

/// The live setting with which a cluster member tells clients, and only clients, its address.
pub const ANNOUNCE: &str = "cluster-announce-client-ipv4";
/// The label every external Service carries (`true`): what the Service cache selects.
pub const EXTERNAL_LABEL: &str = "valkey.io/external";
/// The reason a parent reports while a load balancer has not given an address yet.
pub const ADDRESS_PENDING: StatusReason = StatusReason::ExternalAddressPending;
/// The reason a parent reports when a load balancer gave a host name but no IPv4 address.
pub const ADDRESS_UNUSABLE: StatusReason = StatusReason::ExternalAddressUnusable;

/// The external Service of a cluster member.
pub fn member_service_name(member: &str) -> String {
    format!("{member}-external")
}

/// An external Service named `name` over the pods `selector` picks, as `access` asks.
pub fn service(
    owner: &Owner,
    name: String,
    selector: BTreeMap<String, String>,
    access: &ExternalAccess,
) -> Service {
    let mut labels = owner.labels.clone();
    labels.insert(EXTERNAL_LABEL.to_owned(), "true".to_owned());
    Service {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name),
            namespace: Some(owner.namespace.clone()),
            labels: Some(labels),
            annotations: access.annotations.clone().filter(|a| !a.is_empty()),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some(selector),
            ports: Some(vec![valkey_port()]),
            load_balancer_class: access.load_balancer_class.clone(),
            load_balancer_source_ranges: access
                .load_balancer_source_ranges
                .clone()
                .filter(|r| !r.is_empty()),
            ..Default::default()
        }),
        status: None,
    }
}

/// What a load balancer gave a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// Nothing yet.
    Pending,
    Ip(Ipv4Addr),
    /// Only a host name (or an IPv6 address), which [`ANNOUNCE`] cannot carry.
    Unusable(String),
}

/// The address a Service's load balancer gave it: the first IPv4 address of its ingress.
pub fn address(service: Option<&Service>) -> Address {
    let ingress = service
        .and_then(|s| s.status.as_ref())
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .cloned()
        .unwrap_or_default();
    if let Some(ip) = ingress
        .iter()
        .filter_map(|i| i.ip.as_deref())
        .find_map(|ip| ip.parse::<Ipv4Addr>().ok())
    {
        return Address::Ip(ip);
    }
    match ingress
        .iter()
        .find_map(|i| i.hostname.clone().or_else(|| i.ip.clone()))
    {
        Some(other) => Address::Unusable(other),
        None => Address::Pending,
    }
}

/// Gives each desired member its announced address: the address of its Service when there is
/// one; when external access is off, an empty value for a member that still announces one (so
/// the running server forgets it live); otherwise nothing. Returns the problem a person should
/// see while some member's address is missing.
pub fn announce(
    desired: &mut [DesiredMember],
    access: Option<&ExternalAccess>,
    services: &BTreeMap<String, Service>,
    existing: &[std::sync::Arc<ValkeyNode>],
) -> Option<Problem> {
    let mut pending = Vec::new();
    let mut unusable = Vec::new();
    for member in desired.iter_mut() {
        let announced = match access {
            Some(_) => {
                let name = member_service_name(&member.name);
                match address(services.get(&name)) {
                    Address::Ip(ip) => Some(ip.to_string()),
                    Address::Pending => {
                        pending.push(name);
                        None
                    }
                    Address::Unusable(what) => {
                        unusable.push(format!("{name} ({what})"));
                        None
                    }
                }
                // Until the address is known a member keeps what it announces already.
                .or_else(|| announced_by(existing, &member.name))
            }
            None => announced_by(existing, &member.name)
                .filter(|a| !a.is_empty())
                .map(|_| String::new()),
        };
        if let Some(value) = announced {
            member
                .node
                .spec
                .config
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOUNCE.to_owned(), value);
        }
    }
    if !unusable.is_empty() {
        return Some(Problem {
            reason: ADDRESS_UNUSABLE,
            message: format!(
                "the load balancer of {} gave no IPv4 address, which Valkey needs to tell clients \
                 where each member is; choose a load balancer (loadBalancerClass, annotations) \
                 that gives IPv4 addresses",
                unusable.join(", ")
            ),
        });
    }
    (!pending.is_empty()).then(|| Problem {
        reason: ADDRESS_PENDING,
        message: format!(
            "waiting for the load balancer to give {} an address; a new member joins the cluster \
             only once clients can be told where it is (kubectl describe service shows why one \
             is not given)",
            pending.join(", ")
        ),
    })
}

/// What a member's ValkeyNode announces now.
fn announced_by(existing: &[std::sync::Arc<ValkeyNode>], member: &str) -> Option<String> {
    existing
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(member))
        .and_then(|n| n.spec.config.as_ref())
        .and_then(|c| c.get(ANNOUNCE).cloned())
}

/// Whether a member may join its cluster with external access on: its ValkeyNode announces an
/// address and the node-controller reports the running server has it (ConfigApplied, for the
/// spec it has). Members that joined before are never held back by it.
pub fn joinable(node: &ValkeyNode) -> bool {
    let announces = node
        .spec
        .config
        .as_ref()
        .and_then(|c| c.get(ANNOUNCE))
        .is_some_and(|a| !a.is_empty());
    let status = node.status.as_ref();
    let current = status.is_some_and(|s| s.observed_generation == node.metadata.generation);
    let applied = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
        c.iter()
            .any(|c| c.type_ == CONFIG_APPLIED_CONDITION && c.status == "True")
    });
    announces && current && applied
}

/// The names an operator-issued certificate adds for external clients: every external address
/// and the DNS names the spec gives.
pub fn certificate_names(
    access: Option<&ExternalAccess>,
    services: &BTreeMap<String, Service>,
) -> Vec<String> {
    let Some(access) = access else {
        return Vec::new();
    };
    let mut names: Vec<String> = services
        .values()
        .filter_map(|s| match address(Some(s)) {
            Address::Ip(ip) => Some(ip.to_string()),
            _ => None,
        })
        .collect();
    names.extend(access.tls_names.clone().unwrap_or_default());
    names.sort();
    names.dedup();
    names
}

/// The problem of a certificate of the user's that lacks external names.
pub fn lacking_names(lacking: &[String]) -> Option<Problem> {
    (!lacking.is_empty()).then(|| Problem {
        reason: StatusReason::CertificateLacksExternalNames,
        message: format!(
            "the certificate of spec.tls.certificateSecret does not name {}: clients outside \
             that verify the server's name will refuse it; add them to the certificate (its \
             subject alternative names)",
            lacking.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::desired::members;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use crate::parent::labels::CLUSTER_LABEL;
    use crate::parent::node::NodeAuth;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use std::sync::Arc;

    fn access() -> ExternalAccess {
        serde_json::from_value(serde_json::json!({
            "annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"},
            "loadBalancerClass": "example.com/lb",
            "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "tlsNames": ["*.valkey.example.com"],
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn with_ingress(mut service: Service, ip: Option<&str>, hostname: Option<&str>) -> Service {
        service.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: ip.map(str::to_owned),
                    hostname: hostname.map(str::to_owned),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        service
    }

    /// What a desired member announces to clients.
    fn announced(m: &DesiredMember) -> Option<String> {
        m.node
            .spec
            .config
            .as_ref()
            .and_then(|c| c.get(ANNOUNCE))
            .cloned()
    }

    fn member_service(name: &str) -> Service {
        let c = cluster(CLUSTER);
        let owner = Owner::of(&c, CLUSTER_LABEL).unwrap_or_else(|| panic!("no owner"));
        let selector = BTreeMap::from([("valkey.io/node".to_owned(), name.to_owned())]);
        service(&owner, member_service_name(name), selector, &access())
    }

    #[test]
    fn a_member_service_is_a_load_balancer_for_that_member_alone() {
        let s = member_service("cache-0-0");
        assert_eq!(s.metadata.name.as_deref(), Some("cache-0-0-external"));
        assert_eq!(
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(EXTERNAL_LABEL))
                .map(String::as_str),
            Some("true")
        );
        let spec = s.spec.clone().unwrap_or_default();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.load_balancer_class.as_deref(), Some("example.com/lb"));
        assert_eq!(
            spec.load_balancer_source_ranges,
            Some(vec!["203.0.113.0/24".to_owned()])
        );
        assert_eq!(
            spec.selector
                .and_then(|s| s.get("valkey.io/node").cloned())
                .as_deref(),
            Some("cache-0-0")
        );
        assert!(s.metadata.annotations.is_some_and(|a| {
            a.contains_key("service.beta.kubernetes.io/aws-load-balancer-scheme")
        }));
    }

    #[test]
    fn only_an_ipv4_ingress_is_an_address_to_announce() {
        let s = member_service("cache-0-0");
        assert_eq!(address(Some(&s)), Address::Pending);
        assert_eq!(address(None), Address::Pending);
        assert_eq!(
            address(Some(&with_ingress(s.clone(), Some("10.213.255.4"), None))),
            Address::Ip(Ipv4Addr::new(10, 213, 255, 4))
        );
        assert_eq!(
            address(Some(&with_ingress(s, None, Some("lb.example.com")))),
            Address::Unusable("lb.example.com".into())
        );
    }

    #[test]
    fn members_announce_their_address_once_given_and_wait_with_a_reason_until_then() {
        let c = cluster(CLUSTER);
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let first = desired[0].name.clone();
        let services = BTreeMap::from([(
            member_service_name(&first),
            with_ingress(member_service(&first), Some("10.213.255.4"), None),
        )]);
        let problem = announce(&mut desired, Some(&access()), &services, &[]);
        assert_eq!(announced(&desired[0]).as_deref(), Some("10.213.255.4"));
        assert_eq!(
            announced(&desired[1]),
            None,
            "no address yet: nothing announced"
        );
        let problem = problem.unwrap_or_else(|| panic!("no problem while addresses are pending"));
        assert_eq!(problem.reason, ADDRESS_PENDING);
        assert!(
            problem
                .message
                .contains(&member_service_name(&desired[1].name))
        );
        assert!(!problem.message.contains(&member_service_name(&first)));
    }

    #[test]
    fn turned_off_a_member_that_announced_forgets_it_and_others_are_untouched() {
        let c = cluster(CLUSTER);
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let mut was = desired[0].node.clone();
        was.spec
            .config
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOUNCE.to_owned(), "10.213.255.4".to_owned());
        let existing = vec![Arc::new(was)];
        assert!(announce(&mut desired, None, &BTreeMap::new(), &existing).is_none());
        assert_eq!(announced(&desired[0]).as_deref(), Some(""));
        assert_eq!(announced(&desired[1]), None);
    }

    #[test]
    fn a_member_joins_only_once_the_server_has_its_address() {
        let c = cluster(CLUSTER);
        let mut node = members(&c, &NodeAuth::of("cache"))[0].node.clone();
        node.metadata.generation = Some(2);
        assert!(!joinable(&node), "no address");
        node.spec
            .config
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOUNCE.to_owned(), "10.213.255.4".to_owned());
        let status = |generation: i64, applied: &str| {
            serde_json::from_value::<valkey_api::v1alpha1::ValkeyNodeStatus>(serde_json::json!({
                "observedGeneration": generation,
                "conditions": [{
                    "type": CONFIG_APPLIED_CONDITION, "status": applied, "reason": "Applied",
                    "message": "", "lastTransitionTime": "2026-12-04T00:00:00Z",
                }],
            }))
            .ok()
        };
        node.status = status(1, "True");
        assert!(!joinable(&node), "a status of the spec before the address");
        node.status = status(2, "False");
        assert!(!joinable(&node), "not applied yet");
        node.status = status(2, "True");
        assert!(joinable(&node));
    }

    #[test]
    fn the_certificate_names_every_external_address_and_the_given_names() {
        let first = with_ingress(member_service("cache-0-0"), Some("10.213.255.4"), None);
        let pending = member_service("cache-0-1");
        let services = BTreeMap::from([
            ("cache-0-0-external".to_owned(), first),
            ("cache-0-1-external".to_owned(), pending),
        ]);
        assert_eq!(
            certificate_names(Some(&access()), &services),
            ["*.valkey.example.com", "10.213.255.4"]
        );
        assert!(certificate_names(None, &services).is_empty());
    }
}
