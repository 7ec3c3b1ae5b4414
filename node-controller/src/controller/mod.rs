//! The ValkeyNode controller: each pass ([`reconcile`]) builds the node's children from its spec,
//! asks Valkey and sets its live settings, applies what changed, and reports what it sees.
//!
//! | stage | module | Kubernetes? |
//! | --- | --- | --- |
//! | what a pass shares, what is kept per node | [`context`] | holds the client and caches |
//! | the pass, stage by stage, and the `Reconciler` that runs it | [`reconcile`] | |
//! | build the children | [`crate::render`] | no |
//! | the credentials and TLS Secrets | [`secrets`] | yes |
//! | what the caches keep of each child | [`keep`] | no |
//! | the children from the caches | [`observe`] | no (caches) |
//! | Valkey's own answer | [`crate::probe`] | no (Valkey) |
//! | Valkey's live settings | [`crate::live`] | no (Valkey) |
//! | apply the children | [`apply`] | yes |
//! | the data volume: applied, grown, reported | [`volume`] | yes |
//! | status and Events | [`report`] ([`crate::status`] computes) | yes |
//! | when to look at a node again | [`reread`] | no |
//! | the pod's role label | [`label`] | yes |
//! | what can fail | [`error`] | |

pub mod apply;
pub mod context;
pub mod error;
#[cfg(test)]
pub mod fixtures;
pub mod keep;
pub mod label;
pub mod observe;
pub mod reconcile;
pub mod report;
pub mod reread;
pub mod secrets;
pub mod volume;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use plumbing::index::LabelIndex;
use plumbing::secret_cache::SecretCache;
use valkey_api::v1alpha1::ValkeyNode;

use crate::names::{FIELD_MANAGER, NODE_LABEL};
use context::{Context, Stores};

pub const CONTROLLER: &str = "valkey-node-controller";

/// Runs the ValkeyNode controller until shutdown or lost leadership.
pub async fn run(handles: plumbing::Handles, render: crate::render::Options) {
    // Only our own children are cached: pods by their node label, the rest by managed-by.
    let ours =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    let nodes = handles.cache::<DeserializeGuard<ValkeyNode>>(watcher::Config::default());
    // Pods and workloads without their templates (see `keep`).
    let pods_by_node = LabelIndex::new(NODE_LABEL);
    let pods = handles
        .cache_keeping::<Pod>(watcher::Config::default().labels(NODE_LABEL), keep::pod)
        .indexed(pods_by_node.clone());
    let stateful_sets = handles.cache_keeping::<StatefulSet>(ours.clone(), keep::stateful_set);
    let deployments = handles.cache_keeping::<Deployment>(ours.clone(), keep::deployment);
    let config_maps = handles.cache::<ConfigMap>(ours.clone());
    let pvcs = handles.cache::<PersistentVolumeClaim>(ours);
    // Every Secret's metadata: the credentials and TLS Secrets the nodes name, read by name once
    // per change (see `plumbing::secret_cache`), and a change to one looks at its nodes at once.
    let secrets = handles.metadata_cache::<Secret>(watcher::Config::default());
    let stores = Stores {
        pods: pods.store(),
        pods_by_node,
        stateful_sets: stateful_sets.store(),
        deployments: deployments.store(),
        config_maps: config_maps.store(),
        pvcs: pvcs.store(),
        secrets: SecretCache::watched(handles.client.clone(), secrets.store()),
    };
    let mut ctx = Context::new(handles.client.clone(), handles.events.clone(), stores);
    ctx.render = render;
    handles
        .run(
            nodes,
            |controller| {
                let nodes = controller.store();
                controller
                    .watches_stream(secrets.touched(), move |secret| naming(&nodes, &secret))
                    .owns_stream(stateful_sets.touched())
                    .owns_stream(deployments.touched())
                    .owns_stream(config_maps.touched())
                    .watches_stream(pods.touched(), |pod| node_of(&pod))
                    .watches_stream(pvcs.touched(), |pvc| node_of(&pvc))
            },
            ctx,
        )
        .await;
}

/// The nodes that name `secret` (for their credentials or their TLS).
fn naming(
    nodes: &Store<DeserializeGuard<ValkeyNode>>,
    secret: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<DeserializeGuard<ValkeyNode>>> {
    let (namespace, name) = (secret.namespace(), secret.name_any());
    nodes
        .state()
        .iter()
        .filter(|guard| guard.namespace() == namespace)
        .filter(|guard| {
            guard.0.as_ref().is_ok_and(|node| {
                let credentials = node.spec.credentials.as_ref().map(|c| &c.secret_name);
                let tls = node.spec.tls.as_ref().map(|t| &t.secret_name);
                credentials == Some(&name) || tls == Some(&name)
            })
        })
        .map(|guard| ObjectRef::from_obj(guard.as_ref()))
        .collect()
}

/// Pods and PVCs point at their ValkeyNode through the `valkey.io/node` label.
fn node_of<K: Resource>(object: &K) -> Option<ObjectRef<DeserializeGuard<ValkeyNode>>> {
    let name = object.meta().labels.as_ref()?.get(NODE_LABEL)?;
    let namespace = object.meta().namespace.as_deref()?;
    Some(ObjectRef::new(name).within(namespace))
}
