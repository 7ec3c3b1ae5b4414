//! The simulated fleet: `simulated` ValkeyNodes whose pods run on a [`SimulatedNode`] (marked
//! Running and Ready, no process behind them), under the node-controller alone. Measured: the
//! time until every pod runs and every ValkeyNode names its pod and IP, the node-controller at
//! rest, and the time for a spec change of every ValkeyNode to reach every StatefulSet (and
//! every pod).
//!
//! No server answers at the pods' IP, so the node-controller's Valkey check fails for each and
//! no ValkeyNode is ready: the figures say so rather than pretend otherwise. What the
//! node-controller does per pass (render, apply what changed, ask Valkey, report) is the same
//! work either way, except that a ready node is re-read every 10 s and one that is not every
//! 5 s (30 s once it has been not ready for a minute), each after its Valkey check times out.

use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::json;
use valkey_api::v1alpha1::ValkeyNode;

use super::api_load::{Counts, Requests};
use super::changed;
use super::rest::{self, ControllerAtRest, Settled};
use super::simulated_node::SimulatedNode;
use super::watched::Watched;
use super::{Profile, delete_namespace};
use crate::operator::{ControllerProcess, install_crds};
use crate::{E2eError, Poll, Result, TestNamespace, wait_until};

/// The annotation the spec change adds to every pod template.
const CHANGE_ANNOTATION: &str = "fleet.valkey.io/change";
/// Requests the test sends at once when it creates or patches every ValkeyNode.
const AT_ONCE: usize = 16;

/// What the node-controller says of a ValkeyNode whose pod runs on the simulated node.
#[derive(Clone, Debug, Serialize)]
pub struct NotReady {
    /// ValkeyNodes reporting ready (none is expected: nothing answers at the IP).
    pub valkey_nodes_ready: usize,
    /// The Ready condition's reason and message on one of them.
    pub reason: String,
    pub message: String,
}

/// The spec change: a pod annotation added to every ValkeyNode.
#[derive(Clone, Debug, Serialize)]
pub struct SpecChange {
    /// How long the test took to send every patch.
    pub patch_seconds: f64,
    /// From the first patch to every StatefulSet's pod template carrying the change.
    pub workloads_seconds: f64,
    /// From the first patch to every pod replaced by one that carries it, Running and Ready
    /// (the StatefulSet controller's and the scheduler's pace, mostly).
    pub pods_seconds: f64,
}

/// What the simulated node did.
#[derive(Clone, Debug, Serialize)]
pub struct NodeActivity {
    pub node: String,
    pub pod_ip: String,
    pub pods_started: u64,
    pub pods_terminated: u64,
    pub api_failures: u64,
    pub last_failure: Option<String>,
}

/// The simulated fleet's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SimulatedFleet {
    pub valkey_nodes: usize,
    /// From the first create to every pod Running and Ready and every ValkeyNode reporting its
    /// pod's name and IP.
    pub pods_running_seconds: f64,
    /// The node-controller's requests from the first create to then.
    pub formation_requests: Requests,
    pub not_ready: NotReady,
    pub settled: Settled,
    pub rest_seconds: f64,
    pub at_rest: ControllerAtRest,
    /// The ValkeyNodes the writes at rest changed, and how (see [`changed`]).
    pub changed_at_rest: changed::Changed,
    /// `None` when the run skipped it (`FLEET_SPEC_CHANGE=0`).
    pub spec_change: Option<SpecChange>,
    pub node: NodeActivity,
}

/// Runs the simulated fleet: its namespace and its Node are removed at the end (and waited
/// for), whatever happened.
pub async fn run(profile: &Profile) -> Result<SimulatedFleet> {
    install_crds().await?;
    let ns = TestNamespace::create("fleet-sim").await?;
    let node = SimulatedNode::start(&format!("{}-node", ns.name)).await?;
    let measured = measure(profile, &ns, &node).await;
    // The node serves on until its pods are gone with the namespace, then goes itself.
    let deleted = delete_namespace(&ns, profile.deadline(profile.simulated)).await;
    let activity = activity(&node);
    let stopped = node.stop().await;
    let mut figures = measured?;
    deleted?;
    stopped?;
    figures.node = activity;
    Ok(figures)
}

