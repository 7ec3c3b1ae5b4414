//! A ValkeyCluster's `spec.restoreFrom`, in its pass (docs/design/backup.md, "Restore"): the
//! plan read once before any member exists (the backup, its store, the manifest), each shard's
//! first member given its snapshot, the engine given the manifest's slots until every slot was
//! served once; then, per first member, the append-only file turned on live and written before
//! its snapshot is cleared. The decisions are the floor's ([`crate::parent::restore`]); this is
//! their Kubernetes and Valkey side.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use serde_json::json;
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::client::ValkeyClient;
use crate::engine::Pass;
use crate::parent::conditions::Problem;
use crate::parent::context::ParentMemory;
use crate::parent::error::api_error;
use crate::parent::labels::member_name;
use crate::parent::node::DesiredMember;
use crate::parent::restore::{
    self, Aof, FirstMember, SERVED_ANNOTATION, ShardRestore, first_member, keep_member,
    restore_member, turn_aof_on,
};
use crate::parent::stop::Stop;
use crate::valkey::slots::SlotSet;

const KIND: &str = "ValkeyCluster";

/// The restore's plan, from memory or read now; `None` without `restoreFrom`, or once every slot
/// was served (nothing of it is needed then: the first members keep what they have). A problem
/// (no such backup, not Completed, the manifest unreadable or of another shape or shard count)
/// stops the pass, so no member is created empty.
pub async fn plan(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &ObjectKey,
    memory: &ParentMemory,
) -> Result<Option<Arc<Vec<ShardRestore>>>, Stop> {
    let Some(from) = cluster.spec.restore_from.as_ref() else {
        return Ok(None);
    };
    if restore::served(cluster.annotations()) {
        return Ok(None);
    }
    if let Some(plan) = memory.restore_plan() {
        return Ok(Some(plan));
    }
    let namespace = key.namespace();
    let backup = match &from.backup {
        Some(name) => find_backup(ctx, namespace, name)
            .await
            .map_err(|e| Stop::error(e, &ctx.stage_failures, key))?,
        None => None,
    };
    let source = restore::source(from, backup.as_ref()).map_err(problem)?;
    let store = match crate::backup::store::open(&ctx.client, namespace, &source.store).await {
        Ok(store) => store,
        Err(crate::backup::store::Unopened::Problem(p)) => {
            return Err(Stop::problem(Problem {
                reason: p.reason,
                message: format!("the backup's store: {}", p.message),
            }));
        }
        Err(crate::backup::store::Unopened::Api(e)) => {
            let error = api_error("reading the backup store's Secrets")(e);
            return Err(Stop::error(error, &ctx.stage_failures, key));
        }
    };
    let manifest = restore::read_manifest(&store, &source.location)
        .await
        .map_err(problem)?;
    let shards = restore::shards(&source, &manifest, KIND).map_err(problem)?;
    let wanted = u32::try_from(cluster.spec.shards.max(1)).unwrap_or(1);
    restore::fits(&shards, wanted, &source.location).map_err(problem)?;
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
        reason: p.reason.into(),
        message: p.message,
    })
}

/// The ValkeyBackup `name` of `namespace`: the role lists ValkeyBackups but does not get one.
async fn find_backup(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<ValkeyBackup>, crate::parent::error::Error> {
    let api: Api<ValkeyBackup> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let list = api
        .list(&params)
        .await
        .map_err(api_error(format!("reading ValkeyBackup {name}")))?;
    Ok(list.items.into_iter().find(|b| b.name_any() == name))
}

/// Gives each shard's first member what the restore asks of it in this pass (see
/// [`first_member`]); nothing for a cluster without `restoreFrom`.
pub fn shape_members(
    cluster: &ValkeyCluster,
    plan: Option<&[ShardRestore]>,
    memory: &ParentMemory,
    desired: &mut [DesiredMember],
    existing: &[Arc<ValkeyNode>],
) {
    if cluster.spec.restore_from.is_none() {
        return;
    }
    let served = restore::served(cluster.annotations());
    let persistent = cluster.spec.persistence.enabled;
    let replicas = u32::try_from(cluster.spec.replicas.max(0)).unwrap_or(0);
    for member in desired.iter_mut().filter(|m| m.index == 0) {
        let has = existing
            .iter()
            .find(|n| n.name_any() == member.name)
            .and_then(|n| n.spec.initial_data.as_ref());
        let aof = memory.restore_aof(&member.name);
        match first_member(served, has, persistent, replicas, aof) {
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

/// The slots the engine gives each shard's first member: the plan's, until every slot was
/// served once, and never after.
pub fn slots(plan: Option<&[ShardRestore]>) -> Option<Vec<SlotSet>> {
    plan.map(|p| p.iter().map(|s| s.slots.clone()).collect())
}

/// After the engine's pass: records that every slot was served (once), what each restored first
/// member's append-only file is, and turns it on live where the spec wants persistence and the
/// member still runs on its snapshot alone.
pub async fn after_pass<C: ValkeyClient>(
    ctx: &Context,
    cluster: &ValkeyCluster,
    memory: &ParentMemory,
    client: &C,
    pass: &Pass,
    existing: &[Arc<ValkeyNode>],
) {
    if cluster.spec.restore_from.is_none() {
        return;
    }
    let mut served = restore::served(cluster.annotations());
    if !served && restore::every_slot_served(pass.health.as_ref().map(|h| h.slots_assigned)) {
        match record_served(ctx, cluster).await {
            Ok(()) => served = true,
            Err(error) => tracing::warn!(%error, "the restore's end could not be recorded"),
        }
    }
    let Some(name) = cluster.meta().name.as_deref() else {
        return;
    };
    let persistent = cluster.spec.persistence.enabled;
    for shard in 0..u32::try_from(cluster.spec.shards.max(1)).unwrap_or(1) {
        let member = member_name(name, shard, 0);
        let has_snapshot = existing
            .iter()
            .any(|n| n.name_any() == member && n.spec.initial_data.is_some());
        let state = pass.observation.state(&member);
        let aof = state.and_then(|s| Aof::of(|k| s.info().get(k).map(str::to_owned)));
        memory.note_restore_aof(&member, aof);
        let Some(state) = state else { continue };
        if turn_aof_on(served, has_snapshot, persistent, aof) {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("SET").arg("appendonly").arg("yes");
            match client
                .command(state.address(), &cmd, Duration::from_secs(5))
                .await
            {
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

/// Records on the cluster that every slot of its restore was served once.
async fn record_served(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<(), crate::parent::error::Error> {
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let name = cluster.name_any();
    let patch = json!({"metadata": {"annotations": {SERVED_ANNOTATION: "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!(
            "recording the restore's end on ValkeyCluster {name}"
        )))?;
    tracing::info!("every slot of the restored cluster has been served");
    Ok(())
}
