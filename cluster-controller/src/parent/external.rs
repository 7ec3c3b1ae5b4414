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
use valkey_api::v1alpha1::{ExternalAccess, ExternalAccessType, ValkeyNode};

use super::conditions::Problem;
use super::node::DesiredMember;
use super::serving::{Owner, valkey_port};

/// The live setting with which a cluster member tells clients, and only clients, its address.
pub const ANNOUNCE: &str = "cluster-announce-client-ipv4";
/// The live settings with which a member behind a NodePort tells clients its port, plain and
/// TLS (Valkey 9.0 and later; "0" is the port it listens on). Both carry the node port: a
/// client is told the one for the kind of connection it came on.
pub const ANNOUNCE_PORTS: [&str; 2] = [
    "cluster-announce-client-port",
    "cluster-announce-client-tls-port",
];
/// The reason a cluster reports when NodePorts would need a client port Valkey 8 cannot announce.
pub const NODE_PORT_NEEDS_VALKEY_9: StatusReason = StatusReason::ExternalNodePortNeedsValkey9;
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

/// An external Service named `name` over the pods `selector` picks, as `access` asks, with what
/// `access.fixed` fixes for `key` (a member's name, or a replication's role).
pub fn service(
    owner: &Owner,
    name: String,
    selector: BTreeMap<String, String>,
    access: &ExternalAccess,
    key: &str,
) -> Service {
    let fixed = access.fixed.as_ref().and_then(|f| f.get(key));
    let load_balancer = access.r#type == ExternalAccessType::LoadBalancer;
    let mut port = valkey_port();
    port.node_port = fixed.and_then(|f| f.node_port);
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
            type_: Some(access.r#type.as_str().to_owned()),
            selector: Some(selector),
            ports: Some(vec![port]),
            load_balancer_class: access.load_balancer_class.clone().filter(|_| load_balancer),
            load_balancer_source_ranges: access
                .load_balancer_source_ranges
                .clone()
                .filter(|r| load_balancer && !r.is_empty()),
            load_balancer_ip: fixed
                .and_then(|f| f.load_balancer_ip.clone())
                .filter(|_| load_balancer),
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
    /// A node's address and the Service's node port.
    NodePort(Ipv4Addr, i32),
    /// Only a host name (or an IPv6 address), which [`ANNOUNCE`] cannot carry.
    Unusable(String),
}

/// Where clients reach the member `node` through its Service: the load balancer's address, or
/// for a NodePort the address of the node its pod runs on and the Service's node port.
pub fn member_address(
    access: &ExternalAccess,
    service: Option<&Service>,
    node: Option<&ValkeyNode>,
) -> Address {
    if access.r#type == ExternalAccessType::LoadBalancer {
        return address(service);
    }
    let port = service
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| p.node_port);
    let host = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.host_ip.as_deref());
    match (host, port) {
        (Some(host), Some(port)) => match host.parse::<Ipv4Addr>() {
            Ok(ip) => Address::NodePort(ip, port),
            Err(_) => Address::Unusable(host.to_owned()),
        },
        _ => Address::Pending,
    }
}

/// The major version of Valkey a member's server reports, once it has answered. A client port
/// is announced only to a server known to be 9.0 or later: an older one cannot announce one, and
/// would not even start with the setting in its valkey.conf.
fn major_version(node: Option<&ValkeyNode>) -> Option<u32> {
    node.and_then(|n| n.status.as_ref())
        .and_then(|s| s.valkey_version.as_deref())
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
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
    let mut too_old = Vec::new();
    for member in desired.iter_mut() {
        let node = existing
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(member.name.as_str()))
            .map(|n| &**n);
        let announced = match access {
            Some(access) => {
                let name = member_service_name(&member.name);
                match member_address(access, services.get(&name), node) {
                    Address::Ip(ip) => Some((ip.to_string(), "0".to_owned())),
                    Address::NodePort(ip, port) => match major_version(node) {
                        Some(9..) => Some((ip.to_string(), port.to_string())),
                        Some(_) => {
                            too_old.push(member.name.clone());
                            None
                        }
                        None => {
                            pending.push(format!("{name} (its server's version)"));
                            None
                        }
                    },
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
                .or_else(|| announced_by(node))
            }
            None => announced_by(node)
                .filter(|(ip, _)| !ip.is_empty())
                .map(|_| (String::new(), "0".to_owned())),
        };
        if let Some((ip, port)) = announced {
            let config = member.node.spec.config.get_or_insert_with(BTreeMap::new);
            config.insert(ANNOUNCE.to_owned(), ip);
            // The port settings exist from Valkey 9.0 on: written only where a port other than
            // the one the server listens on is announced, or was.
            if port != "0" || config_port(node).is_some_and(|p| p != "0") {
                for setting in ANNOUNCE_PORTS {
                    config.insert(setting.to_owned(), port.clone());
                }
            }
        }
    }
    if !too_old.is_empty() {
        return Some(Problem {
            reason: NODE_PORT_NEEDS_VALKEY_9,
            message: format!(
                "externalAccess.type NodePort needs Valkey 9.0 or later, which can tell clients a                  port other than the one it listens on; {} run an older Valkey: use                  type LoadBalancer, or an image of Valkey 9",
                too_old.join(", ")
            ),
        });
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
            "waiting for the external address of {} (a load balancer's address, or a node port \
             and the node its server runs on); a new member joins the cluster only once clients \
             can be told where it is (kubectl describe service shows why an address is not given)",
            pending.join(", ")
        ),
    })
}

