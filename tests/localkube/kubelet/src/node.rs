//! Node registration and heartbeats: a Node per letter, its status, and a Lease renewed every 10 s.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::watch;

use crate::config::{FAULT_TESTS_KEY, NodeInfo, Settings};
use crate::node_faults::Stopped;

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const FIELD_MANAGER: &str = "localkube-kubelet";

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("API: {0}")]
    Api(#[from] kube::Error),
}

pub fn labels(node: &NodeInfo) -> BTreeMap<String, String> {
    let fault_tests = node.for_fault_tests.then_some((FAULT_TESTS_KEY, "true"));
    [
        ("kubernetes.io/hostname", node.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("topology.kubernetes.io/zone", node.zone.as_str()),
        ("topology.kubernetes.io/region", "local"),
        ("node.kubernetes.io/instance-type", "localkube"),
    ]
    .into_iter()
    .chain(fault_tests)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The taint that keeps every pod but a fault test's off a fault-test node.
pub fn fault_tests_taint() -> Taint {
    Taint {
        key: FAULT_TESTS_KEY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The node's taints with ours added when it is a fault-test node and the taint is missing;
/// `None` when nothing is to change (the node controller manages the others).
fn with_own_taint(node: &NodeInfo, existing: &Node) -> Option<Vec<Taint>> {
    let mut taints = existing
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !node.for_fault_tests || taints.iter().any(|t| t.key == FAULT_TESTS_KEY) {
        return None;
    }
    taints.push(fault_tests_taint());
    Some(taints)
}

fn resources() -> BTreeMap<String, Quantity> {
    [
        ("cpu", "32"),
        ("memory", "64Gi"),
        // A node's pod range holds 253 addresses (10.213.k.2-254).
        ("pods", "250"),
        ("ephemeral-storage", "100Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
    .collect()
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
    since: Timestamp,
) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
    }
}

/// The node's full status; `since` is when this kubelet became ready.
pub fn status(node: &NodeInfo, now: Timestamp, since: Timestamp) -> NodeStatus {
    NodeStatus {
        capacity: Some(resources()),
        allocatable: Some(resources()),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                now,
                since,
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                now,
                since,
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                now,
                since,
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
                now,
                since,
            ),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: node.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: node.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            operating_system: "linux".into(),
            os_image: "localkube".into(),
            kernel_version: kernel_version(),
            container_runtime_version: "localkube://0.1.0".into(),
            kubelet_version: "v1.36.3".into(),
            kube_proxy_version: String::new(),
            machine_id: node.name.clone(),
            system_uuid: node.name.clone(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            ..Default::default()
        }),
        phase: None,
        ..Default::default()
    }
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Creates the Node if missing and makes its labels and status what this kubelet reports.
pub async fn register(
    client: &kube::Client,
    node: &NodeInfo,
    since: Timestamp,
) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let wanted = Node {
        metadata: ObjectMeta {
            name: Some(node.name.clone()),
            labels: Some(labels(node)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: node.for_fault_tests.then(|| vec![fault_tests_taint()]),
            ..Default::default()
        }),
        status: None,
    };
    match api.create(&PostParams::default(), &wanted).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let patch = serde_json::json!({"metadata": {"labels": labels(node)}});
            let patched = api
                .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            if let Some(taints) = with_own_taint(node, &patched) {
                // The resourceVersion makes this a compare-and-swap with the node controller.
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": patched.metadata.resource_version},
                    "spec": {"taints": taints},
                });
                api.patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    heartbeat(client, node, since).await
}

/// Posts the node's status with fresh heartbeat times.
pub async fn heartbeat(
    client: &kube::Client,
    node: &NodeInfo,
    since: Timestamp,
) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({ "status": status(node, crate::pod::status::now(), since) });
    Ok(api
        .patch_status(
            &node.name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await?)
}

/// Creates or renews the node's Lease.
pub async fn renew_lease(client: &kube::Client, node: &Node) -> Result<(), NodeError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid: node.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.clone()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut body = serde_json::to_value(&lease).unwrap_or_default();
    body["apiVersion"] = "coordination.k8s.io/v1".into();
    body["kind"] = "Lease".into();
    api.patch(&name, &params, &Patch::Apply(&body)).await?;
    Ok(())
}

/// Keeps every node registered, its Lease renewed and its status posted, until shutdown. A node
/// stopped by a fault gets neither until it is back, and then both at once.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    mut faults: watch::Receiver<Stopped>,
    mut shutdown: watch::Receiver<bool>,
) {
    let since = crate::pod::status::now();
    let mut registered: BTreeMap<String, Node> = BTreeMap::new();
    let mut last_status = tokio::time::Instant::now();
    // Nodes that were stopped: their status must be posted before anything else is.
    let mut returning: BTreeSet<String> = BTreeSet::new();
    loop {
        let stopped = faults.borrow_and_update().clone();
        let post_status = last_status.elapsed() >= settings.node_status_period;
        for info in &settings.nodes {
            if stopped.contains_key(&info.name) {
                returning.insert(info.name.clone());
                continue;
            }
            let back = returning.contains(&info.name);
            let node = if post_status || back || !registered.contains_key(&info.name) {
                match register(&client, info, since).await {
                    Ok(n) => {
                        registered.insert(info.name.clone(), n.clone());
                        returning.remove(&info.name);
                        n
                    }
                    Err(e) => {
                        tracing::warn!(node = %info.name, error = %e, "registering node");
                        continue;
                    }
                }
            } else {
                match registered.get(&info.name) {
                    Some(n) => n.clone(),
                    None => continue,
                }
            };
            if let Err(e) = renew_lease(&client, &node).await {
                tracing::warn!(node = %info.name, error = %e, "renewing lease");
            }
        }
        if post_status {
            last_status = tokio::time::Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(LEASE_RENEW) => {}
            _ = faults.changed() => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reports_ready_with_addresses() -> Result<(), crate::config::ConfigError> {
        let nodes = crate::config::nodes(2, 1)?;
        let t = Timestamp::UNIX_EPOCH;
        let s = status(&nodes[1], t, t);
        let ready = s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(ready.map(|c| c.status), Some("True".to_string()));
        assert_eq!(
            s.addresses.unwrap_or_default()[0].address,
            "10.213.2.1".to_string()
        );
        assert_eq!(
            labels(&nodes[1])
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("zone-b")
        );
        assert!(!labels(&nodes[1]).contains_key(FAULT_TESTS_KEY));
        assert!(labels(&nodes[2]).contains_key(FAULT_TESTS_KEY));
        let untainted = Node::default();
        assert_eq!(with_own_taint(&nodes[1], &untainted), None);
        let added = with_own_taint(&nodes[2], &untainted).unwrap_or_default();
        assert_eq!(added, vec![fault_tests_taint()]);
        let tainted = Node {
            spec: Some(NodeSpec {
                taints: Some(added),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(with_own_taint(&nodes[2], &tainted), None);
        Ok(())
    }
}
