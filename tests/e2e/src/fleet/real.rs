//! The real fleet: `clusters` ValkeyClusters of three members each, real valkey-server pods,
//! all in one namespace under one node-controller and one cluster-controller process. Measured:
//! the time to Ready, the requests that took, the controllers at rest, and the requests to
//! create one more cluster once the fleet rests.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use valkey_api::v1alpha1::{ClusterState, ValkeyCluster, ValkeyNode};

use super::api_load::{Counts, Requests};
use super::rest::{self, ControllerAtRest, Settled};
use super::watched::Watched;
use super::{Profile, delete_namespace};
use crate::operator::{ControllerProcess, install_crds};
use crate::{Poll, Result, TestNamespace, wait_until};

/// One controller's requests over a span.
#[derive(Clone, Debug, Serialize)]
pub struct ControllerRequests {
    pub controller: String,
    pub requests: Requests,
    /// `requests` less what the controller sends at rest over as long a span (its rest rate
    /// times the span): the requests the change itself cost.
    pub reads_above_rest: f64,
    pub writes_above_rest: f64,
}

/// One cluster created while the fleet rests.
#[derive(Clone, Debug, Serialize)]
pub struct Creation {
    pub spec: String,
    /// From the apply to the cluster Ready with every shard ready.
    pub ready_seconds: f64,
    pub requests: Vec<ControllerRequests>,
}

/// The real fleet's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RealFleet {
    pub clusters: usize,
    pub spec: String,
    /// ValkeyNodes once every cluster was Ready.
    pub valkey_nodes: usize,
    /// From the apply of every cluster to the last one Ready.
    pub ready_seconds: f64,
    /// From the apply to the last of the fleet's pods Ready (its Ready condition's last
    /// transition, whole seconds), read once every cluster is Ready: how long the pods alone
    /// took, the operator's own work included up to each pod's creation.
    pub pods_ready_seconds: Option<f64>,
    /// `ready_seconds` over `pods_ready_seconds`: what the operator adds after the pods (goal:
    /// at most 1.2).
    pub ready_over_pods_ready: Option<f64>,
    /// Requests from the apply to Ready, per controller (no rest subtracted).
    pub formation_requests: Vec<ControllerRequests>,
    pub settled: Settled,
    pub rest_seconds: f64,
    pub at_rest: Vec<ControllerAtRest>,
    pub create: Creation,
}

/// Runs the real fleet in a namespace of its own, deleted (and waited for) at the end, whatever
/// happened.
pub async fn run(profile: &Profile) -> Result<RealFleet> {
    install_crds().await?;
    let ns = TestNamespace::create("fleet").await?;
    let measured = measure(profile, &ns).await;
    let deleted = delete_namespace(&ns, profile.deadline(profile.clusters * 3)).await;
    let figures = measured?;
    deleted?;
    Ok(figures)
}

fn cluster_ready(c: &ValkeyCluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.state == Some(ClusterState::Ready)
            && s.observed_generation == c.metadata.generation
            && s.ready_shards == c.spec.shards
    })
}

/// Applies a ValkeyCluster of `spec` for each name, in one `kubectl apply`.
async fn apply_clusters(ns: &TestNamespace, names: &[String], spec: &str) -> Result<()> {
    let manifest: Vec<String> = names
        .iter()
        .map(|name| {
            format!(
                "apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {{name: {name}}}\nspec: {spec}\n"
            )
        })
        .collect();
    ns.apply(&manifest.join("---\n")).await.map(|_| ())
}

/// Waits until every cluster of `names` is Ready (from the watch cache).
async fn wait_ready(
    clusters: &Watched<ValkeyCluster>,
    names: &[String],
    within: Duration,
) -> Result<()> {
    wait_until(within, &format!("{} clusters Ready", names.len()), || {
        let state = clusters.state();
        let ready = names
            .iter()
            .filter(|n| {
                state
                    .iter()
                    .any(|c| c.metadata.name.as_ref() == Some(*n) && cluster_ready(c))
            })
            .count();
        async move {
            Ok(if ready == names.len() {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{ready} of {} Ready", names.len()))
            })
        }
    })
    .await
}

