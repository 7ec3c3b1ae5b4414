//! A ValkeyCluster's `spec.restoreFrom`, in its pass (docs/design/backup.md, "Restore"): the
//! shared restore ([`crate::parent::restoring`]) with what only a cluster knows: its shards, the
//! manifest's slots the engine gives each shard's first member until every slot was served once,
//! and that moment as the restore's end.

use std::sync::Arc;

use kube::Resource;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::client::ValkeyClient;
use crate::engine::Pass;
use crate::parent::context::ParentMemory;
use crate::parent::labels::member_name;
use crate::parent::restore::{self, Aof, ShardRestore};
use crate::parent::restoring::{self, Restoring};
use crate::valkey::slots::SlotSet;

/// What the shared restore ([`crate::parent::restoring`]: the plan, the first members' shape)
/// needs of a ValkeyCluster.
pub fn restoring(cluster: &ValkeyCluster) -> Restoring<'_, ValkeyCluster> {
    Restoring {
        object: cluster,
        kind: "ValkeyCluster",
        from: cluster.spec.restore_from.as_ref(),
        shards: u32::try_from(cluster.spec.shards.max(1)).unwrap_or(1),
        replicas: u32::try_from(cluster.spec.replicas.max(0)).unwrap_or(0),
        persistent: cluster.spec.persistence.enabled,
    }
}

/// The slots the engine gives each shard's first member: the plan's, until every slot was
/// served once, and never after.
pub fn slots(plan: Option<&[ShardRestore]>) -> Option<Vec<SlotSet>> {
    plan.map(|p| p.iter().map(|s| s.slots.clone()).collect())
}

/// After the engine's pass: the restore is served once the pass saw every slot served; each
/// shard's first member's append-only file, from the pass's own `INFO persistence`.
pub async fn after_pass<C: ValkeyClient>(
    ctx: &Context,
    cluster: &ValkeyCluster,
    memory: &ParentMemory,
    client: &C,
    pass: &Pass,
    existing: &[Arc<ValkeyNode>],
) {
    let parent = restoring(cluster);
    let (Some(_), Some(name)) = (parent.from, cluster.meta().name.as_deref()) else {
        return;
    };
    let served_now = restore::every_slot_served(pass.health.as_ref().map(|h| h.slots_assigned));
    let first_members = (0..parent.shards).map(|shard| {
        let member = member_name(name, shard, 0);
        let seen = pass.observation.state(&member).map(|s| {
            let aof = Aof::of(|k| s.info().get(k).map(str::to_owned));
            (s.address(), aof)
        });
        (member, seen)
    });
    restoring::after_pass(
        &ctx.client,
        &parent,
        memory,
        client,
        served_now,
        existing,
        first_members,
    )
    .await;
}
