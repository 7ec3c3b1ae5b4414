//! Server-side apply of whole objects and of status, with one field manager per binary.
//!
//! Both use `force`: each controller is the only writer of the fields it applies, so a conflict
//! with another manager (a person's `kubectl edit`, an old field manager) is resolved in the
//! controller's favour instead of stalling the reconcile.

use std::fmt::Debug;

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot apply a {kind} without metadata.name")]
    MissingName { kind: String },
    #[error("cannot serialise the {kind} {name} status: {source}")]
    Serialize {
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("server-side apply of {kind} {name} failed: {source}")]
    Kube {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// The underlying API error, to inspect its status code.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            Self::Kube { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `PatchParams` for a forced server-side apply as `field_manager`.
pub fn apply_params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager).force()
}

/// Server-side applies `object` (its name and, for namespaced kinds, `api`'s namespace).
///
/// Build `object` from scratch with only the fields this controller owns: any field left out is
/// released by this manager and may be pruned. `managedFields` is cleared because the API
/// rejects an apply that carries it.
pub async fn apply<K>(api: &Api<K>, field_manager: &str, object: &K) -> Result<K, ApplyError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let name = object
        .meta()
        .name
        .clone()
        .ok_or_else(|| ApplyError::MissingName { kind: kind.clone() })?;
    let mut body = object.clone();
    body.meta_mut().managed_fields = None;
    api.patch(&name, &apply_params(field_manager), &Patch::Apply(&body))
        .await
        .map_err(|source| ApplyError::Kube { kind, name, source })
}

/// Server-side applies `status` through the status subresource of the object `name`.
///
/// Send the whole status every time: fields this manager applied before and leaves out now are
/// removed.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    field_manager: &str,
    name: &str,
    status: &S,
) -> Result<K, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    S: Serialize,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let body = status_patch::<K, S>(name, status).map_err(|source| ApplyError::Serialize {
        kind: kind.clone(),
        name: name.to_owned(),
        source,
    })?;
    api.patch_status(name, &apply_params(field_manager), &Patch::Apply(&body))
        .await
        .map_err(|source| ApplyError::Kube {
            kind,
            name: name.to_owned(),
            source,
        })
}

/// The apply body for a status: `apiVersion` and `kind` are required by server-side apply, and
/// `metadata.name` must match the URL.
pub fn status_patch<K, S>(name: &str, status: &S) -> Result<serde_json::Value, serde_json::Error>
where
    K: Resource,
    K::DynamicType: Default,
    S: Serialize,
{
    let dynamic_type = K::DynamicType::default();
    Ok(serde_json::json!({
        "apiVersion": K::api_version(&dynamic_type),
        "kind": K::kind(&dynamic_type),
        "metadata": { "name": name },
        "status": serde_json::to_value(status)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
    use k8s_openapi::api::coordination::v1::Lease;

    #[test]
    fn status_patch_carries_type_and_name() -> Result<(), serde_json::Error> {
        let status = DeploymentStatus {
            ready_replicas: Some(1),
            ..Default::default()
        };
        let patch = status_patch::<Deployment, _>("valkey-a", &status)?;
        assert_eq!(patch["apiVersion"], "apps/v1");
        assert_eq!(patch["kind"], "Deployment");
        assert_eq!(patch["metadata"]["name"], "valkey-a");
        assert_eq!(patch["status"]["readyReplicas"], 1);
        assert_eq!(patch.as_object().map(|o| o.len()), Some(4));
        Ok(())
    }

    #[test]
    fn status_patch_of_a_grouped_kind() -> Result<(), serde_json::Error> {
        let patch = status_patch::<Lease, _>("l", &serde_json::json!({"x": 1}))?;
        assert_eq!(patch["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(patch["kind"], "Lease");
        Ok(())
    }

    #[test]
    fn params_force_with_manager() {
        let params = apply_params("valkey-node-controller");
        assert!(params.force);
        assert_eq!(
            params.field_manager.as_deref(),
            Some("valkey-node-controller")
        );
    }
}

/// What tells whether someone else changed what a controller wants of an object it applied:
/// its uid and generation when it has a generation (the API server moves it with the spec, not
/// with the status the object's own controller keeps writing: a StatefulSet whose pods come and
/// go keeps its generation), else its resourceVersion. The uid tells an object deleted and made
/// again by someone else from the one that was written.
pub fn written_version(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    match meta.generation {
        Some(generation) => Some(format!(
            "{}/{generation}",
            meta.uid.as_deref().unwrap_or_default()
        )),
        None => meta.resource_version.clone(),
    }
}

#[cfg(test)]
mod written_version_tests {
    use super::written_version;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_status_write_does_not_move_it_and_a_spec_change_or_a_new_object_does() {
        let meta = |uid: &str, generation: Option<i64>, version: &str| ObjectMeta {
            uid: Some(uid.into()),
            generation,
            resource_version: Some(version.into()),
            ..Default::default()
        };
        let written = written_version(&meta("a", Some(3), "100"));
        assert_eq!(
            written,
            written_version(&meta("a", Some(3), "107")),
            "status only"
        );
        assert_ne!(
            written,
            written_version(&meta("a", Some(4), "108")),
            "spec changed"
        );
        assert_ne!(
            written,
            written_version(&meta("b", Some(3), "109")),
            "made again"
        );
        // Without a generation (a ConfigMap), any change moves it.
        assert_ne!(
            written_version(&meta("c", None, "5")),
            written_version(&meta("c", None, "6"))
        );
    }
}
