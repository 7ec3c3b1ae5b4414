//! The role label: the pod of a node carries the replication role Valkey reports
//! ([`ROLE_LABEL`]), so Services can select primaries or replicas. A metadata patch of the pod,
//! never a change to its template: the pod is not restarted. While Valkey does not answer, the
//! label is removed: a role nobody can confirm is not advertised.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use valkey_api::contract::ROLE_LABEL;
use valkey_api::v1alpha1::Role;

use super::context::Context;
use super::error::Error;
use crate::names::FIELD_MANAGER;

/// The patch that brings `pod`'s label to `role`, or `None` when it carries it already.
pub fn patch_for(pod: &Pod, role: Option<Role>) -> Option<serde_json::Value> {
    let want = role.map(|r| r.as_str());
    let have = pod.labels().get(ROLE_LABEL).map(String::as_str);
    (want != have).then(|| serde_json::json!({ "metadata": { "labels": { ROLE_LABEL: want } } }))
}

/// Labels `pod` with `role` (a merge patch; `null` removes the label). A pod that is already gone
/// is no error: its successor gets the label on its first pass.
pub async fn sync(ctx: &Context, pod: Option<&Pod>, role: Option<Role>) -> Result<(), Error> {
    let Some(pod) = pod.filter(|p| p.meta().deletion_timestamp.is_none()) else {
        return Ok(());
    };
    let Some(patch) = patch_for(pod, role) else {
        return Ok(());
    };
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api.patch(&name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Label { name, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &str) -> Pod {
        serde_yaml::from_str(&format!(
            "metadata: {{name: p, namespace: ns, labels: {labels}}}"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_label_follows_the_role_valkey_reports() {
        let unlabelled = pod("{valkey.io/node: n}");
        assert_eq!(
            patch_for(&unlabelled, Some(Role::Primary)),
            Some(serde_json::json!({"metadata": {"labels": {"valkey.io/role": "primary"}}}))
        );
        let replica = pod("{valkey.io/node: n, valkey.io/role: replica}");
        assert_eq!(
            patch_for(&replica, Some(Role::Replica)),
            None,
            "nothing to change"
        );
        assert_eq!(
            patch_for(&replica, Some(Role::Primary)),
            Some(serde_json::json!({"metadata": {"labels": {"valkey.io/role": "primary"}}}))
        );
        assert_eq!(
            patch_for(&replica, None),
            Some(serde_json::json!({"metadata": {"labels": {"valkey.io/role": null}}})),
            "a role nobody can confirm is removed"
        );
        assert_eq!(patch_for(&unlabelled, None), None);
    }
}