fn activity(node: &SimulatedNode) -> NodeActivity {
    use std::sync::atomic::Ordering::Relaxed;
    let a = &node.activity;
    NodeActivity {
        node: node.name.clone(),
        pod_ip: node.pod_ip.to_string(),
        pods_started: a.started.load(Relaxed),
        pods_terminated: a.terminated.load(Relaxed),
        api_failures: a.failures.load(Relaxed),
        last_failure: a.last_failure.lock().ok().and_then(|l| l.clone()),
    }
}

/// A pod the simulated node has started, and that is not on its way out.
fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && crate::pod_ready(pod)
}

/// Whether `annotations` carry the change `change`.
fn carries(annotations: Option<&std::collections::BTreeMap<String, String>>, change: &str) -> bool {
    annotations
        .and_then(|a| a.get(CHANGE_ANNOTATION))
        .is_some_and(|v| v == change)
}

/// Sends `request` for each of `names`, [`AT_ONCE`] at a time.
async fn for_each_node<F, Fut>(names: &[String], request: F) -> Result<()>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    futures::stream::iter(names.iter().cloned().map(request))
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

async fn measure(
    profile: &Profile,
    ns: &TestNamespace,
    node: &SimulatedNode,
) -> Result<SimulatedFleet> {
    let mut node_controller = ControllerProcess::start("node-controller", ns, &[]).await?;
    let nodes = ns.api::<ValkeyNode>();
    let valkey_nodes = Watched::start(nodes.clone()).await?;
    let pods = Watched::start(ns.api::<Pod>()).await?;
    let workloads = Watched::start(ns.api::<StatefulSet>()).await?;
    let names: Vec<String> = (0..profile.simulated)
        .map(|i| format!("sim-{i:04}"))
        .collect();
    let deadline = profile.deadline(names.len());
    let wanted = names.len();

    let before = Counts::of(&node_controller).await?;
    let started = Instant::now();
    let spec = json!({
        "image": profile.simulated_image,
        "tolerations": SimulatedNode::tolerations(),
        "nodeSelector": node.node_selector(),
    });
    for_each_node(&names, |name| {
        let (nodes, spec) = (nodes.clone(), spec.clone());
        async move {
            let object: ValkeyNode = serde_json::from_value(json!({
                "apiVersion": "valkey.io/v1alpha1",
                "kind": "ValkeyNode",
                "metadata": {"name": name},
                "spec": spec,
            }))
            .map_err(|e| E2eError::Check(format!("a simulated ValkeyNode: {e}")))?;
            nodes.create(&PostParams::default(), &object).await?;
            Ok(())
        }
    })
    .await?;
    wait_until(deadline, "every simulated pod running and reported", || {
        let (pods, nodes) = (pods.state(), valkey_nodes.state());
        let running = pods.iter().filter(|p| running(p)).count();
        let reported = nodes
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.pod_ip.is_some() && s.pod_name.is_some())
            })
            .count();
        async move {
            Ok(if running == wanted && reported == wanted {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!(
                    "{running} of {wanted} pods running, {reported} ValkeyNodes name their pod"
                ))
            })
        }
    })
    .await?;
    let pods_running = started.elapsed();
    let formation_requests = Requests::of(&Counts::of(&node_controller).await?.since(&before));
    println!(
        "fleet: {wanted} simulated pods running, every ValkeyNode naming its pod, {:.1} s after the first create",
        pods_running.as_secs_f64()
    );
    let not_ready = not_ready(&valkey_nodes.state());

    let processes = [&node_controller];
    let settled = rest::settle(&processes, profile.quiet, profile.settle).await?;
    let before_rest = changed::snapshot(&valkey_nodes.state());
    let goal = rest::rss_goal_mib(wanted);
    let mut at_rest = rest::measure(&processes, profile.rest, profile.sample_every, goal).await?;
    let changed_at_rest = changed::between(&before_rest, &changed::snapshot(&valkey_nodes.state()));
    let at_rest = at_rest
        .pop()
        .ok_or_else(|| E2eError::Check("no figures of the node-controller at rest".into()))?;

    let spec_change = if profile.spec_change {
        let change = format!("{}", started.elapsed().as_millis());
        Some(roll(&names, &nodes, &workloads, &pods, &change, deadline).await?)
    } else {
        None
    };
    node_controller.terminate().await?;
    Ok(SimulatedFleet {
        valkey_nodes: wanted,
        pods_running_seconds: pods_running.as_secs_f64(),
        formation_requests,
        not_ready,
        settled,
        rest_seconds: profile.rest.as_secs_f64(),
        at_rest,
        changed_at_rest,
        spec_change,
        node: activity(node),
    })
}

