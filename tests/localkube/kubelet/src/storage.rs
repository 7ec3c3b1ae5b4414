//! The default StorageClass `local` and its provisioner: a PVC the scheduler placed on one of
//! our nodes (annotation `volume.kubernetes.io/selected-node`) gets a hostPath PV in the state
//! directory, pinned to that node; kube-controller-manager binds them. Released PVs are deleted
//! with their directory. The class allows expansion: a bound claim that asks for more grows in
//! place (see [`crate::expand`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::config::Settings;

pub const CLASS_NAME: &str = "local";
pub const PROVISIONER: &str = "localkube.io/hostpath";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn storage_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(CLASS_NAME.into()),
            annotations: Some(BTreeMap::from([(
                "storageclass.kubernetes.io/is-default-class".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        allow_volume_expansion: Some(true),
        ..Default::default()
    }
}

/// Creates the class, or lets an existing one (made before the provisioner could expand)
/// allow expansion: the only one of its settings the API lets change.
pub async fn ensure_storage_class(client: &kube::Client) -> Result<(), StorageError> {
    let api: Api<StorageClass> = Api::all(client.clone());
    match api.create(&PostParams::default(), &storage_class()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api.get(CLASS_NAME).await?;
            if existing.provisioner == PROVISIONER && existing.allow_volume_expansion != Some(true)
            {
                let patch = serde_json::json!({"allowVolumeExpansion": true});
                api.patch(CLASS_NAME, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                tracing::info!(class = CLASS_NAME, "the StorageClass now allows expansion");
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The PV for a claim placed on `node`, or `None` when the claim is not ours to provision.
pub fn volume_for(
    pvc: &PersistentVolumeClaim,
    settings: &Settings,
    our_classes: &[String],
) -> Option<PersistentVolume> {
    let meta = &pvc.metadata;
    let spec = pvc.spec.as_ref()?;
    if meta.deletion_timestamp.is_some()
        || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
    {
        return None;
    }
    let class = spec.storage_class_name.clone()?;
    if !our_classes.contains(&class) {
        return None;
    }
    let node = meta.annotations.as_ref()?.get(SELECTED_NODE)?;
    settings.node(node)?;
    let uid = meta.uid.clone()?;
    let name = format!("pvc-{uid}");
    let capacity = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .and_then(|r| r.get("storage").cloned())?;
    Some(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), capacity)])),
            access_modes: spec.access_modes.clone(),
            volume_mode: spec.volume_mode.clone(),
            storage_class_name: Some(class),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                uid: Some(uid),
                ..Default::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: settings.volumes_dir().join(&name).display().to_string(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node.clone()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

async fn provision(client: &kube::Client, pv: PersistentVolume) -> Result<(), StorageError> {
    if let Some(path) = pv
        .spec
        .as_ref()
        .and_then(|s| s.host_path.as_ref())
        .map(|h| PathBuf::from(&h.path))
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&path).map_err(io_err(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
            .map_err(io_err(&path))?;
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            tracing::info!(pv = ?pv.metadata.name, "provisioned volume");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn provisioned_by_us(pv: &PersistentVolume) -> bool {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| p == PROVISIONER)
}

async fn reclaim(
    client: &kube::Client,
    pv: &PersistentVolume,
    settings: &Settings,
) -> Result<(), StorageError> {
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    if !(provisioned_by_us(pv) && released && delete) || pv.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let name = pv.metadata.name.clone().unwrap_or_default();
    if let Some(path) = pv
        .spec
        .as_ref()
        .and_then(|s| s.host_path.as_ref())
        .map(|h| PathBuf::from(&h.path))
        && path.starts_with(settings.volumes_dir())
        && path.exists()
    {
        std::fs::remove_dir_all(&path).map_err(io_err(&path))?;
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(pv = %name, "deleted released volume");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn classes(client: &kube::Client) -> Vec<String> {
    let api: Api<StorageClass> = Api::all(client.clone());
    match api.list(&Default::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|c| c.provisioner == PROVISIONER)
            .filter_map(|c| c.metadata.name)
            .collect(),
        Err(_) => vec![CLASS_NAME.to_string()],
    }
}

/// Watches claims and volumes until shutdown.
pub async fn run(client: kube::Client, settings: Settings, mut shutdown: watch::Receiver<bool>) {
    if let Err(e) = ensure_storage_class(&client).await {
        tracing::warn!(error = %e, "creating the default StorageClass");
    }
    let claims = watcher(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    );
    let volumes = watcher(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
    );
    let mut claims = std::pin::pin!(claims);
    let mut volumes = std::pin::pin!(volumes);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            ev = claims.next() => match ev {
                Some(Ok(watcher::Event::Apply(pvc) | watcher::Event::InitApply(pvc))) => {
                    let our_classes = classes(&client).await;
                    if let Some(pv) = volume_for(&pvc, &settings, &our_classes)
                        && let Err(e) = provision(&client, pv).await
                    {
                        tracing::warn!(error = %e, "provisioning a volume");
                    }
                    if let Err(e) = crate::expand::expand(&client, &pvc, &our_classes).await {
                        tracing::warn!(error = %e, "expanding a volume");
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "claim watch");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Some(_) => {}
                None => return,
            },
            ev = volumes.next() => match ev {
                Some(Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv))) => {
                    if let Err(e) = reclaim(&client, &pv, &settings).await {
                        tracing::warn!(error = %e, "deleting a released volume");
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "volume watch");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Some(_) => {}
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn settings() -> Settings {
        Settings {
            state_dir: PathBuf::from("/state"),
            images_dir: PathBuf::from("/images"),
            bridge: "lkbr0".into(),
            api_host: "10.213.0.1".into(),
            api_port: "6443".into(),
            nodes: crate::config::nodes(3, 0).unwrap_or_default(),
            backoff_cap: std::time::Duration::from_secs(300),
            node_status_period: std::time::Duration::from_secs(60),
            cluster_dns: None,
            cluster_domain: "cluster.local".into(),
            pod_routes: Vec::new(),
        }
    }

    fn claim(node: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data-web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                annotations: node
                    .map(|n| BTreeMap::from([(SELECTED_NODE.to_string(), n.to_string())])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(CLASS_NAME.into()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity("1Gi".into()),
                    )])),
                    limits: None,
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_placed_claim_gets_a_pinned_host_path_volume() {
        let classes = vec![CLASS_NAME.to_string()];
        let pv = volume_for(&claim(Some("localkube-b")), &settings(), &classes);
        let spec = pv.as_ref().and_then(|p| p.spec.clone()).unwrap_or_default();
        assert_eq!(pv.and_then(|p| p.metadata.name), Some("pvc-u1".into()));
        assert_eq!(
            spec.host_path.map(|h| h.path),
            Some("/state/volumes/pvc-u1".into())
        );
        assert_eq!(spec.claim_ref.and_then(|c| c.uid), Some("u1".into()));
        let values = spec
            .node_affinity
            .and_then(|a| a.required)
            .map(|r| r.node_selector_terms[0].clone())
            .and_then(|t| t.match_expressions)
            .and_then(|e| e[0].values.clone());
        assert_eq!(values, Some(vec!["localkube-b".to_string()]));
    }

    #[test]
    fn claims_not_placed_or_not_ours_are_left_alone() {
        let classes = vec![CLASS_NAME.to_string()];
        assert!(volume_for(&claim(None), &settings(), &classes).is_none());
        assert!(volume_for(&claim(Some("elsewhere")), &settings(), &classes).is_none());
        assert!(volume_for(&claim(Some("localkube-a")), &settings(), &[]).is_none());
    }
}
