//! Volume expansion for the `local` class: what Kubernetes' external resizer does for a CSI driver
//! whose volumes need no file system resize on the node. A bound claim of one of our classes whose
//! request exceeds its capacity is marked as resizing (`allocatedResources`,
//! `allocatedResourceStatuses: ControllerResizeInProgress`, condition `Resizing`), its volume's
//! `spec.capacity` grows, and then the claim reports the new `status.capacity` with the resize
//! markers removed. A hostPath directory has no size of its own, so nothing on disk changes and no
//! pod restarts. (The API server lets a request grow only when the class allows expansion, so this
//! never sees a claim of a class that does not.)

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::storage::{StorageError, provisioned_by_us};

const STORAGE: &str = "storage";
/// The claim conditions a resize sets; each step replaces them all.
const RESIZE_CONDITIONS: [&str; 4] = [
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    "NodeResizeError",
];
/// Attempts per expansion: a claim changes under us (its own status, the PV controller).
const ATTEMPTS: u32 = 3;

/// Bytes of a storage quantity (`1Gi`, `500M`, `1.5Gi`, `1073741824`, `1e9`); `None` when it does
/// not parse. Whole bytes are all a size comparison needs.
pub fn quantity_bytes(quantity: &str) -> Option<f64> {
    let quantity = quantity.trim();
    let split = quantity
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => 10f64.powi(exponent.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    let value: f64 = number.parse().ok()?;
    Some((value * multiplier).floor())
}

fn storage_of(resources: Option<&BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    resources?.get(STORAGE)
}

fn larger(a: &Quantity, b: Option<&Quantity>) -> bool {
    match (quantity_bytes(&a.0), b.and_then(|b| quantity_bytes(&b.0))) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Whether the claim's request exceeds its capacity (read before any API call: most claim
/// events are not about size).
fn asks_for_more(pvc: &PersistentVolumeClaim) -> Option<&Quantity> {
    let requested = storage_of(pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref())?;
    let capacity = storage_of(pvc.status.as_ref()?.capacity.as_ref());
    larger(requested, capacity).then_some(requested)
}

/// The size `pvc` should grow to, when it is a bound claim of one of `our_classes` whose request
/// exceeds its capacity, and `pv` is the volume we provisioned for it; else `None`.
pub fn target_size(
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    our_classes: &[String],
) -> Option<Quantity> {
    let spec = pvc.spec.as_ref()?;
    let status = pvc.status.as_ref()?;
    if pvc.metadata.deletion_timestamp.is_some()
        || status.phase.as_deref() != Some("Bound")
        || !our_classes.contains(spec.storage_class_name.as_ref()?)
        || spec.volume_name.as_ref() != pv.metadata.name.as_ref()
        || !provisioned_by_us(pv)
    {
        return None;
    }
    let claim_ref = pv.spec.as_ref()?.claim_ref.as_ref()?;
    if claim_ref.uid.is_none()
        || claim_ref.uid != pvc.metadata.uid
        || claim_ref.namespace != pvc.metadata.namespace
    {
        return None;
    }
    asks_for_more(pvc).cloned()
}

/// The claim's conditions without the resize ones, plus `added`.
fn conditions_with(
    pvc: &PersistentVolumeClaim,
    added: Option<PersistentVolumeClaimCondition>,
) -> Vec<PersistentVolumeClaimCondition> {
    let mut conditions: Vec<_> = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    conditions.extend(added);
    conditions
}

/// The status patch that starts a resize to `size` (the external resizer's
/// `markControllerResizeInProgress`), guarded by the claim's resourceVersion.
pub fn resizing_patch(pvc: &PersistentVolumeClaim, size: &Quantity, now: Time) -> Value {
    let resizing = PersistentVolumeClaimCondition {
        type_: "Resizing".into(),
        status: "True".into(),
        last_transition_time: Some(now),
        ..Default::default()
    };
    json!({
        "metadata": {"resourceVersion": pvc.metadata.resource_version},
        "status": {
            "allocatedResources": {STORAGE: size},
            "allocatedResourceStatuses": {STORAGE: "ControllerResizeInProgress"},
            "conditions": conditions_with(pvc, Some(resizing)),
        },
    })
}

/// The status patch that ends it (`markOverallExpansionAsFinished`): the new capacity, the resize
/// conditions and the storage entry of `allocatedResourceStatuses` gone (null deletes a key).
pub fn finished_patch(pvc: &PersistentVolumeClaim, size: &Quantity) -> Value {
    json!({
        "metadata": {"resourceVersion": pvc.metadata.resource_version},
        "status": {
            "capacity": {STORAGE: size},
            "allocatedResourceStatuses": {STORAGE: null},
            "conditions": conditions_with(pvc, None),
        },
    })
}

/// One attempt: reads the claim's volume, and if the claim is to grow, grows the volume and then
/// the claim. Ok(false) when there was nothing to do.
async fn attempt(
    client: &kube::Client,
    pvc: &PersistentVolumeClaim,
    our_classes: &[String],
) -> Result<bool, StorageError> {
    let Some(volume) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
        return Ok(false);
    };
    if asks_for_more(pvc).is_none() {
        return Ok(false);
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let Some(pv) = pvs.get_opt(&volume).await? else {
        return Ok(false);
    };
    let Some(size) = target_size(pvc, &pv, our_classes) else {
        return Ok(false);
    };
    let (Some(name), Some(namespace)) = (&pvc.metadata.name, &pvc.metadata.namespace) else {
        return Ok(false);
    };
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let marked = claims
        .patch_status(
            name,
            &params,
            &Patch::Merge(resizing_patch(pvc, &size, now)),
        )
        .await?;
    pvs.patch(
        &volume,
        &params,
        &Patch::Merge(json!({"spec": {"capacity": {STORAGE: size}}})),
    )
    .await?;
    claims
        .patch_status(name, &params, &Patch::Merge(finished_patch(&marked, &size)))
        .await?;
    tracing::info!(pvc = %name, namespace = %namespace, pv = %volume, size = %size.0, "expanded volume");
    Ok(true)
}

/// Grows `pvc`'s volume when its request exceeds its capacity. A conflict (the claim changed
/// since it was read) is retried on a fresh copy; the watch brings every later change anyway.
pub async fn expand(
    client: &kube::Client,
    pvc: &PersistentVolumeClaim,
    our_classes: &[String],
) -> Result<(), StorageError> {
    let mut pvc = pvc.clone();
    for left in (0..ATTEMPTS).rev() {
        match attempt(client, &pvc, our_classes).await {
            Ok(_) => return Ok(()),
            Err(StorageError::Api(kube::Error::Api(e))) if e.code == 409 && left > 0 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (Some(name), Some(namespace)) = (&pvc.metadata.name, &pvc.metadata.namespace)
                else {
                    return Ok(());
                };
                let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
                match claims.get_opt(name).await? {
                    Some(fresh) => pvc = fresh,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(request: &str, capacity: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {
                "storageClassName": "local",
                "volumeName": "pvc-u1",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": request}},
            },
            "status": {
                "phase": "Bound",
                "capacity": {"storage": capacity},
                "conditions": [{"type": "ModifyingVolume", "status": "True"}],
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn volume(uid: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {
                "name": "pvc-u1",
                "annotations": {"pv.kubernetes.io/provisioned-by": crate::storage::PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "claimRef": {"namespace": "ns", "name": "data", "uid": uid},
                "hostPath": {"path": "/state/volumes/pvc-u1"},
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ours() -> Vec<String> {
        vec!["local".to_string()]
    }

    #[test]
    fn quantities_compare_by_bytes() {
        assert_eq!(quantity_bytes("1Gi"), Some(1073741824.0));
        assert_eq!(quantity_bytes("1.5Gi"), Some(1610612736.0));
        assert_eq!(quantity_bytes("2G"), Some(2e9));
        assert_eq!(quantity_bytes("1e3"), Some(1000.0));
        assert_eq!(quantity_bytes("1024"), Some(1024.0));
        assert_eq!(quantity_bytes("1Qi"), None);
        assert!(larger(
            &Quantity("2Gi".into()),
            Some(&Quantity("2G".into()))
        ));
        assert!(!larger(
            &Quantity("1024Mi".into()),
            Some(&Quantity("1Gi".into()))
        ));
    }

    #[test]
    fn a_bound_claim_asking_for_more_grows_to_its_request() {
        let size = target_size(&claim("2Gi", "1Gi"), &volume("u1"), &ours());
        assert_eq!(size, Some(Quantity("2Gi".into())));
    }

    #[test]
    fn claims_that_need_nothing_or_are_not_ours_are_left_alone() {
        let pv = volume("u1");
        assert_eq!(target_size(&claim("1Gi", "1Gi"), &pv, &ours()), None);
        assert_eq!(
            target_size(&claim("1024Mi", "1Gi"), &pv, &ours()),
            None,
            "the same size written differently"
        );
        assert_eq!(target_size(&claim("2Gi", "1Gi"), &pv, &[]), None);
        assert_eq!(
            target_size(&claim("2Gi", "1Gi"), &volume("someone-else"), &ours()),
            None,
            "the volume is bound to another claim"
        );
        let mut unbound = claim("2Gi", "1Gi");
        if let Some(s) = unbound.status.as_mut() {
            s.phase = Some("Pending".into());
        }
        assert_eq!(target_size(&unbound, &pv, &ours()), None);
        let mut foreign = volume("u1");
        foreign.metadata.annotations = None;
        assert_eq!(target_size(&claim("2Gi", "1Gi"), &foreign, &ours()), None);
    }

    #[test]
    fn the_status_patches_mark_then_finish_the_resize_as_the_external_resizer_does() {
        let pvc = claim("2Gi", "1Gi");
        let size = Quantity("2Gi".into());
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let start = resizing_patch(&pvc, &size, now);
        assert_eq!(start["metadata"]["resourceVersion"], "7");
        assert_eq!(start["status"]["allocatedResources"]["storage"], "2Gi");
        assert_eq!(
            start["status"]["allocatedResourceStatuses"]["storage"],
            "ControllerResizeInProgress"
        );
        let types: Vec<&str> = start["status"]["conditions"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(types, ["ModifyingVolume", "Resizing"], "others are kept");

        let mut marked = pvc.clone();
        if let Some(s) = marked.status.as_mut() {
            s.conditions = serde_json::from_value(start["status"]["conditions"].clone()).ok();
        }
        let end = finished_patch(&marked, &size);
        assert_eq!(end["status"]["capacity"]["storage"], "2Gi");
        assert_eq!(
            end["status"]["allocatedResourceStatuses"],
            json!({"storage": null}),
            "a null in a merge patch deletes the key"
        );
        assert_eq!(
            end["status"]["conditions"],
            json!([{"type": "ModifyingVolume", "status": "True"}])
        );
    }
}