/// The spec change: `change` as a pod annotation on every ValkeyNode of `names`, then the waits
/// until every StatefulSet's template and every pod carries it.
async fn roll(
    names: &[String],
    nodes: &kube::Api<ValkeyNode>,
    workloads: &Watched<StatefulSet>,
    pods: &Watched<Pod>,
    change: &str,
    deadline: std::time::Duration,
) -> Result<SpecChange> {
    let wanted = names.len();
    let patch = json!({"spec": {"podAnnotations": {CHANGE_ANNOTATION: change}}});
    let patched_from = Instant::now();
    for_each_node(names, |name| {
        let (nodes, patch) = (nodes.clone(), patch.clone());
        async move {
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        }
    })
    .await?;
    let patch_seconds = patched_from.elapsed().as_secs_f64();
    wait_until(deadline, "every StatefulSet carrying the change", || {
        let carrying = workloads
            .state()
            .iter()
            .filter(|s| {
                carries(
                    s.spec
                        .as_ref()
                        .and_then(|s| s.template.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref()),
                    change,
                )
            })
            .count();
        async move {
            Ok(if carrying == wanted {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{carrying} of {wanted} StatefulSets"))
            })
        }
    })
    .await?;
    let workloads_seconds = patched_from.elapsed().as_secs_f64();
    wait_until(
        deadline,
        "every pod replaced by one carrying the change",
        || {
            let carrying = pods
                .state()
                .iter()
                .filter(|p| running(p) && carries(p.metadata.annotations.as_ref(), change))
                .count();
            async move {
                Ok(if carrying == wanted {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{carrying} of {wanted} pods"))
                })
            }
        },
    )
    .await?;
    let spec_change = SpecChange {
        patch_seconds,
        workloads_seconds,
        pods_seconds: patched_from.elapsed().as_secs_f64(),
    };
    println!(
        "fleet: a pod annotation on {wanted} ValkeyNodes reached every StatefulSet in {:.1} s, every pod in {:.1} s",
        spec_change.workloads_seconds, spec_change.pods_seconds
    );
    Ok(spec_change)
}

/// How many ValkeyNodes report ready, and what the first that does not says.
fn not_ready(nodes: &[std::sync::Arc<ValkeyNode>]) -> NotReady {
    let ready = nodes
        .iter()
        .filter(|n| n.status.as_ref().is_some_and(|s| s.ready))
        .count();
    let condition = nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.conditions.as_ref())
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status != "True");
    NotReady {
        valkey_nodes_ready: ready,
        reason: condition.map(|c| c.reason.clone()).unwrap_or_default(),
        message: condition.map(|c| c.message.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_runs_until_it_is_deleted() -> Result<()> {
        let pod = |deleting: bool| -> Result<Pod> {
            let mut meta = json!({"name": "p"});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(json!({
                "metadata": meta,
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .map_err(|e| E2eError::Check(e.to_string()))
        };
        crate::check(running(&pod(false)?), "a running pod")?;
        crate::check(!running(&pod(true)?), "a pod being deleted")
    }
}
