//! `spec.restoreFrom` in a parent's pass, for any kind (docs/design/backup.md, "Restore"): the
//! plan read once before any member exists (the backup, its store, the manifest), each shard's
//! first member given its snapshot, the moment the restore is served recorded on the object,
//! then per first member the append-only file turned on live and written before its snapshot is
//! cleared. The decisions are [`super::restore`]'s; this is their Kubernetes and Valkey side. A
//! kind brings what only it knows: when its restore is served (a cluster: every slot; a
//! replication: its restored member recorded and serving as the primary), and where its first
//! members' servers are.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use plumbing::backoff::Backoff;
use serde::de::DeserializeOwned;
use serde_json::json;
use valkey_api::v1alpha1::{RestoreFrom, ValkeyBackup, ValkeyNode};

use super::conditions::Problem;
use super::context::ParentMemory;
use super::error::{Error, api_error};
use super::node::DesiredMember;
use super::restore::{
    self, Aof, FirstMember, SERVED_ANNOTATION, ShardRestore, first_member, keep_member,
    restore_member, turn_aof_on,
};
use super::stop::Stop;
use crate::client::ValkeyClient;
use crate::valkey::commands;

/// What a restore needs of its parent object.
pub struct Restoring<'a, K> {
    pub object: &'a K,
    /// `ValkeyCluster` or `ValkeyReplication`: the kind the manifest must be of.
    pub kind: &'static str,
    pub from: Option<&'a RestoreFrom>,
    /// Replicas per shard.
    pub replicas: u32,
    /// `spec.persistence.enabled`.
    pub persistent: bool,
}

impl<K: Resource> Restoring<'_, K> {
    /// Whether the object records that its restore was served once.
    pub fn served(&self) -> bool {
        restore::served(self.object.annotations())
    }
}

/// The restore's plan, from memory or read now; `None` without `restoreFrom`, or once the
/// restore was served (nothing of it is needed then: the first members keep what they have). A
/// problem (no such backup, not Completed, the manifest unreadable or of another kind's shape)
/// stops the pass, so no member is created empty.
pub async fn plan<K: Resource>(
    client: &kube::Client,
    failures: &Backoff,
    parent: &Restoring<'_, K>,
    key: &ObjectKey,
    memory: &ParentMemory,
) -> Result<Option<Arc<Vec<ShardRestore>>>, Stop> {
    let Some(from) = parent.from else {
        return Ok(None);
    };
    if parent.served() {
        return Ok(None);
    }
    if let Some(plan) = memory.restore_plan() {
        return Ok(Some(plan));
    }
    let namespace = key.namespace();
    let backup = match &from.backup {
        Some(name) => find_backup(client, namespace, name)
            .await
            .map_err(|e| Stop::error(e, failures, key))?,
        None => None,
    };
    let source = restore::source(from, backup.as_ref()).map_err(problem)?;
    let store = match crate::backup::store::open(client, namespace, &source.store).await {
        Ok(store) => store,
        Err(crate::backup::store::Unopened::Problem(p)) => {
            return Err(Stop::problem(Problem {
                reason: p.reason,
                message: format!("the backup's store: {}", p.message),
            }));
        }
        Err(crate::backup::store::Unopened::Api(e)) => {
            let error = api_error("reading the backup store's Secrets")(e);
            return Err(Stop::error(error, failures, key));
        }
    };
    let manifest = restore::read_manifest(&store, &source.location)
        .await
        .map_err(problem)?;
    // Any count of shards: a cluster is restored at the backup's and resharded online after
    // (`crate::cluster::restore::shards_now`); a replication's manifest has one, or is refused.
    let shards = restore::shards(&source, &manifest, parent.kind).map_err(problem)?;
    tracing::info!(
        location = %source.location,
        shards = shards.len(),
        "restoring from the backup at {}",
        source.location
    );
    let plan = Arc::new(shards);
    memory.remember_restore_plan(plan.clone());
    Ok(Some(plan))
}

fn problem(p: restore::Problem) -> Stop {
    Stop::problem(Problem {
        reason: p.reason,
        message: p.message,
    })
}

