//! Item 4: raising `persistence.size` grows every member's volume in place, with its data and no
//! restart; shrinking is refused; a class that cannot grow is said in the node's status, and
//! nothing else changes.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::ClusterFixture;
use e2e::node::{NodeFixture, READY, condition_parts};
use e2e::{E2eError, Poll, Result, TestNamespace, check, wait_until};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const FORM: Duration = Duration::from_secs(240);
/// The storage's resizer, then the node-controller's next pass (every 10 s) to report it.
const GROW: Duration = Duration::from_secs(120);

/// Every pod of the cluster: (uid, restart count) by name.
async fn pods(c: &ClusterFixture) -> Result<BTreeMap<String, (String, i32)>> {
    let list =
        c.ns.api::<Pod>()
            .list(&ListParams::default().labels(&format!("valkey.io/cluster={}", c.name)))
            .await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            (p.name_any(), (p.uid().unwrap_or_default(), restarts))
        })
        .collect())
}

fn storage(
    q: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> String {
    q.and_then(|m| m.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

/// (request, capacity) of a claim.
fn sizes(pvc: &PersistentVolumeClaim) -> (String, String) {
    (
        storage(
            pvc.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        ),
        storage(pvc.status.as_ref().and_then(|s| s.capacity.as_ref())),
    )
}

/// The condition in which a node reports its volume.
const PVC_READY: &str = "PersistentVolumeClaimReady";

#[tokio::test(flavor = "multi_thread")]
async fn raising_the_size_grows_every_volume_in_place_keeping_data_and_pods() -> Result<()> {
    let c = ClusterFixture::start("d2-grow", "grow", "{shards: 2, replicas: 1}").await?;
    c.wait_ready(FORM).await?;
    let keys = c.write_keys("grow", 200).await?;
    let before = pods(&c).await?;
    check(before.len() == 4, format!("pods: {before:?}"))?;
    let revisions: BTreeMap<String, Option<String>> = c
        .nodes()
        .await?
        .into_iter()
        .map(|n| (n.name_any(), n.status.and_then(|s| s.desired_revision)))
        .collect();

    let claims = c.ns.api::<PersistentVolumeClaim>();
    let initial: Vec<(String, String)> = claims
        .list(&ListParams::default().labels("valkey.io/node"))
        .await?
        .items
        .iter()
        .map(sizes)
        .collect();
    check(
        initial.len() == 4 && initial.iter().all(|(r, c)| r == "1Gi" && c == "1Gi"),
        format!("the claims before: {initial:?}"),
    )?;

    c.patch_spec(json!({"persistence": {"size": "2Gi"}}))
        .await?;
    let started = std::time::Instant::now();
    wait_until(GROW, "every member's claim asks for and holds 2Gi", || {
        let claims = claims.clone();
        async move {
            let list = claims
                .list(&ListParams::default().labels("valkey.io/node"))
                .await?;
            let not_yet: Vec<String> = list
                .items
                .iter()
                .map(|p| (p.name_any(), sizes(p)))
                .filter(|(_, (request, capacity))| request != "2Gi" || capacity != "2Gi")
                .map(|(name, (request, capacity))| format!("{name}: {request}/{capacity}"))
                .collect();
            Ok(if list.items.len() == 4 && not_yet.is_empty() {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!(
                    "{} claims; {}",
                    list.items.len(),
                    not_yet.join(", ")
                ))
            })
        }
    })
    .await?;
    eprintln!(
        "MEASURE volumes: 4 claims grown to 2Gi in {:.1?}",
        started.elapsed()
    );

    // Every node says its volume is bound again (not growing), on the same revision.
    wait_until(GROW, "every node reports its volume Bound", || async {
        let nodes = c.nodes().await?;
        let growing: Vec<String> = nodes
            .iter()
            .filter_map(|n| {
                let (status, reason, message) = condition_parts(n, PVC_READY).unwrap_or_default();
                (status != "True" || reason != "Bound")
                    .then(|| format!("{}: {reason}: {message}", n.name_any()))
            })
            .collect();
        Ok(if nodes.len() == 4 && growing.is_empty() {
            Poll::Ready(nodes)
        } else {
            Poll::NotYet(growing.join("; "))
        })
    })
    .await?;
    c.wait_ready(Duration::from_secs(60)).await?;
    let after = pods(&c).await?;
    check(
        after == before,
        format!("pods were replaced or restarted: before {before:?}, after {after:?}"),
    )?;
    let revisions_after: BTreeMap<String, Option<String>> = c
        .nodes()
        .await?
        .into_iter()
        .map(|n| (n.name_any(), n.status.and_then(|s| s.desired_revision)))
        .collect();
    check(
        revisions_after == revisions,
        format!("the size changed a revision: {revisions:?} -> {revisions_after:?}"),
    )?;
    c.verify(&keys).await?;

    // Shrinking is refused by the API server, naming the field; nothing changes.
    match c.patch_spec(json!({"persistence": {"size": "1Gi"}})).await {
        Err(E2eError::Api(kube::Error::Api(status)))
            if status.code == 422 && status.message.contains("persistence.size") =>
        {
            check(
                status.message.contains("never shrink"),
                format!("the refusal does not say why: {}", status.message),
            )?
        }
        other => {
            return Err(E2eError::Check(format!(
                "shrinking the volume: expected a 422 naming persistence.size, got {other:?}"
            )));
        }
    }
    check(pods(&c).await? == before, "a refused shrink touched a pod")
}

/// A StorageClass of localkube's provisioner (or the default class's, elsewhere) that does not
/// allow expansion, named after the test's namespace; deleted at the end of the test.
async fn class_without_expansion(ns: &TestNamespace) -> Result<String> {
    let classes: Api<StorageClass> = Api::all(e2e::client().await?);
    let provisioner = if e2e::is_localkube() {
        "localkube.io/hostpath".to_owned()
    } else {
        let list = classes.list(&ListParams::default()).await?;
        list.items
            .into_iter()
            .find(|c| {
                c.annotations()
                    .get("storageclass.kubernetes.io/is-default-class")
                    .is_some_and(|v| v == "true")
            })
            .map(|c| c.provisioner)
            .ok_or_else(|| E2eError::Check("this cluster has no default StorageClass".into()))?
    };
    let name = format!("{}-fixed", ns.name);
    let class: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": false,
    }))
    .map_err(|e| E2eError::Check(e.to_string()))?;
    classes.create(&PostParams::default(), &class).await?;
    Ok(name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_class_that_cannot_grow_is_said_and_nothing_restarts() -> Result<()> {
    let nc = NodeFixture::start("d2-fixed").await?;
    let class = class_without_expansion(&nc.ns).await?;
    let outcome = async {
        nc.create_exactly(
            "fixed",
            json!({"image": "valkey/valkey:9.1", "config": {"protected-mode": "no"},
                   "persistence": {"size": "1Gi", "storageClassName": class}}),
        )
        .await?;
        let node = nc
            .wait("fixed", FORM, "ready", |n| {
                n.status.as_ref().is_some_and(|s| s.ready)
            })
            .await?;
        let revision = node
            .status
            .as_ref()
            .and_then(|s| s.desired_revision.clone());
        let pod = nc.ns.pod("valkey-fixed-0").await?;

        nc.patch_spec("fixed", json!({"persistence": {"size": "2Gi"}}))
            .await?;
        let node = nc
            .wait("fixed", READY, "VolumeExpansionNotSupported", |n| {
                condition_parts(n, PVC_READY)
                    .is_some_and(|(_, r, _)| r == "VolumeExpansionNotSupported")
            })
            .await?;
        let (status, _, message) = condition_parts(&node, PVC_READY).unwrap_or_default();
        eprintln!("volumes: PersistentVolumeClaimReady={status}: {message}");
        check(
            status == "False"
                && message.contains(&format!("StorageClass {class}"))
                && message.contains("allowVolumeExpansion"),
            format!("PersistentVolumeClaimReady={status}: {message}"),
        )?;
        let claim = nc
            .ns
            .api::<PersistentVolumeClaim>()
            .get("valkey-fixed-data")
            .await?;
        check(
            sizes(&claim).0 == "1Gi",
            format!("the claim changed: {:?}", sizes(&claim)),
        )?;
        check(
            node.status.as_ref().is_some_and(|s| s.ready)
                && node
                    .status
                    .as_ref()
                    .and_then(|s| s.desired_revision.clone())
                    == revision,
            format!("the node is not ready on its revision: {:?}", node.status),
        )?;
        let now = nc.ns.pod("valkey-fixed-0").await?;
        check(
            now.uid() == pod.uid(),
            "the pod was replaced over a size the class cannot give",
        )?;
        let events = nc.ns.events().await?;
        check(
            events.contains("VolumeExpansionNotSupported"),
            format!("no Warning Event for it:\n{events}"),
        )
    }
    .await;
    let classes: Api<StorageClass> = Api::all(e2e::client().await?);
    if let Err(e) = classes.delete(&class, &DeleteParams::default()).await {
        eprintln!("deleting StorageClass {class}: {e}");
    }
    outcome
}
