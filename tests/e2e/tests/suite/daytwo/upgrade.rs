//! Item 8, the part that needs no old build: an upgraded cluster-controller brings its CRDs
//! (Helm never upgrades a chart's crds/). A cluster-controller started with `--apply-crds`, as the
//! chart starts it, applies the CRDs it was built with: they carry the fields this build knows.

use std::time::Duration;

use e2e::operator::{ControllerProcess, install_crds};
use e2e::{Poll, Result, TestNamespace, check, wait_until};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_controller_applies_the_crds_it_was_built_with() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("d2-crds").await?;
    let _controller =
        ControllerProcess::start("cluster-controller", &ns, &["--apply-crds"]).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    for (name, field) in [
        ("valkeyclusters.valkey.io", "nodeIds"),
        ("valkeynodes.valkey.io", "valkeyVersion"),
    ] {
        let crd = wait_until(
            Duration::from_secs(60),
            &format!("{name} applied by the cluster-controller"),
            || {
                let crds = crds.clone();
                async move {
                    let crd = crds.get(name).await?;
                    let by_controller = crd
                        .metadata
                        .managed_fields
                        .iter()
                        .flatten()
                        .any(|m| m.manager.as_deref() == Some("valkey-operator-crds"));
                    Ok(if by_controller {
                        Poll::Ready(crd)
                    } else {
                        Poll::NotYet("no field manager valkey-operator-crds yet".into())
                    })
                }
            },
        )
        .await?;
        let schema = serde_json::to_string(&crd.spec.versions).unwrap_or_default();
        check(schema.contains(field), format!("{name} has no {field}"))?;
    }
    Ok(())
}
