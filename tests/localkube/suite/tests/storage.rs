//! Volume expansion, as the operator relies on it: a bound claim of a class that allows
//! expansion grows when its request does, its volume follows, and the pod using it runs on with
//! its data (no restart: the `local` class's hostPath volumes need no file system resize).

use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, check, pod_ip, valkey, valkey_cmd, wait_until};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::cluster::{WITH_VOLUME_READY, valkey_statefulset};
use crate::skip;

const GROW: Duration = Duration::from_secs(60);

fn storage(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<String> {
    map.and_then(|m| m.get("storage")).map(|q| q.0.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_grows_in_place_and_its_volume_follows() -> Result<()> {
    let ns = TestNamespace::create("grow").await?;
    ns.apply(&valkey_statefulset("kv", crate::VALKEY_IMAGE))
        .await?;
    let pod = ns.wait_pod_ready("kv-0", WITH_VOLUME_READY).await?;
    let claims = ns.api::<PersistentVolumeClaim>();
    let claim = claims.get("data-kv-0").await?;
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    let classes: Api<StorageClass> = Api::all(ns.client.clone());
    let expandable = classes
        .get_opt(&class)
        .await?
        .is_some_and(|c| c.allow_volume_expansion == Some(true));
    if !expandable {
        if e2e::is_localkube() {
            return Err(E2eError::Check(format!(
                "localkube's StorageClass {class:?} does not allow volume expansion"
            )));
        }
        return skip(&format!(
            "StorageClass {class:?} does not allow volume expansion"
        ));
    }
    let ip = pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let mut conn = valkey(&ip, 6379).await?;
    valkey_cmd(&mut conn, &["SET", "grow:key", "kept"]).await?;
    valkey_cmd(&mut conn, &["SAVE"]).await?;

    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims
        .patch("data-kv-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let grown = wait_until(GROW, "data-kv-0 to hold 2Gi", || {
        let claims = claims.clone();
        async move {
            let c = claims.get("data-kv-0").await?;
            let capacity = storage(c.status.as_ref().and_then(|s| s.capacity.as_ref()));
            Ok(if capacity.as_deref() == Some("2Gi") {
                Poll::Ready(c)
            } else {
                Poll::NotYet(format!("{:?}", c.status))
            })
        }
    })
    .await?;
    let status = grown.status.clone().unwrap_or_default();
    check(
        !status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Resizing" || c.type_ == "FileSystemResizePending"),
        format!("resize conditions left behind: {:?}", status.conditions),
    )?;
    check(
        !status
            .allocated_resource_statuses
            .as_ref()
            .is_some_and(|s| s.contains_key("storage")),
        format!(
            "allocatedResourceStatuses still names storage: {:?}",
            status.allocated_resource_statuses
        ),
    )?;
    if e2e::is_localkube() {
        check(
            storage(status.allocated_resources.as_ref()).as_deref() == Some("2Gi"),
            format!("allocatedResources: {:?}", status.allocated_resources),
        )?;
    }
    let volume = grown
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .ok_or_else(|| E2eError::Check("data-kv-0 is not bound".into()))?;
    check(
        Some(volume.clone()) == claim.spec.as_ref().and_then(|s| s.volume_name.clone()),
        "the claim moved to another volume",
    )?;
    let pv = Api::<PersistentVolume>::all(ns.client.clone())
        .get(&volume)
        .await?;
    let pv_capacity = storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
    check(
        pv_capacity.as_deref() == Some("2Gi"),
        format!("PV {volume} has capacity {pv_capacity:?}"),
    )?;

    // The pod runs on: same pod, no restart, its data there.
    let now = ns.pod("kv-0").await?;
    let restarts: i32 = now
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0);
    check(
        now.metadata.uid == pod.metadata.uid && restarts == 0,
        format!("kv-0 replaced or restarted ({restarts} restarts)"),
    )?;
    let value = valkey_cmd(&mut conn, &["GET", "grow:key"]).await?;
    check(value == "kept", format!("GET grow:key = {value:?}"))
}
