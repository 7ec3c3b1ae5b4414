//! The monitoring stage, for both parent kinds: a PodMonitor `<name>-valkey` (the Prometheus
//! operator's kind, `monitoring.coreos.com/v1`) that scrapes the exporter of every member
//! (`spec.metrics`), kept while the exporter runs and `spec.metrics.podMonitor` asks for it,
//! deleted otherwise. Where that kind does not exist nothing is created and nothing fails; the
//! answer to "does it exist" is kept a few minutes ([`KindPresence`]), so a cluster without the
//! Prometheus operator costs one discovery request per controller every few minutes, not one per
//! pass.
//!
//! A failure here (a chart without the RBAC for PodMonitors) is logged by the caller and holds
//! nothing else back: monitoring serves people, not the cluster.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::{Client, Resource};
use serde_json::json;
use valkey_api::contract::METRICS_PORT_NAME;
use valkey_api::v1alpha1::Metrics;

use super::context::ParentMemory;
use super::error::{Error, api_error};
use super::labels::FIELD_MANAGER;

pub const GROUP: &str = "monitoring.coreos.com";
pub const VERSION: &str = "v1";
pub const KIND: &str = "PodMonitor";
pub const PLURAL: &str = "podmonitors";

/// How long an answer about the kind's existence is trusted.
const PRESENCE_TTL: Duration = Duration::from_secs(180);

/// The target labels every scraped series of a parent carries (beside Prometheus's own
/// `namespace`, `pod`, `container`), for dashboards to choose a parent by, whatever its kind: its
/// name, and `cluster` or `replication`.
pub const NAME_LABEL: &str = "valkey_name";
pub const KIND_LABEL: &str = "valkey_kind";

pub fn name(parent: &str) -> String {
    format!("{parent}-valkey")
}

pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// A parent as the PodMonitor needs it: its name, namespace and owner reference, its kind's word
/// for the dashboards, and the labels its members' pods carry.
pub struct Parent {
    pub name: String,
    pub namespace: String,
    pub owner: OwnerReference,
    /// `cluster` or `replication`.
    pub kind_word: &'static str,
    /// Labels that select exactly the parent's member pods.
    pub selector: BTreeMap<String, String>,
    /// The parent's own label (name → value) on the PodMonitor, as on its other objects.
    pub labels: BTreeMap<String, String>,
}

impl Parent {
    /// The parts of `object` the PodMonitor needs; `None` without a name, namespace or uid.
    pub fn of<K: Resource<DynamicType = ()>>(
        object: &K,
        kind_word: &'static str,
        parent_label: &str,
    ) -> Option<Self> {
        let name = object.meta().name.clone()?;
        let selector = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
            (parent_label.to_owned(), name.clone()),
        ]);
        Some(Self {
            namespace: object.meta().namespace.clone()?,
            owner: object.controller_owner_ref(&())?,
            kind_word,
            labels: BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    FIELD_MANAGER.to_owned(),
                ),
                (parent_label.to_owned(), name.clone()),
            ]),
            selector,
            name,
        })
    }
}

/// The PodMonitor `metrics` asks for: `None` when the exporter is off or the PodMonitor is not
/// wanted. Scrapes the `metrics` port of every member pod at `/metrics`, and labels each series
/// with the parent ([`NAME_LABEL`], [`KIND_LABEL`]).
pub fn desired(parent: &Parent, metrics: &Metrics) -> Option<DynamicObject> {
    if !(metrics.enabled && metrics.pod_monitor) {
        return None;
    }
    let mut object = DynamicObject::new(&name(&parent.name), &api_resource())
        .within(&parent.namespace)
        .data(json!({"spec": {
            "selector": {"matchLabels": parent.selector},
            "podMetricsEndpoints": [{
                "port": METRICS_PORT_NAME,
                "path": "/metrics",
                "relabelings": [
                    {"action": "replace", "targetLabel": NAME_LABEL, "replacement": parent.name},
                    {"action": "replace", "targetLabel": KIND_LABEL, "replacement": parent.kind_word},
                ],
            }],
        }}));
    object.metadata = ObjectMeta {
        labels: Some(parent.labels.clone()),
        owner_references: Some(vec![parent.owner.clone()]),
        ..object.metadata
    };
    Some(object)
}

/// Whether the PodMonitor kind exists, as last found out, for a while.
#[derive(Debug, Default)]
pub struct KindPresence {
    known: Mutex<Option<(bool, Instant)>>,
}

impl KindPresence {
    /// Takes `present` as the answer for the next few minutes (tests; and a 404 on apply, which
    /// means the kind went away).
    pub fn assume(&self, present: bool) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some((present, Instant::now()));
    }

    fn cached(&self) -> Option<bool> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .filter(|(_, at)| at.elapsed() < PRESENCE_TTL)
            .map(|(present, _)| present)
    }

    /// Whether the kind exists; `Err` when the API server could not say (asked again next pass).
    pub async fn present(&self, client: &Client) -> Result<bool, Error> {
        if let Some(present) = self.cached() {
            return Ok(present);
        }
        let present = match client
            .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
            .await
        {
            Ok(list) => list.resources.iter().any(|r| r.name == PLURAL),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(e) => return Err(api_error(format!("discovering {GROUP}/{VERSION}"))(e)),
        };
        self.assume(present);
        Ok(present)
    }
}

