//! What every pass of the ValkeyNode controller shares: the client, the watch caches of the
//! children, what this process last applied of each child, and the status it last wrote of each
//! node until the cache has seen it (forgotten when its node goes).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use plumbing::ObjectKey;
use plumbing::events::EventPublisher;
use plumbing::index::LabelIndex;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyNodeStatus};

/// Watch caches of everything the node-controller owns, so a pass reads no child from the API.
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    /// The pods' names by their node (the `valkey.io/node` label): a pass finds its own pods
    /// without looking at every pod of the fleet.
    pub pods_by_node: LabelIndex,
    pub stateful_sets: Store<StatefulSet>,
    pub deployments: Store<Deployment>,
    pub config_maps: Store<ConfigMap>,
    pub pvcs: Store<PersistentVolumeClaim>,
    /// The Secrets the nodes name (credentials, TLS), from a watch of their metadata.
    pub secrets: plumbing::secret_cache::SecretCache,
}

impl Stores {
    /// The pods of ValkeyNode `node` in `namespace` (terminating ones too), from the cache.
    pub fn pods_of(&self, namespace: &str, node: &str) -> Vec<Arc<Pod>> {
        self.pods_by_node
            .names(namespace, node)
            .into_iter()
            .filter_map(|name| self.pods.get(&ObjectRef::new(&name).within(namespace)))
            .collect()
    }
}

/// What was last applied of one child: the hash of the object sent and the resourceVersion
/// that came back. When both still match, the child is as applied and the pass sends nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub hash: String,
    pub version: String,
}

/// A status this process wrote, and the resourceVersion of the copy it was judged against.
struct Written {
    read_version: Option<String>,
    status: ValkeyNodeStatus,
}

pub struct Context {
    pub client: Client,
    pub events: EventPublisher,
    pub stores: Stores,
    /// Per node, per child (`Kind/name`): what this process last applied.
    applied: Mutex<HashMap<ObjectKey, HashMap<String, Applied>>>,
    /// Per node: the status last written, until the cache shows a newer copy of the node.
    written: Mutex<HashMap<ObjectKey, Written>>,
    /// Per node: the fingerprint (server run id and settings) of the live settings last set.
    live_set: Mutex<HashMap<ObjectKey, String>>,
    /// The credentials each Secret held when last read (see [`super::secrets::Known`]).
    pub credentials: super::secrets::Known,
    /// How this process builds children (the image of the restore init container).
    pub render: crate::render::Options,
}

impl Context {
    pub fn new(client: Client, events: EventPublisher, stores: Stores) -> Self {
        Self {
            client,
            events,
            stores,
            applied: Mutex::new(HashMap::new()),
            live_set: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            credentials: super::secrets::Known::default(),
            render: crate::render::Options::default(),
        }
    }

    pub fn last_applied(&self, node: &ObjectKey, child: &str) -> Option<Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)?
            .get(child)
            .cloned()
    }

    pub fn remember_applied(&self, node: &ObjectKey, child: String, applied: Applied) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.clone())
            .or_default()
            .insert(child, applied);
    }

    /// The fingerprint of the live settings last set on `node`'s server.
    pub fn live_set(&self, node: &ObjectKey) -> Option<String> {
        self.live_set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
    }

    pub fn remember_live_set(&self, node: &ObjectKey, fingerprint: String) {
        self.live_set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.clone(), fingerprint);
    }

    /// `node` as a pass is to judge it: as cached, or, while the cache still holds the copy a
    /// status write of this process was judged against, with the status written. The cache lags
    /// the API server (by seconds when thousands of nodes change at once); judged against the
    /// older copy, a pass would write the same status again, and a condition that had changed
    /// would seem to change once more, its lastTransitionTime moved to now.
    pub fn as_last_written<'n>(&self, node: &'n ValkeyNode) -> Cow<'n, ValkeyNode> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let key = ObjectKey::of(node);
        match written.get(&key) {
            Some(w) if w.read_version == node.metadata.resource_version => {
                let mut judged = node.clone();
                judged.status = Some(w.status.clone());
                Cow::Owned(judged)
            }
            // The cache has moved on (this write or a later change): it speaks for the node.
            Some(_) => {
                written.remove(&key);
                Cow::Borrowed(node)
            }
            None => Cow::Borrowed(node),
        }
    }

    /// `status` was written over `node` as the cache held it.
    pub fn remember_written(&self, node: &ValkeyNode, status: &ValkeyNodeStatus) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                ObjectKey::of(node),
                Written {
                    read_version: node.metadata.resource_version.clone(),
                    status: status.clone(),
                },
            );
    }

    /// Forgets what this process kept of the node `key` (its object is gone).
    pub fn forget(&self, key: &ObjectKey) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.live_set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// How many nodes this process remembers children of: what `forget` must bring down.
    #[cfg(test)]
    pub fn remembered_nodes(&self) -> usize {
        self.applied.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
