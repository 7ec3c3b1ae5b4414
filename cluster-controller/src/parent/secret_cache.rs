//! The Secrets a parent reads (its own, and those its spec names), from a watch instead of a GET
//! each pass: [`SecretCache`] (see [`plumbing::secret_cache`] for how, and why a metadata watch
//! of every Secret), and which parents read a Secret that changed ([`readers`]), so that a change
//! starts their pass at once.

use k8s_openapi::api::core::v1::Secret;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
pub use plumbing::secret_cache::SecretCache;
use valkey_api::v1alpha1::{Auth, Tls};

use super::secret_names;

/// The Secrets the operator names after a parent called `parent`: its own (ACL, operator, CA,
/// certificate) and the clients' password it generates.
pub fn named_after(parent: &str) -> Vec<String> {
    vec![
        secret_names::acl_secret_name(parent),
        secret_names::operator_secret_name(parent),
        secret_names::generated_password_secret_name(parent),
        secret_names::ca_secret_name(parent),
        secret_names::certificate_secret_name(parent),
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
    use std::sync::Arc;
    use std::time::Duration;

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
