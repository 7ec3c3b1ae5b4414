//! The apply stage: each child server-side applied, and only when it differs from what this
//! process last applied or someone changed the live object since (its generation, or its
//! resourceVersion for a kind without one: see `plumbing::apply::written_version`); an Event when this controller created a
//! child or changed what it wants of one.

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use plumbing::ObjectKey;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use valkey_api::v1alpha1::ValkeyNode;

use super::context::{Applied, Context};
use super::error::Error;
use crate::names::FIELD_MANAGER;

/// Server-side applies `object` unless it is exactly as this process last applied it.
pub async fn child<K>(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    object: &K,
    store: &Store<K>,
) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let namespace = key.namespace();
    let name = object.meta().name.clone().unwrap_or_default();
    let child = format!("{kind}/{name}");
    let hash = hex::encode(Sha256::digest(
        serde_json::to_vec(object).unwrap_or_default(),
    ));
    let live = store.get(&ObjectRef::new(&name).within(namespace));
    // The generation where the kind has one: a StatefulSet's status moves with every pod
    // that comes or goes, and re-sending an unchanged workload for each was a write for nothing.
    let live_version = live
        .as_ref()
        .and_then(|l| plumbing::apply::written_version(l.meta()));
    let last = ctx.last_applied(key, &child);
    if let (Some(last), Some(live_version)) = (&last, &live_version)
        && last.hash == hash
        && last.version == *live_version
    {
        return Ok(());
    }

    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let result = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: static_kind::<K>(),
            name: name.clone(),
            source,
        })?;
    let new_version = plumbing::apply::written_version(result.meta()).unwrap_or_default();
    ctx.remember_applied(
        key,
        child,
        Applied {
            hash: hash.clone(),
            version: new_version,
        },
    );

    // Events for what this controller decided: a create, or a change of what it wants. (Other
    // writers move resourceVersions all the time, so a moved version proves nothing.)
    let note = match (&live, &last) {
        (None, _) => Some(("Created", format!("Created {kind} {name}."))),
        (Some(_), Some(last)) if last.hash != hash => Some((
            "Updated",
            format!("Updated {kind} {name} to match the ValkeyNode."),
        )),
        _ => None,
    };
    if let Some((reason, note)) = note {
        let reason = format!("{reason}{kind}");
        ctx.events.normal(node, &reason, "Apply", &note).await;
    }
    Ok(())
}

/// An apply the API refused as invalid (422) is a fact to report, not an error to retry.
pub fn invalid(result: Result<(), Error>) -> Result<Option<String>, Error> {
    match result {
        Ok(()) => Ok(None),
        Err(Error::Apply {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 422 => Ok(Some(status.message)),
        Err(e) => Err(e),
    }
}

fn static_kind<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "StatefulSet" => "StatefulSet",
        "Deployment" => "Deployment",
        "ConfigMap" => "ConfigMap",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        _ => "object",
    }
}
