//! Server-side apply and Events against a real API server (`KUBECONFIG`):
//! `cargo test -p plumbing --test api_helpers -- --ignored`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams};
use plumbing::apply::{apply, apply_status};
use plumbing::events::EventPublisher;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const NAMESPACE: &str = "default";
const MANAGER: &str = "plumbing-test";

fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{:x}",
        Timestamp::now().as_nanosecond() % 0xffff_ffff
    )
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("key".to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn apply_is_idempotent_and_updates() -> TestResult {
    let client = kube::Client::try_default().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let name = unique_name("plumbing-apply");

    let first = apply(&api, MANAGER, &config_map(&name, "one")).await?;
    let again = apply(&api, MANAGER, &config_map(&name, "one")).await?;
    // Applying the same intent twice writes nothing.
    assert_eq!(
        first.metadata.resource_version,
        again.metadata.resource_version
    );
    let changed = apply(&api, MANAGER, &config_map(&name, "two")).await?;
    assert_ne!(
        first.metadata.resource_version,
        changed.metadata.resource_version
    );
    assert_eq!(
        changed.data.and_then(|d| d.get("key").cloned()).as_deref(),
        Some("two")
    );

    let nameless = ConfigMap::default();
    assert!(apply(&api, MANAGER, &nameless).await.is_err());
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn status_is_applied_through_the_subresource() -> TestResult {
    let client = kube::Client::try_default().await?;
    let api: Api<Deployment> = Api::namespaced(client, NAMESPACE);
    let name = unique_name("plumbing-status");
    let labels = BTreeMap::from([("app".to_owned(), name.clone())]);
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("example".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    apply(&api, MANAGER, &deployment).await?;
    let status = DeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(0),
        ..Default::default()
    };
    let updated = apply_status(&api, MANAGER, &name, &status).await?;
    assert_eq!(updated.status.and_then(|s| s.observed_generation), Some(1));
    // The spec was not touched by the status write.
    assert_eq!(updated.spec.and_then(|s| s.replicas), Some(0));
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn events_are_published_and_folded_into_series() -> TestResult {
    let client = kube::Client::try_default().await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let name = unique_name("plumbing-events");
    let object = apply(&maps, MANAGER, &config_map(&name, "v")).await?;

    let publisher = EventPublisher::new(
        client.clone(),
        "plumbing-test-controller",
        Some("pod-1".into()),
    );
    publisher
        .normal(&object, "Configured", "Apply", "Configured the map.")
        .await;
    publisher
        .normal(&object, "Configured", "Apply", "Configured the map.")
        .await;
    publisher
        .warning(&object, "Invalid", "Validate", &"x".repeat(5000))
        .await;

    let events: Api<K8sEvent> = Api::namespaced(client, NAMESPACE);
    let ours: Vec<K8sEvent> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
        .collect();
    assert_eq!(ours.len(), 2, "one series and one warning: {ours:?}");
    let configured = ours
        .iter()
        .find(|e| e.reason.as_deref() == Some("Configured"))
        .ok_or("no Configured event")?;
    assert_eq!(
        configured.reporting_controller.as_deref(),
        Some("plumbing-test-controller")
    );
    assert_eq!(configured.reporting_instance.as_deref(), Some("pod-1"));
    assert_eq!(configured.series.as_ref().map(|s| s.count), Some(2));
    let invalid = ours
        .iter()
        .find(|e| e.reason.as_deref() == Some("Invalid"))
        .ok_or("no Invalid event")?;
    assert_eq!(invalid.type_.as_deref(), Some("Warning"));
    assert_eq!(invalid.note.as_ref().map(String::len), Some(1024));

    maps.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}
