//! A simulated Kubernetes node, kwok-style, run by the test process itself so that it works on
//! any cluster: a Node object that no kubelet serves, whose pods run no process.
//!
//! It registers the Node (tainted [`TAINT_KEY`]`=true:NoSchedule`, so only pods that tolerate
//! it land there, with room for thousands of pods), keeps its Lease in `kube-node-lease` renewed
//! and its Ready condition fresh (or the node lifecycle controller would mark it NotReady after
//! its grace period and evict the pods), and watches the pods bound to it: each is marked Running
//! and Ready at once (conditions, container statuses, a pod IP), and each that gets a deletion
//! timestamp is deleted for good, as a kubelet does once the containers have stopped.
//!
//! Nothing answers at the pods' IP: whoever probes them (the node-controller's Valkey check) sees
//! them fail. [`SimulatedNode::stop`] removes the Node and its Lease; when the guard is dropped
//! without it (a failed test), the Node is deleted in the background, and the cluster's pod
//! garbage collector then removes any pod left bound to it.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::{E2eError, Poll, Result, kubeconfig_path, kubectl_program, wait_until};

/// The taint (and label) of a simulated node: only pods that tolerate it are placed there.
pub const TAINT_KEY: &str = "valkey.io/simulated";

/// The pod IP of every simulated pod unless `FLEET_SIM_POD_IP` names another. It lies inside
/// localkube's pod range (10.213.0.0/16, on the host's bridge) but beyond every node's block, so
/// on localkube a connection to it finds nobody (the host asks for it on the bridge and no one
/// answers) without leaving the host. One address for all pods keeps the host's neighbour table
/// at one entry however many pods there are: a few thousand distinct unanswered addresses would
/// overflow it (1024 entries by default) and disturb every pod on the host. On another cluster,
/// pick an address that routes nowhere there.
pub const DEFAULT_POD_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 255, 254);
/// The simulated node's own address (no kubelet listens there either).
const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 255, 253);

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;
/// Lease and status every 10 s, as a kubelet does: well within the lifecycle controller's grace
/// period (50 s on localkube, 40 s by default).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Pods handled at once: enough to keep up with a StatefulSet controller creating thousands.
const POD_WORKERS: usize = 16;

/// What the simulated node has done, for assertions and reports.
#[derive(Debug, Default)]
pub struct Activity {
    /// Pods marked Running and Ready.
    pub started: AtomicU64,
    /// Pods deleted after their deletion timestamp was set.
    pub terminated: AtomicU64,
    /// Calls to the API that failed, and the last failure.
    pub failures: AtomicU64,
    pub last_failure: Mutex<Option<String>>,
}

impl Activity {
    fn failed(&self, what: &str, e: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_failure.lock() {
            *last = Some(format!("{what}: {e}"));
        }
    }
}

/// A registered simulated node and the tasks that keep it alive. See the module's documentation.
pub struct SimulatedNode {
    pub name: String,
    pub pod_ip: Ipv4Addr,
    pub activity: Arc<Activity>,
    client: kube::Client,
    tasks: Vec<JoinHandle<()>>,
    /// The Node exists and is this guard's to remove (until [`SimulatedNode::stop`] has).
    registered: bool,
}

