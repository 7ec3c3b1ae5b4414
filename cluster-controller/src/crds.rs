//! The CRDs this binary was built with, applied when it starts (`--apply-crds`, on in the chart).
//! Helm installs what sits in a chart's `crds/` once and never upgrades it, so without this an
//! upgraded operator would run against the previous release's CRDs: new fields pruned, new
//! validations missing. Applied by the leader only, with a field manager of its own.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

/// The field manager of the CRDs the operator applies.
pub const FIELD_MANAGER: &str = "valkey-operator-crds";

/// Server-side applies every CRD of the API this binary speaks. Each is tried even when an
/// earlier one fails: a kind new in this release has no CRD yet after a `helm upgrade` (Helm
/// installs `crds/` only on install) and the operator may only patch CRDs that exist, and that
/// must not keep the CRDs of the existing kinds from being brought up to date. Returns the
/// failures, by CRD name.
pub async fn apply(client: &kube::Client) -> Result<(), Vec<(String, kube::Error)>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut failed = Vec::new();
    for crd in valkey_api::v1alpha1::custom_resource_definitions() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
        {
            Ok(_) => tracing::info!(crd = %name, "applied the CRD this operator was built with"),
            Err(e) => failed.push((name, e)),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, StatusCode};
    use plumbing::testing::mock_client;
    use serde_json::json;

    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/";

    /// After a `helm upgrade` the CRD of a kind new in this release does not exist and may not be
    /// created: that one fails, and every other CRD is still applied.
    #[tokio::test]
    async fn a_crd_that_cannot_be_applied_keeps_no_other_from_being_applied() {
        let (client, mut api) = mock_client();
        let names: Vec<String> = valkey_api::v1alpha1::custom_resource_definitions()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        assert!(names.len() > 1, "{names:?}");
        let refused = names[0].clone();
        let expected = names.clone();
        let script = tokio::spawn(async move {
            for name in &expected {
                let received = api.expect(Method::PATCH, &format!("{CRDS}{name}?")).await;
                if *name == expected[0] {
                    received.answer(
                        StatusCode::FORBIDDEN,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "Forbidden", "code": 403, "message": "forbidden"}),
                    );
                } else {
                    received.echo();
                }
            }
            api.done().await;
        });
        let failed = super::apply(&client).await.err().unwrap_or_default();
        script.await.unwrap_or_else(|e| panic!("{e}"));
        let failed: Vec<&str> = failed.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(failed, [refused.as_str()]);
    }
}
