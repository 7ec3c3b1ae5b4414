//! A fleet at rest costs the API server no write: a healthy ValkeyCluster and ValkeyNodes whose
//! servers do not answer (pods on a simulated node, nothing behind their IP), under one
//! node-controller and one cluster-controller, settle, and then for a minute neither controller
//! writes anything: no status, no workload, no policy, no Secret, no Event.
//!
//! The Leases are counted apart: each controller's leader election renews its Lease, and the
//! cluster-controller keeps one heartbeat per namespace, by design; what grows with the fleet
//! must not write, so the cluster's own claim Lease (written once, when taken) must keep its
//! version through the minute. What the Leases cost is printed beside the verdict.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::cluster::ClusterFixture;
use e2e::fleet::api_load::Counts;
use e2e::fleet::rest;
use e2e::fleet::simulated_node::SimulatedNode;
use e2e::operator::ControllerProcess;
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;
use valkey_api::v1alpha1::ValkeyNode;

/// The ValkeyNodes whose servers do not answer.
const DOWN: usize = 10;
/// How long without a write (Leases aside) counts as settled, and the longest wait for it.
const QUIET: Duration = Duration::from_secs(10);
const SETTLE_WITHIN: Duration = Duration::from_secs(60);
/// The quiet minute.
const REST: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_at_rest_writes_nothing_healthy_or_with_its_servers_down() -> Result<()> {
    let c = ClusterFixture::start(
        "at-rest",
        "rest",
        "{shards: 1, replicas: 1, persistence: {enabled: false}}",
    )
    .await?;
    let node = SimulatedNode::start(&format!("{}-node", c.ns.name)).await?;
    let outcome = at_rest(&c, &node).await;
    let deleted = e2e::fleet::delete_namespace(&c.ns, Duration::from_secs(180)).await;
    let stopped = node.stop().await;
    outcome?;
    deleted?;
    stopped
}

async fn at_rest(c: &ClusterFixture, node: &SimulatedNode) -> Result<()> {
    let nodes = c.ns.api::<ValkeyNode>();
    for i in 0..DOWN {
        let object: ValkeyNode = serde_json::from_value(json!({
            "apiVersion": "valkey.io/v1alpha1",
            "kind": "ValkeyNode",
            "metadata": {"name": format!("down-{i}")},
            "spec": {
                "image": "valkey/valkey:9.1",
                "tolerations": SimulatedNode::tolerations(),
                "nodeSelector": node.node_selector(),
            },
        }))
        .map_err(|e| E2eError::Check(format!("a ValkeyNode: {e}")))?;
        nodes.create(&PostParams::default(), &object).await?;
    }
    c.wait_ready(Duration::from_secs(240)).await?;
    let pods = c.ns.api::<Pod>();
    wait_until(
        Duration::from_secs(120),
        "every down node's pod running and named",
        || {
            let (nodes, pods) = (nodes.clone(), pods.clone());
            async move {
                let named = nodes
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .filter(|n| {
                        n.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("down-"))
                    })
                    .filter(|n| n.status.as_ref().is_some_and(|s| s.pod_ip.is_some()))
                    .count();
                let running = pods
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.contains("down-"))
                    })
                    .filter(|p| e2e::pod_ready(p))
                    .count();
                Ok(if named == DOWN && running == DOWN {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{running} pods running, {named} nodes name theirs"))
                })
            }
        },
    )
    .await?;

    let processes = [&c.node_controller, &c.cluster_controller];
    let settled = rest::settle(&processes, QUIET, SETTLE_WITHIN)
        .await?
        .seconds;
    let leases = c.ns.api::<Lease>();
    let claim = format!("{}-cluster-controller", c.name);
    let claim_version = |lease: Lease| lease.metadata.resource_version;
    let claim_before = claim_version(leases.get(&claim).await?);
    let before = counts(&processes).await?;
    let start = Instant::now();
    // The minute is the span being measured, not a wait for a condition.
    tokio::time::sleep(REST).await;
    let after = counts(&processes).await?;
    let claim_after = claim_version(leases.get(&claim).await?);
    let mut writes = BTreeMap::new();
    let mut leases = BTreeMap::new();
    let mut reads = BTreeMap::new();
    for ((p, before), after) in processes.iter().zip(&before).zip(&after) {
        for (line, n) in after.since(before).lines() {
            let Some((verb, resource)) = line.split_once(' ') else {
                continue;
            };
            if ["GET", "LIST", "WATCH"].contains(&verb) {
                reads.insert(format!("{} {line}", p.binary), n);
                continue;
            }
            let into = if resource == "leases" {
                &mut leases
            } else {
                &mut writes
            };
            into.insert(format!("{} {line}", p.binary), n);
        }
    }
    println!(
        "at rest ({settled:.0} s to settle, {:.0} s measured): writes {writes:?}; Lease renewals {leases:?}; reads {reads:?}",
        start.elapsed().as_secs_f64()
    );
    check(
        writes.is_empty(),
        format!("the controllers wrote at rest: {writes:?}"),
    )?;
    check(
        claim_before == claim_after,
        format!(
            "the cluster's claim Lease {claim} was written at rest: {claim_before:?} → {claim_after:?}"
        ),
    )
}

async fn counts(processes: &[&ControllerProcess]) -> Result<Vec<Counts>> {
    let mut all = Vec::new();
    for p in processes {
        all.push(Counts::of(p).await?);
    }
    Ok(all)
}