impl SimulatedNode {
    /// Registers the Node `name` (its Ready status and Lease included) and starts serving its
    /// pods. Returns once the Node is Ready.
    pub async fn start(name: &str) -> Result<Self> {
        let client = crate::client().await?;
        let pod_ip = std::env::var("FLEET_SIM_POD_IP")
            .ok()
            .and_then(|ip| ip.parse().ok())
            .unwrap_or(DEFAULT_POD_IP);
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    TAINT_KEY: "true",
                },
            },
            "spec": {"taints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
        }))
        .map_err(|e| E2eError::Check(format!("the simulated Node: {e}")))?;
        let created = nodes.create(&PostParams::default(), &node).await?;
        let activity = Arc::new(Activity::default());
        // From here on the guard owns the Node: a failure below removes it on drop.
        let mut simulated = Self {
            name: name.to_owned(),
            pod_ip,
            activity: activity.clone(),
            client: client.clone(),
            tasks: Vec::new(),
            registered: true,
        };
        let since = Timestamp::now();
        post_status(&client, name, since).await?;
        renew_lease(&client, &created).await?;
        simulated.tasks.push(tokio::spawn(heartbeat(
            client.clone(),
            created,
            since,
            activity.clone(),
        )));
        simulated.tasks.push(tokio::spawn(serve_pods(
            client.clone(),
            name.to_owned(),
            pod_ip,
            activity,
        )));
        wait_until(
            Duration::from_secs(60),
            &format!("the simulated Node {name} Ready"),
            || {
                let nodes = nodes.clone();
                async move {
                    let node = nodes.get(name).await?;
                    Ok(if node_ready(&node) {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(format!("{:?}", node.status.map(|s| s.conditions)))
                    })
                }
            },
        )
        .await?;
        Ok(simulated)
    }

    /// Tolerations a pod needs to be placed on a simulated node.
    pub fn tolerations() -> serde_json::Value {
        json!([{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}])
    }

    /// A node selector that places a pod on this node only.
    pub fn node_selector(&self) -> serde_json::Value {
        json!({"kubernetes.io/hostname": self.name})
    }

    /// Stops serving, deletes the Node and its Lease, and waits until the Node is gone.
    pub async fn stop(mut self) -> Result<()> {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.registered = false;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        for result in [
            nodes
                .delete(&self.name, &DeleteParams::default())
                .await
                .map(|_| ()),
            leases
                .delete(&self.name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ] {
            match result {
                Ok(()) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let name = self.name.clone();
        wait_until(
            Duration::from_secs(60),
            &format!("the simulated Node {name} gone"),
            || {
                let nodes = nodes.clone();
                let name = name.clone();
                async move {
                    Ok(match nodes.get_opt(&name).await? {
                        None => Poll::Ready(()),
                        Some(_) => Poll::NotYet("still there".into()),
                    })
                }
            },
        )
        .await
    }
}

impl Drop for SimulatedNode {
    /// Without [`SimulatedNode::stop`] (a test that failed half-way): stop serving and delete
    /// the Node and its Lease in the background. Drop cannot await, so kubectl does it.
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        if !self.registered {
            return;
        }
        let kubeconfig = kubeconfig_path().unwrap_or_default();
        for args in [
            vec!["delete", "node", self.name.as_str(), "--wait=false"],
            vec![
                "delete",
                "lease",
                "-n",
                LEASE_NAMESPACE,
                self.name.as_str(),
                "--wait=false",
            ],
        ] {
            let _ = std::process::Command::new(kubectl_program())
                .args(&args)
                .env("KUBECONFIG", &kubeconfig)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node's status: Ready, no pressure, an address, and room for many pods.
async fn post_status(client: &kube::Client, name: &str, since: Timestamp) -> kube::Result<()> {
    let now = Timestamp::now();
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({
            "type": type_, "status": status, "reason": reason,
            "message": "simulated by the fleet benchmark",
            "lastHeartbeatTime": Time(now), "lastTransitionTime": Time(since),
        })
    };
    let room =
        json!({"cpu": "1000", "memory": "4Ti", "pods": "10000", "ephemeral-storage": "10Ti"});
    let status = json!({
        "status": {
            "capacity": room,
            "allocatable": room,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP.to_string()},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "simulated",
                "kernelVersion": "", "containerRuntimeVersion": "simulated://0",
                "kubeletVersion": "v1.36.0", "kubeProxyVersion": "", "machineID": name,
                "systemUUID": name, "bootID": name,
            },
        }
    });
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await?;
    Ok(())
}

/// Creates or renews the node's Lease (owned by the Node, so it goes with it).
async fn renew_lease(client: &kube::Client, node: &Node) -> kube::Result<()> {
    let name = node.name_any();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name,
                "uid": node.metadata.uid.clone().unwrap_or_default(),
            }],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": MicroTime(Timestamp::now()),
        },
    });
    Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .patch(
            &name,
            &PatchParams::apply("e2e-simulated-node").force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}

/// Renews the Lease and posts the status every [`HEARTBEAT`] until aborted; a failed beat is
/// counted and tried again at the next.
async fn heartbeat(client: kube::Client, node: Node, since: Timestamp, activity: Arc<Activity>) {
    let name = node.name_any();
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        if let Err(e) = renew_lease(&client, &node).await {
            activity.failed("renewing the Lease", &e);
        }
        if let Err(e) = post_status(&client, &name, since).await {
            activity.failed("posting the Node status", &e);
        }
    }
}

/// Watches the pods bound to the node (in every namespace) and acts on each: see
/// [`act_on_pod`]. The watcher lists again after any error, so a restarted API server loses
/// nothing.
async fn serve_pods(client: kube::Client, node: String, pod_ip: Ipv4Addr, activity: Arc<Activity>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    watcher(pods, config)
        .default_backoff()
        .applied_objects()
        .for_each_concurrent(POD_WORKERS, |event| {
            let (client, activity) = (client.clone(), activity.clone());
            async move {
                match event {
                    Ok(pod) => act_on_pod(&client, &pod, pod_ip, &activity).await,
                    Err(e) => activity.failed("watching the node's pods", &e),
                }
            }
        })
        .await;
}