/// Seconds from `applied_at` to the latest Ready transition of a pod of `ns` that is Ready now;
/// `None` when no pod is Ready.
async fn last_pod_ready(ns: &TestNamespace, applied_at: Timestamp) -> Result<Option<f64>> {
    let pods = ns.api::<Pod>().list(&Default::default()).await?.items;
    Ok(pods
        .iter()
        .filter_map(|pod| {
            let ready = pod
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?;
            let since = ready.last_transition_time.as_ref()?.0;
            Some(since.duration_since(applied_at).as_secs_f64())
        })
        .reduce(f64::max))
}

async fn counts(processes: &[&ControllerProcess]) -> Result<Vec<Counts>> {
    let mut all = Vec::new();
    for p in processes {
        all.push(Counts::of(p).await?);
    }
    Ok(all)
}

/// Each process's requests since `before`, less its rest rate over `elapsed` (when known).
async fn requests_since(
    processes: &[&ControllerProcess],
    before: &[Counts],
    elapsed: Duration,
    at_rest: Option<&[ControllerAtRest]>,
) -> Result<Vec<ControllerRequests>> {
    let minutes = elapsed.as_secs_f64() / 60.0;
    let mut out = Vec::new();
    for (i, (p, before)) in processes.iter().zip(before).enumerate() {
        let moved = Counts::of(p).await?.since(before);
        let rest = at_rest
            .and_then(|r| r.get(i))
            .map(|r| &r.requests_per_minute);
        out.push(ControllerRequests {
            controller: p.binary.clone(),
            reads_above_rest: moved.reads() - rest.map_or(0.0, |r| r.reads * minutes),
            writes_above_rest: moved.writes() - rest.map_or(0.0, |r| r.writes * minutes),
            requests: Requests::of(&moved),
        });
    }
    Ok(out)
}

async fn measure(profile: &Profile, ns: &TestNamespace) -> Result<RealFleet> {
    let mut node_controller = ControllerProcess::start("node-controller", ns, &[]).await?;
    let mut cluster_controller = ControllerProcess::start("cluster-controller", ns, &[]).await?;
    let clusters = Watched::start(ns.api::<ValkeyCluster>()).await?;
    let names: Vec<String> = (0..profile.clusters)
        .map(|i| format!("fleet-{i:03}"))
        .collect();
    let figures = {
        let processes = [&node_controller, &cluster_controller];
        let before = counts(&processes).await?;
        let applied = Instant::now();
        let applied_at = Timestamp::now();
        apply_clusters(ns, &names, &profile.cluster_spec).await?;
        wait_ready(&clusters, &names, profile.deadline(names.len() * 3)).await?;
        let ready = applied.elapsed();
        let pods_ready = last_pod_ready(ns, applied_at).await?;
        let formation = requests_since(&processes, &before, ready, None).await?;
        let valkey_nodes = ns
            .api::<ValkeyNode>()
            .list(&Default::default())
            .await?
            .items
            .len();
        println!(
            "fleet: {} clusters ({valkey_nodes} ValkeyNodes) Ready {:.1} s after the apply",
            names.len(),
            ready.as_secs_f64()
        );

        let settled = rest::settle(&processes, profile.quiet, profile.settle).await?;
        let goal = rest::rss_goal_mib(valkey_nodes);
        let at_rest = rest::measure(&processes, profile.rest, profile.sample_every, goal).await?;

        let created = vec!["fleet-created".to_owned()];
        let before = counts(&processes).await?;
        let applied = Instant::now();
        apply_clusters(ns, &created, &profile.create_spec).await?;
        wait_ready(&clusters, &created, profile.deadline(6)).await?;
        let create_ready = applied.elapsed();
        let create = Creation {
            spec: profile.create_spec.clone(),
            ready_seconds: create_ready.as_secs_f64(),
            requests: requests_since(&processes, &before, create_ready, Some(&at_rest)).await?,
        };
        RealFleet {
            clusters: names.len(),
            spec: profile.cluster_spec.clone(),
            valkey_nodes,
            ready_seconds: ready.as_secs_f64(),
            pods_ready_seconds: pods_ready,
            ready_over_pods_ready: pods_ready
                .filter(|p| *p > 0.0)
                .map(|p| ready.as_secs_f64() / p),
            formation_requests: formation,
            settled,
            rest_seconds: profile.rest.as_secs_f64(),
            at_rest,
            create,
        }
    };
    // The controllers stop before the namespace goes, so that none recreates what it deletes.
    node_controller.terminate().await?;
    cluster_controller.terminate().await?;
    Ok(figures)
}
