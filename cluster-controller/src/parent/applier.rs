//! One road to own a child object (a Service, a disruption budget, a NetworkPolicy): applied
//! only when what the pass wants of it changed or the live object moved since this controller
//! last wrote it, and deleted, by its parent's label, when the parent no longer wants it.
//!
//! What tells "changed" is a fingerprint of the desired object and the live object's generation
//! (its resourceVersion for a kind without one; see `plumbing::apply::written_version`: a
//! budget's status moves whenever a member's pod does, its generation only with its spec), from
//! the watch cache of the child's kind: a child someone edited or deleted
//! is written again at once (the watch starts the parent's pass), and a child as it was left
//! costs no request. It replaces the per-kind memories ("apply only if it changed" with a
//! timed refresh, since nothing watched those children).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::error::{Error, api_error};
use super::labels::FIELD_MANAGER;

/// What this controller last wrote of one child: the fingerprint of what it wanted, and the
/// version (generation or resourceVersion) the API server gave back.
#[derive(Clone, Debug, PartialEq)]
struct Written {
    fingerprint: String,
    version: String,
}

/// A child of one parent: its kind and name.
type ChildKey = (String, String);

/// The children a controller applies, by parent, kind and name: what it last wrote of each.
#[derive(Default)]
pub struct Applier {
    written: Mutex<HashMap<ObjectKey, HashMap<ChildKey, Written>>>,
}

/// A kind of child the applier handles: namespaced, cached by a watch, applied whole.
pub trait Child:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