/// The ValkeyBackup `name` of `namespace`: the role lists ValkeyBackups but does not get one.
async fn find_backup(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<ValkeyBackup>, Error> {
    let api: Api<ValkeyBackup> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let list = api
        .list(&params)
        .await
        .map_err(api_error(format!("reading ValkeyBackup {name}")))?;
    Ok(list.items.into_iter().find(|b| b.name_any() == name))
}

/// Gives each shard's first member what the restore asks of it in this pass (see
/// [`first_member`]); nothing for an object without `restoreFrom`.
pub fn shape_members<K: Resource>(
    parent: &Restoring<'_, K>,
    plan: Option<&[ShardRestore]>,
    memory: &ParentMemory,
    desired: &mut [DesiredMember],
    existing: &[Arc<ValkeyNode>],
) {
    if parent.from.is_none() {
        return;
    }
    let served = parent.served();
    for member in desired.iter_mut().filter(|m| m.index == 0) {
        let has = existing
            .iter()
            .find(|n| n.name_any() == member.name)
            .and_then(|n| n.spec.initial_data.as_ref());
        let aof = memory.restore_aof(&member.name);
        match first_member(served, has, parent.persistent, parent.replicas, aof) {
            FirstMember::Restore => {
                if let Some(shard) = plan.and_then(|p| p.get(member.shard as usize)) {
                    restore_member(&mut member.node.spec, shard);
                }
            }
            FirstMember::Keep => {
                if let Some(data) = has {
                    keep_member(&mut member.node.spec, data);
                }
            }
            FirstMember::Clear => {}
        }
    }
}

/// A restored first member as the engine's pass saw it: `None` when it did not answer, else its
/// address and its append-only file (`None`: INFO did not say).
pub type FirstSeen = Option<(SocketAddr, Option<Aof>)>;

/// After the engine's pass: records that the restore was served (once: `served_now`, the kind's
/// judgement of this pass), what each first member's append-only file is, and turns it on live
/// where the spec wants persistence and the member still runs on its snapshot alone.
pub async fn after_pass<K, C>(
    client: &kube::Client,
    parent: &Restoring<'_, K>,
    memory: &ParentMemory,
    valkey: &C,
    served_now: bool,
    existing: &[Arc<ValkeyNode>],
    first_members: impl IntoIterator<Item = (String, FirstSeen)>,
) where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
    C: ValkeyClient,
{
    if parent.from.is_none() {
        return;
    }
    let mut served = parent.served();
    if !served && served_now {
        match record_served(client, parent).await {
            Ok(()) => served = true,
            Err(error) => tracing::warn!(%error, "the restore's end could not be recorded"),
        }
    }
    for (member, seen) in first_members {
        let has_snapshot = existing
            .iter()
            .any(|n| n.name_any() == member && n.spec.initial_data.is_some());
        let aof = seen.and_then(|(_, aof)| aof);
        memory.note_restore_aof(&member, aof);
        let Some((address, _)) = seen else { continue };
        if turn_aof_on(served, has_snapshot, parent.persistent, aof) {
            let cmd = commands::config_set("appendonly", "yes");
            match valkey.command(address, &cmd, Duration::from_secs(5)).await {
                Ok(_) => tracing::info!(
                    member,
                    "append-only file turned on live on the restored first member"
                ),
                Err(error) => tracing::warn!(
                    member,
                    %error,
                    "the append-only file could not be turned on; tried again next pass"
                ),
            }
        }
    }
}

/// Records on the object that its restore was served once.
async fn record_served<K>(client: &kube::Client, parent: &Restoring<'_, K>) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let object = parent.object;
    let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
    let name = object.name_any();
    let patch = json!({"metadata": {"annotations": {SERVED_ANNOTATION: "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!(
            "recording the restore's end on {} {name}",
            parent.kind
        )))?;
    tracing::info!(kind = parent.kind, "the restored data is served");
    Ok(())
}

/// What a scripted pass of any kind sees of a restore.
#[cfg(test)]
pub mod script {
    use http::Method;
    use plumbing::testing::{ApiServer, Received};

    /// Answers the pass's look for ValkeyBackup `name` of `namespace` (a list by name: the
    /// role may list, not get): there is none.
    pub async fn no_backup(api: &mut ApiServer, namespace: &str, name: &str) {
        let list = api
            .expect(
                Method::GET,
                &format!("/apis/valkey.io/v1alpha1/namespaces/{namespace}/valkeybackups?"),
            )
            .await;
        assert!(
            list.uri
                .contains(&format!("fieldSelector=metadata.name%3D{name}")),
            "{}",
            list.uri
        );
        list.answer(
            http::StatusCode::OK,
            &serde_json::json!({
                "apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyBackupList",
                "metadata": {}, "items": []
            }),
        );
    }

    /// The status patch says the backup `name` is missing, naming it.
    pub fn names_missing_backup(status: &Received, name: &str) {
        assert_eq!(status.body["status"]["reason"], "RestoreBackupNotFound");
        let message = status.body["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains(&format!("ValkeyBackup {name}")),
            "{message}"
        );
    }
}