/// What a member's ValkeyNode announces now: its address and port ("0" when none).
fn announced_by(node: Option<&ValkeyNode>) -> Option<(String, String)> {
    let ip = node?.spec.config.as_ref()?.get(ANNOUNCE)?.clone();
    Some((ip, config_port(node).unwrap_or_else(|| "0".to_owned())))
}

/// The client port a member's ValkeyNode announces, if it sets one.
fn config_port(node: Option<&ValkeyNode>) -> Option<String> {
    node?.spec.config.as_ref()?.get(ANNOUNCE_PORTS[0]).cloned()
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
/// (for NodePorts, the addresses of the Kubernetes nodes the `members` run on) and the DNS names
/// the spec gives.
pub fn certificate_names(
    access: Option<&ExternalAccess>,
    services: &BTreeMap<String, Service>,
    members: &[std::sync::Arc<ValkeyNode>],
) -> Vec<String> {
    let Some(access) = access else {
        return Vec::new();
    };
    let mut names: Vec<String> = match access.r#type {
        ExternalAccessType::LoadBalancer => services
            .values()
            .filter_map(|s| match address(Some(s)) {
                Address::Ip(ip) => Some(ip.to_string()),
                _ => None,
            })
            .collect(),
        ExternalAccessType::NodePort => members
            .iter()
            .filter_map(|n| n.status.as_ref()?.host_ip.clone())
            .collect(),
    };
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
        service(&owner, member_service_name(name), selector, &access(), name)
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

    fn node_port_access() -> ExternalAccess {
        serde_json::from_value(serde_json::json!({
            "type": "NodePort",
            "loadBalancerClass": "example.com/lb",
            "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "fixed": {"cache-0-0": {"nodePort": 30100}, "cache-0-1": {"loadBalancerIP": "10.213.255.9"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A member's ValkeyNode whose pod runs on the node at `host_ip`, with Valkey `version`.
    fn running(member: &DesiredMember, host_ip: &str, version: &str) -> Arc<ValkeyNode> {
        let mut node = member.node.clone();
        node.status = serde_json::from_value(serde_json::json!({
            "hostIP": host_ip, "podIP": "10.213.1.7", "valkeyVersion": version,
        }))
        .ok();
        Arc::new(node)
    }

    fn with_node_port(mut service: Service, port: i32) -> Service {
        if let Some(p) = service
            .spec
            .as_mut()
            .and_then(|s| s.ports.as_mut())
            .and_then(|p| p.first_mut())
        {
            p.node_port = Some(port);
        }
        service
    }

    fn setting(m: &DesiredMember, key: &str) -> Option<String> {
        m.node
            .spec
            .config
            .as_ref()
            .and_then(|c| c.get(key))
            .cloned()
    }

    #[test]
    fn a_node_port_service_has_no_load_balancer_fields_and_keeps_a_fixed_port() {
        let c = cluster(CLUSTER);
        let owner = Owner::of(&c, CLUSTER_LABEL).unwrap_or_else(|| panic!("no owner"));
        let access = node_port_access();
        let fixed = service(&owner, "a".into(), BTreeMap::new(), &access, "cache-0-0");
        let spec = fixed.spec.unwrap_or_default();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.load_balancer_class, None);
        assert_eq!(spec.load_balancer_source_ranges, None);
        assert_eq!(
            spec.ports.and_then(|p| p.first().and_then(|p| p.node_port)),
            Some(30100)
        );
        let mut load_balancer = access.clone();
        load_balancer.r#type = ExternalAccessType::LoadBalancer;
        let asked = service(
            &owner,
            "b".into(),
            BTreeMap::new(),
            &load_balancer,
            "cache-0-1",
        );
        let spec = asked.spec.unwrap_or_default();
        assert_eq!(spec.load_balancer_ip.as_deref(), Some("10.213.255.9"));
        assert_eq!(spec.load_balancer_class.as_deref(), Some("example.com/lb"));
        let other = service(
            &owner,
            "c".into(),
            BTreeMap::new(),
            &load_balancer,
            "cache-1-0",
        );
        assert_eq!(other.spec.and_then(|s| s.load_balancer_ip), None);
    }

    #[test]
    fn behind_node_ports_members_announce_their_nodes_address_and_port() {
        let c = cluster(CLUSTER);
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let (first, second) = (desired[0].name.clone(), desired[1].name.clone());
        let existing = vec![
            running(&desired[0], "10.213.1.1", "9.1.2"),
            running(&desired[1], "10.213.1.1", "9.1.2"),
        ];
        let services = BTreeMap::from([
            (
                member_service_name(&first),
                with_node_port(member_service(&first), 30100),
            ),
            (member_service_name(&second), member_service(&second)),
        ]);
        let problem = announce(
            &mut desired,
            Some(&node_port_access()),
            &services,
            &existing,
        );
        assert_eq!(announced(&desired[0]).as_deref(), Some("10.213.1.1"));
        for key in ANNOUNCE_PORTS {
            assert_eq!(setting(&desired[0], key).as_deref(), Some("30100"), "{key}");
        }
        assert_eq!(announced(&desired[1]), None, "no node port given yet");
        let problem = problem.unwrap_or_else(|| panic!("no problem while a port is pending"));
        assert_eq!(problem.reason, ADDRESS_PENDING);
        assert!(problem.message.contains(&member_service_name(&second)));
    }

    #[test]
    fn valkey_8_behind_a_node_port_announces_nothing_and_says_why() {
        let c = cluster(CLUSTER);
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let first = desired[0].name.clone();
        let existing = vec![running(&desired[0], "10.213.1.1", "8.0.4")];
        let services = BTreeMap::from([(
            member_service_name(&first),
            with_node_port(member_service(&first), 30100),
        )]);
        let problem = announce(
            &mut desired,
            Some(&node_port_access()),
            &services,
            &existing,
        )
        .unwrap_or_else(|| panic!("no problem"));
        assert_eq!(problem.reason, NODE_PORT_NEEDS_VALKEY_9);
        assert!(problem.message.contains(&first), "{}", problem.message);
        assert_eq!(announced(&desired[0]), None);

        // Before its server answered, its version is not known: nothing announced either (an
        // 8.0 server would not start with a client port in its valkey.conf).
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let mut unknown = (*running(&desired[0], "10.213.1.1", "")).clone();
        if let Some(status) = unknown.status.as_mut() {
            status.valkey_version = None;
        }
        let problem = announce(
            &mut desired,
            Some(&node_port_access()),
            &services,
            &[Arc::new(unknown)],
        )
        .unwrap_or_else(|| panic!("no problem"));
        assert_eq!(problem.reason, ADDRESS_PENDING);
        assert!(problem.message.contains("its server's version"));
        assert_eq!(announced(&desired[0]), None);
    }

    #[test]
    fn from_node_ports_to_load_balancers_the_port_goes_back_to_the_listening_one() {
        let c = cluster(CLUSTER);
        let mut desired = members(&c, &NodeAuth::of("cache"));
        let first = desired[0].name.clone();
        let mut was = desired[0].node.clone();
        let config = was.spec.config.get_or_insert_with(BTreeMap::new);
        config.insert(ANNOUNCE.to_owned(), "10.213.1.1".to_owned());
        for key in ANNOUNCE_PORTS {
            config.insert(key.to_owned(), "30100".to_owned());
        }
        let services = BTreeMap::from([(
            member_service_name(&first),
            with_ingress(member_service(&first), Some("10.213.255.4"), None),
        )]);
        let problem = announce(&mut desired, Some(&access()), &services, &[Arc::new(was)]);
        assert!(problem.is_some(), "the other members are pending");
        assert_eq!(announced(&desired[0]).as_deref(), Some("10.213.255.4"));
        for key in ANNOUNCE_PORTS {
            assert_eq!(setting(&desired[0], key).as_deref(), Some("0"), "{key}");
        }
        assert_eq!(
            setting(&desired[1], ANNOUNCE_PORTS[0]),
            None,
            "a member that never announced a port is not given the setting (Valkey 8 has none)"
        );
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
            certificate_names(Some(&access()), &services, &[]),
            ["*.valkey.example.com", "10.213.255.4"]
        );
        assert!(certificate_names(None, &services, &[]).is_empty());
    }
}