impl Applier {
    /// Applies `wanted` (server-side, this controller's field manager) unless the live object in
    /// `live` is the one this controller last wrote of the same fingerprint. True when it wrote.
    pub async fn apply<K: Child>(
        &self,
        client: &kube::Client,
        parent: &ObjectKey,
        live: &Store<K>,
        wanted: &K,
    ) -> Result<bool, Error> {
        let namespace = parent.namespace();
        let name = wanted.name_any();
        let key = (K::kind(&()).into_owned(), name.clone());
        let fingerprint = fingerprint(wanted);
        let version = live
            .get(&ObjectRef::new(&name).within(namespace))
            .and_then(|o| plumbing::apply::written_version(o.meta()));
        let known = self
            .lock()
            .get(parent)
            .and_then(|children| children.get(&key))
            .cloned();
        if let (Some(known), Some(version)) = (&known, &version)
            && known.fingerprint == fingerprint
            && known.version == *version
        {
            return Ok(false);
        }
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let written = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(wanted),
            )
            .await
            .map_err(api_error(format!("applying {} {name}", K::kind(&()))))?;
        self.lock().entry(parent.clone()).or_default().insert(
            key,
            Written {
                fingerprint,
                version: plumbing::apply::written_version(written.meta()).unwrap_or_default(),
            },
        );
        Ok(true)
    }

    /// Deletes every `K` of the parent's namespace in `live` labelled `label=value` whose name
    /// is not in `wanted` (a child the parent no longer wants). True when it deleted one.
    pub async fn delete_unwanted<K: Child>(
        &self,
        client: &kube::Client,
        parent: &ObjectKey,
        live: &Store<K>,
        (label, value): (&str, &str),
        wanted: &[String],
    ) -> Result<bool, Error> {
        let namespace = parent.namespace();
        let unwanted: Vec<String> = live
            .state()
            .iter()
            .filter(|o| o.namespace().as_deref() == Some(namespace))
            .filter(|o| o.labels().get(label).map(String::as_str) == Some(value))
            .map(|o| o.name_any())
            .filter(|name| !wanted.contains(name))
            .collect();
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        for name in &unwanted {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => {
                    return Err(api_error(format!("deleting {} {name}", K::kind(&())))(e));
                }
            }
            self.forget_child::<K>(parent, name);
        }
        Ok(!unwanted.is_empty())
    }

    /// Deletes the parent's child `K` `name` when `live` holds it (a child the parent turned
    /// off). True when it deleted it.
    pub async fn delete<K: Child>(
        &self,
        client: &kube::Client,
        parent: &ObjectKey,
        live: &Store<K>,
        name: &str,
    ) -> Result<bool, Error> {
        let namespace = parent.namespace();
        self.forget_child::<K>(parent, name);
        if live.get(&ObjectRef::new(name).within(namespace)).is_none() {
            return Ok(false);
        }
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(api_error(format!("deleting {} {name}", K::kind(&())))(e)),
        }
    }

    /// Forgets every child of `parent` (it is gone).
    pub fn forget(&self, parent: &ObjectKey) {
        self.lock().remove(parent);
    }

    /// How many parents have children remembered.
    pub fn parents(&self) -> usize {
        self.lock().len()
    }

    fn forget_child<K: Resource<DynamicType = ()>>(&self, parent: &ObjectKey, name: &str) {
        if let Some(children) = self.lock().get_mut(parent) {
            children.remove(&(K::kind(&()).into_owned(), name.to_owned()));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, HashMap<ChildKey, Written>>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A short fingerprint of what is wanted of an object.
fn fingerprint<K: Serialize>(object: &K) -> String {
    hex::encode(Sha256::digest(
        serde_json::to_vec(object).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::runtime::watcher::Event;
    use plumbing::testing::mock_client;
    use serde_json::json;

    const BUDGETS: &str = "/apis/policy/v1/namespaces/prod/poddisruptionbudgets";

    /// A budget as the cache would hold it (`generation` and `version`), or as wanted (none).
    fn budget(name: &str, live: Option<(i64, &str)>, min: i32) -> PodDisruptionBudget {
        let mut object = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "prod", "labels": {"valkey.io/cluster": "cache"}},
            "spec": {"minAvailable": min},
        });
        if let Some((generation, version)) = live {
            object["metadata"]["uid"] = json!("u");
            object["metadata"]["generation"] = json!(generation);
            object["metadata"]["resourceVersion"] = json!(version);
        }
        serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_child_is_written_when_wanted_differently_or_changed_and_deleted_when_unwanted() {
        let (client, mut api) = mock_client();
        let (live, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(budget(
            "cache-shard-9",
            Some((1, "3")),
            1,
        )));
        writer.apply_watcher_event(&Event::InitDone);
        let parent = ObjectKey::new("prod", "cache");
        let applier = Applier::default();
        let script = tokio::spawn(async move {
            // The first apply, then one after someone edited the budget, then one for a new spec.
            for generation in [1, 3, 4] {
                let sent = api
                    .expect(Method::PATCH, &format!("{BUDGETS}/cache-shard-0?"))
                    .await;
                let mut answer = sent.body.clone();
                answer["metadata"]["uid"] = json!("u");
                answer["metadata"]["generation"] = json!(generation);
                sent.answer(StatusCode::OK, &answer);
            }
            api.expect(Method::DELETE, &format!("{BUDGETS}/cache-shard-9"))
                .await
                .answer(
                    StatusCode::OK,
                    &json!({"kind": "Status", "status": "Success"}),
                );
            api.done().await;
        });
        let wanted = budget("cache-shard-0", None, 1);
        let apply = |w: &PodDisruptionBudget| {
            let w = w.clone();
            let (client, live, applier, parent) = (&client, &live, &applier, &parent);
            async move {
                applier
                    .apply(client, parent, live, &w)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        };
        assert!(apply(&wanted).await, "not in the cache: written");
        writer.apply_watcher_event(&Event::Apply(budget("cache-shard-0", Some((1, "5")), 1)));
        assert!(!apply(&wanted).await, "as written: nothing sent");
        // Its status moved (a member's pod came back): the same generation, nothing to send.
        writer.apply_watcher_event(&Event::Apply(budget("cache-shard-0", Some((1, "6")), 1)));
        assert!(
            !apply(&wanted).await,
            "a status change is not a change of ours"
        );
        writer.apply_watcher_event(&Event::Apply(budget("cache-shard-0", Some((2, "7")), 2)));
        assert!(apply(&wanted).await, "edited by someone: written again");
        writer.apply_watcher_event(&Event::Apply(budget("cache-shard-0", Some((3, "8")), 1)));
        assert!(!apply(&wanted).await);
        assert!(
            apply(&budget("cache-shard-0", None, 2)).await,
            "wanted differently"
        );
        let deleted = applier
            .delete_unwanted(
                &client,
                &parent,
                &live,
                ("valkey.io/cluster", "cache"),
                &["cache-shard-0".to_owned()],
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(deleted, "the budget of a shard gone");
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(applier.parents(), 1);
        applier.forget(&parent);
        assert_eq!(applier.parents(), 0);
    }
}
