//! The Secrets a parent reads (its own, and those its spec names), from a watch instead of a GET
//! each pass.
//!
//! The controller watches the *metadata* of every Secret of the namespaces it watches, and keeps
//! the content only of the Secrets a pass read, each with the resourceVersion it was read at. A
//! read is answered from memory while the watch shows that version; a Secret that changed is read
//! again once (a GET), and a Secret the watch does not show does not exist (no request). So a
//! parent at rest costs no request for its Secrets, and a change to any Secret it reads starts
//! its pass ([`readers`]).
//!
//! Why the metadata of all Secrets rather than a label-selected watch of their content: a
//! parent reads Secrets of two sorts, its own (labelled) and the user's (a password, a
//! certificate named by the spec: any name, no label of ours), and both must start a pass when
//! they change or go. A field selector names one Secret per watch, so the user's Secrets would
//! need a watch each. A metadata watch of them all covers both with one request, and holds
//! a few hundred bytes per Secret (name, labels, owners, version; no annotations, no content)
//! where a watch of their content would hold every Secret of the namespace, the Helm releases'
//! and the service accounts' too, and pass their values through the controller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use valkey_api::v1alpha1::{Auth, Tls};

/// How long a pass waits, after writing a Secret, for the watch to show what it wrote: beyond
/// that the next read asks the API server.
const WRITE_SEEN_WITHIN: Duration = Duration::from_secs(2);

/// The Secrets a controller reads: the watch of their metadata, and the content last read.
pub struct SecretCache {
    client: kube::Client,
    /// Every Secret's metadata in the watched namespaces; `None` when the controller runs
    /// without the watch (the unit tests, which script each read): then every read asks.
    seen: Option<Store<PartialObjectMeta<Secret>>>,
    /// The content last read or written, by Secret, at the version it holds.
    values: Mutex<HashMap<ObjectKey, Arc<Secret>>>,
}

impl SecretCache {
    /// Reads answered by the watch `seen` (see the module's documentation).
    pub fn watched(client: kube::Client, seen: Store<PartialObjectMeta<Secret>>) -> Self {
        Self {
            client,
            seen: Some(seen),
            values: Mutex::default(),
        }
    }

    /// Every read asks the API server.
    pub fn unwatched(client: kube::Client) -> Self {
        Self {
            client,
            seen: None,
            values: Mutex::default(),
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

/// The Secrets the operator names after a parent called `parent`: its own (ACL, operator, CA,
/// certificate) and the clients' password it generates.
pub fn named_after(parent: &str) -> Vec<String> {
    vec![
        super::auth::acl_secret_name(parent),
        super::auth::operator_secret_name(parent),
        super::auth::generated_password_secret_name(parent),
        super::tls::ca_secret_name(parent),
        super::tls::certificate_secret_name(parent),
    ]
}

/// Every Secret a parent called `parent` with `auth` and `tls` may read: [`named_after`] it,
/// and those its spec names (the clients' and the users' passwords, a certificate).
pub fn read_by(parent: &str, auth: &Auth, tls: &Tls) -> Vec<String> {
    let mut names = named_after(parent);
    names.extend(auth.password_secret.iter().map(|r| r.name.clone()));
    names.extend(
        auth.users
            .iter()
            .flatten()
            .map(|u| u.password_secret.name.clone()),
    );
    names.extend(tls.certificate_secret.iter().cloned());
    names
}

/// The parents in `parents` that read `secret` (by the names `reads` gives for each): what a
/// change to the Secret starts a pass of.
pub fn readers<K>(
    parents: &Store<DeserializeGuard<K>>,
    secret: &PartialObjectMeta<Secret>,
    reads: impl Fn(&K) -> Vec<String>,
) -> Vec<ObjectRef<DeserializeGuard<K>>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    DeserializeGuard<K>: Resource<DynamicType = ()>,
{
    let namespace = secret.namespace();
    let name = secret.name_any();
    parents
        .state()
        .iter()
        .filter(|guard| guard.namespace() == namespace)
        .filter(|guard| {
            guard
                .0
                .as_ref()
                .is_ok_and(|parent| reads(parent).contains(&name))
        })
        .map(|guard| ObjectRef::from_obj(guard.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use kube::runtime::watcher::Event;
    use plumbing::testing::mock_client;

    fn meta(name: &str, version: &str) -> PartialObjectMeta<Secret> {
        let mut meta = PartialObjectMeta::<Secret>::default();
        meta.metadata.name = Some(name.into());
        meta.metadata.namespace = Some("prod".into());
        meta.metadata.resource_version = Some(version.into());
        meta
    }

    fn secret_json(name: &str, version: &str, value: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "prod", "resourceVersion": version},
            "data": {"password": base64(value)},
        })
    }

    fn base64(value: &str) -> String {
        serde_json::to_value(k8s_openapi::ByteString(value.as_bytes().to_vec()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_secret_is_read_once_per_version_and_a_secret_the_watch_lacks_is_not_asked_for() {
        let (client, mut api) = mock_client();
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(meta("pw", "1")));
        writer.apply_watcher_event(&Event::InitDone);
        let cache = SecretCache::watched(client, store);
        let script = tokio::spawn(async move {
            // One GET for version 1, one for version 2; nothing for the absent Secret.
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/pw")
                .await
                .answer(StatusCode::OK, &secret_json("pw", "1", "one"));
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/pw")
                .await
                .answer(StatusCode::OK, &secret_json("pw", "2", "two"));
            api.done().await;
        });
        let version = |s: Option<Arc<Secret>>| s.map(|s| s.resource_version().unwrap_or_default());
        for _ in 0..3 {
            let read = cache
                .get("prod", "pw")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(version(read), Some("1".into()));
        }
        writer.apply_watcher_event(&Event::Apply(meta("pw", "2")));
        for _ in 0..2 {
            let read = cache
                .get("prod", "pw")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(version(read), Some("2".into()));
        }
        let absent = cache
            .get("prod", "other")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(absent.is_none());
        writer.apply_watcher_event(&Event::Delete(meta("pw", "2")));
        let gone = cache
            .get("prod", "pw")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(gone.is_none(), "a deleted Secret is gone without a request");
        assert_eq!(cache.kept(), 0, "and its content is dropped");
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn a_secret_written_is_read_back_from_memory_once_the_watch_shows_it() {
        let (client, api) = mock_client();
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        let cache = SecretCache::watched(client, store);
        let written: Secret = serde_json::from_value(secret_json("pw", "7", "seven"))
            .unwrap_or_else(|e| panic!("{e}"));
        let watch = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.apply_watcher_event(&Event::Apply(meta("pw", "7")));
        };
        tokio::join!(cache.written(written), watch);
        let read = cache
            .get("prod", "pw")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            read.and_then(|s| s.resource_version()),
            Some("7".into()),
            "no request: the mock API would have failed it"
        );
        api.done().await;
    }
}