/// Applies the PodMonitor `desired` (or deletes the parent's when `None`), where the kind exists.
/// What was last applied is remembered per parent, so a steady parent writes nothing; nothing is
/// remembered while the kind is absent, so a PodMonitor follows once it is installed.
pub async fn ensure(
    client: &Client,
    presence: &KindPresence,
    parent: &Parent,
    desired: Option<DynamicObject>,
    memory: &ParentMemory,
) -> Result<(), Error> {
    let fingerprint = serde_json::to_string(&desired).unwrap_or_default();
    if memory.pod_monitor_applied().as_deref() == Some(fingerprint.as_str()) {
        return Ok(());
    }
    if !presence.present(client).await? {
        return Ok(());
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &parent.namespace, &api_resource());
    let name = name(&parent.name);
    match desired {
        Some(object) => {
            let applied = api
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await;
            match applied {
                Ok(_) => {}
                // The kind went away since it was last looked for.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    presence.assume(false);
                    return Ok(());
                }
                Err(e) => return Err(api_error(format!("applying PodMonitor {name}"))(e)),
            }
        }
        None => match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(api_error(format!("deleting PodMonitor {name}"))(e)),
        },
    }
    memory.remember_pod_monitor(fingerprint);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use crate::parent::labels::CLUSTER_LABEL;
    use http::{Method, StatusCode};
    use plumbing::testing::mock_client;

    fn metered(extra: &str) -> valkey_api::v1alpha1::ValkeyCluster {
        cluster(&format!("{CLUSTER}  metrics: {{enabled: true{extra}}}\n"))
    }

    fn parent_of(c: &valkey_api::v1alpha1::ValkeyCluster) -> Parent {
        Parent::of(c, "cluster", CLUSTER_LABEL).unwrap_or_else(|| panic!("no parent"))
    }

    #[test]
    fn the_pod_monitor_scrapes_every_members_metrics_port_and_names_its_parent() {
        let c = metered("");
        let parent = parent_of(&c);
        let object =
            desired(&parent, &c.spec.metrics).unwrap_or_else(|| panic!("wanted by default"));
        let value = serde_json::to_value(&object).unwrap_or_default();
        assert_eq!(value["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(value["kind"], "PodMonitor");
        assert_eq!(value["metadata"]["name"], "cache-valkey");
        assert_eq!(value["metadata"]["namespace"], "prod");
        assert_eq!(
            value["metadata"]["ownerReferences"][0]["kind"],
            "ValkeyCluster"
        );
        assert_eq!(value["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            value["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "valkey", "valkey.io/cluster": "cache"})
        );
        let endpoint = &value["spec"]["podMetricsEndpoints"][0];
        assert_eq!(endpoint["port"], "metrics");
        assert_eq!(endpoint["path"], "/metrics");
        assert_eq!(
            endpoint["relabelings"],
            json!([
                {"action": "replace", "targetLabel": "valkey_name", "replacement": "cache"},
                {"action": "replace", "targetLabel": "valkey_kind", "replacement": "cluster"},
            ])
        );
        // The member pods carry every label it selects by.
        let auth = crate::parent::node::NodeAuth::of("cache");
        for member in crate::cluster::desired::members(&c, &auth) {
            let labels = member.node.spec.pod_labels.clone().unwrap_or_default();
            for (k, v) in value["spec"]["selector"]["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
            {
                assert_eq!(labels.get(k).map(String::as_str), v.as_str(), "{k}");
            }
        }
    }

    #[test]
    fn no_pod_monitor_without_the_exporter_or_when_turned_off() {
        let plain = cluster(CLUSTER);
        assert!(desired(&parent_of(&plain), &plain.spec.metrics).is_none());
        let off = metered(", podMonitor: false");
        assert!(desired(&parent_of(&off), &off.spec.metrics).is_none());
    }

    fn resource_list(names: &[&str]) -> serde_json::Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "monitoring.coreos.com/v1",
            "resources": names.iter().map(|n| json!({"name": n, "singularName": "", "namespaced": true,
                "kind": "PodMonitor", "verbs": ["get", "patch"]})).collect::<Vec<_>>()})
    }

    /// With the kind: applied once, left alone while unchanged, deleted once when turned off.
    /// Without it: one discovery request, then none for a while, and nothing created.
    #[tokio::test]
    async fn applied_where_the_kind_exists_deleted_when_off_and_nothing_without_it() {
        let (client, mut api) = mock_client();
        let presence = KindPresence::default();
        let memory = ParentMemory::default();
        let on = metered("");
        let parent = parent_of(&on);
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/apis/monitoring.coreos.com/v1")
                .await
                .answer(StatusCode::OK, &resource_list(&["podmonitors"]));
            let apply = api
                .expect(
                    Method::PATCH,
                    "/apis/monitoring.coreos.com/v1/namespaces/prod/podmonitors/cache-valkey?",
                )
                .await;
            assert!(apply.uri.contains("fieldManager=valkey-cluster-controller"));
            assert_eq!(
                apply.body["spec"]["podMetricsEndpoints"][0]["port"],
                "metrics"
            );
            apply.echo();
            // Turned off: deleted (it may be gone already).
            api.expect(
                Method::DELETE,
                "/apis/monitoring.coreos.com/v1/namespaces/prod/podmonitors/cache-valkey",
            )
            .await
            .not_found();
            api.done().await;
        });
        let wanted = desired(&parent, &on.spec.metrics);
        for _ in 0..3 {
            ensure(&client, &presence, &parent, wanted.clone(), &memory)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for _ in 0..2 {
            ensure(&client, &presence, &parent, None, &memory)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        script.await.unwrap_or_else(|e| panic!("{e}"));

        // A cluster without the Prometheus operator: asked once, then trusted.
        let (client, mut api) = mock_client();
        let presence = KindPresence::default();
        let memory = ParentMemory::default();
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/apis/monitoring.coreos.com/v1")
                .await
                .not_found();
            api.done().await;
        });
        for _ in 0..3 {
            ensure(&client, &presence, &parent, wanted.clone(), &memory)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            memory.pod_monitor_applied(),
            None,
            "nothing remembered: a PodMonitor follows once the kind is installed"
        );
    }
}
