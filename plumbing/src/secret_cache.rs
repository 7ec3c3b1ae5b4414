//! The Secrets a controller reads, from a watch instead of a GET each pass.
//!
//! The controller watches the *metadata* of every Secret of the namespaces it watches
//! ([`crate::Cache::metadata`]), and keeps the content only of the Secrets a pass read, each with
//! the resourceVersion it was read at. A read is answered from memory while the watch shows that
//! version; a Secret that changed is read again once (a GET), and a Secret the watch does not
//! show does not exist (no request). So an object at rest costs no request for its Secrets; the
//! watch's events tell its controller which objects read a Secret that changed.
//!
//! Why the metadata of all Secrets rather than a label-selected watch of their content: the
//! Secrets a controller reads are of two sorts, its own (labelled) and the user's (any name, no
//! label of ours), and both must be noticed when they change or go. A field selector names one
//! Secret per watch, so the user's Secrets would need a watch each. A metadata watch of them all
//! covers both with one request and holds a few hundred bytes per Secret (name, labels, owners,
//! version; no annotations, no content), where a watch of their content would hold every Secret
//! of the namespace, the Helm releases' and the service accounts' too, and pass their values
//! through the controller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::key::ObjectKey;

/// How long a pass waits, after writing a Secret, for the watch to show what it wrote: beyond
/// that the next read asks the API server.
const WRITE_SEEN_WITHIN: Duration = Duration::from_secs(2);

/// The Secrets a controller reads: the watch of their metadata, and the content last read.
/// Clones share both.
#[derive(Clone)]
pub struct SecretCache {
    client: kube::Client,
    /// Every Secret's metadata in the watched namespaces; `None` when the controller runs
    /// without the watch (the unit tests, which script each read): then every read asks.
    seen: Option<Store<PartialObjectMeta<Secret>>>,
    /// The content last read or written, by Secret, at the version it holds.
    values: Arc<Mutex<HashMap<ObjectKey, Arc<Secret>>>>,
}

impl SecretCache {
    /// Reads answered by the watch `seen` (see the module's documentation).
    pub fn watched(client: kube::Client, seen: Store<PartialObjectMeta<Secret>>) -> Self {
        Self {
            client,
            seen: Some(seen),
            values: Arc::default(),
        }
    }

    /// Every read asks the API server.
    pub fn unwatched(client: kube::Client) -> Self {
        Self {
            client,
            seen: None,
            values: Arc::default(),
        }
    }

    /// The Secret `name` of `namespace` as it is now; `None` when it does not exist.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let key = ObjectKey::new(namespace, name);
        let Some(seen) = &self.seen else {
            return self.fetch(namespace, name, key).await;
        };
        let Some(meta) = seen.get(&ObjectRef::new(name).within(namespace)) else {
            self.values().remove(&key);
            return Ok(None);
        };
        let known = self.values().get(&key).cloned();
        match known {
            Some(secret) if secret.resource_version() == meta.resource_version() => {
                Ok(Some(secret))
            }
            _ => self.fetch(namespace, name, key).await,
        }
    }

    /// Records `secret` as a write returned it, and waits (a short while) until the watch shows
    /// that version: a pass that starts before would otherwise find the Secret as it was before
    /// the write, or not at all, and write it again.
    pub async fn written(&self, secret: Secret) {
        let (Some(namespace), name) = (secret.namespace(), secret.name_any()) else {
            return;
        };
        let version = secret.resource_version();
        self.values()
            .insert(ObjectKey::new(&namespace, &name), Arc::new(secret));
        let Some(seen) = &self.seen else {
            return;
        };
        let reference = ObjectRef::new(&name).within(&namespace);
        let deadline = tokio::time::Instant::now() + WRITE_SEEN_WITHIN;
        while seen.get(&reference).map(|m| m.resource_version()) != Some(version.clone()) {
            if tokio::time::Instant::now() >= deadline {
                tracing::debug!(secret = %name, "the watch does not show the write yet");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Forgets the content of the Secrets of `namespace` named `names` (their parent is gone).
    pub fn forget(&self, namespace: &str, names: &[String]) {
        let mut values = self.values();
        for name in names {
            values.remove(&ObjectKey::new(namespace, name));
        }
    }

    /// How many Secrets' content is kept.
    pub fn kept(&self) -> usize {
        self.values().len()
    }

    async fn fetch(
        &self,
        namespace: &str,
        name: &str,
        key: ObjectKey,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await?.map(Arc::new);
        let mut values = self.values();
        match &found {
            Some(secret) if self.seen.is_some() => {
                values.insert(key, secret.clone());
            }
            _ => {
                values.remove(&key);
            }
        }
        Ok(found)
    }

    fn values(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Arc<Secret>>> {
        self.values.lock().unwrap_or_else(|e| e.into_inner())
    }
}