/// A pod being deleted is deleted for good (its containers "stopped" at once); a pod not yet
/// Running and Ready on the simulated IP is marked so; anything else needs nothing.
async fn act_on_pod(client: &kube::Client, pod: &Pod, pod_ip: Ipv4Addr, activity: &Activity) {
    let Some(namespace) = pod.namespace() else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let name = pod.name_any();
    if pod.metadata.deletion_timestamp.is_some() {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: pod.uid().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                activity.terminated.fetch_add(1, Ordering::Relaxed);
            }
            // Gone already, or a newer pod of the same name (the precondition failed).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => activity.failed(&format!("deleting pod {namespace}/{name}"), &e),
        }
        return;
    }
    if is_started(pod, pod_ip) || is_finished(pod) {
        return;
    }
    let status = running_status(pod, pod_ip, Timestamp::now());
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
    {
        Ok(_) => {
            activity.started.fetch_add(1, Ordering::Relaxed);
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => activity.failed(&format!("starting pod {namespace}/{name}"), &e),
    }
}

fn is_started(pod: &Pod, pod_ip: Ipv4Addr) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status.and_then(|s| s.pod_ip.as_deref()) == Some(pod_ip.to_string().as_str())
        && crate::pod_ready(pod)
}

fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The status a kubelet reports for a pod whose containers all started and passed their
/// probes: a strategic merge patch of `pods/status` (conditions merge by type, so the
/// scheduler's PodScheduled stays).
pub fn running_status(pod: &Pod, pod_ip: Ipv4Addr, now: Timestamp) -> serde_json::Value {
    let uid = pod.uid().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let running = json!({"running": {"startedAt": Time(now)}});
    let status_of = |c: &k8s_openapi::api::core::v1::Container, state: &serde_json::Value| {
        let image = c.image.clone().unwrap_or_default();
        json!({
            "name": c.name,
            "image": image,
            "imageID": format!("simulated://{image}"),
            "containerID": format!("simulated://{uid}/{}", c.name),
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": state,
        })
    };
    let containers: Vec<_> = spec
        .containers
        .iter()
        .map(|c| status_of(c, &running))
        .collect();
    // Init containers have run to completion, except sidecars (restartPolicy Always), which run.
    let completed = json!({"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": Time(now), "finishedAt": Time(now),
    }});
    let init: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            status_of(c, if sidecar { &running } else { &completed })
        })
        .collect();
    let condition =
        |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": Time(now)});
    json!({
        "status": {
            "phase": "Running",
            "hostIP": NODE_IP.to_string(),
            "hostIPs": [{"ip": NODE_IP.to_string()}],
            "podIP": pod_ip.to_string(),
            "podIPs": [{"ip": pod_ip.to_string()}],
            "startTime": Time(now),
            "conditions": [
                condition("PodReadyToStartContainers"),
                condition("Initialized"),
                condition("ContainersReady"),
                condition("Ready"),
            ],
            "containerStatuses": containers,
            "initContainerStatuses": init,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_pod_is_running_and_ready_on_the_simulated_ip() -> Result<()> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {
                "containers": [{"name": "valkey", "image": "valkey/valkey:9.1"}],
                "initContainers": [
                    {"name": "setup", "image": "busybox"},
                    {"name": "exporter", "image": "exporter", "restartPolicy": "Always"},
                ],
            },
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }))
        .map_err(|e| E2eError::Check(e.to_string()))?;
        let ip = DEFAULT_POD_IP;
        crate::check(!is_started(&pod, ip), "a pending pod counts as started")?;
        let patch = running_status(&pod, ip, Timestamp::UNIX_EPOCH);
        // Apply the patch as the API server would (conditions by type, lists of statuses whole).
        let mut merged = serde_json::to_value(&pod).map_err(|e| E2eError::Check(e.to_string()))?;
        let mut conditions = merged["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.extend(
            patch["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        for (k, v) in patch["status"].as_object().cloned().unwrap_or_default() {
            merged["status"][k] = v;
        }
        merged["status"]["conditions"] = json!(conditions);
        let started: Pod =
            serde_json::from_value(merged).map_err(|e| E2eError::Check(e.to_string()))?;
        crate::check(is_started(&started, ip), "the patched pod is not started")?;
        let status = started.status.unwrap_or_default();
        let valkey = &status.container_statuses.unwrap_or_default()[0];
        crate::check(
            valkey.ready && valkey.state.as_ref().is_some_and(|s| s.running.is_some()),
            "the valkey container is not running and ready",
        )?;
        let init = status.init_container_statuses.unwrap_or_default();
        crate::check(
            init[0]
                .state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some())
                && init[1].state.as_ref().is_some_and(|s| s.running.is_some()),
            format!("init containers: {init:?}"),
        )
    }
}
