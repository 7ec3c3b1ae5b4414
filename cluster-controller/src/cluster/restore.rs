//! A ValkeyCluster's `spec.restoreFrom`, in its pass (docs/design/backup.md, "Restore"): the
//! shared restore ([`crate::parent::restoring`]) with what only a cluster knows: its shards, the
//! manifest's slots the engine gives each shard's first member until every slot was served once,
//! and that moment as the restore's end. A backup of another shard count than the spec's is
//! restored at the backup's count, and resharded online to the spec's after that moment by the
//! engine's ordinary scale-out or scale-in: slots move with their keys, so nothing restored is
//! ever split outside Valkey's own migration.

use std::sync::Arc;

use kube::Resource;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::client::ValkeyClient;
use crate::engine::Pass;
use crate::parent::context::ParentMemory;
use crate::parent::labels::{member_name, position};
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
        replicas: u32::try_from(cluster.spec.replicas.max(0)).unwrap_or(0),
        persistent: cluster.spec.persistence.enabled,
    }
}

/// How many shards the cluster has in this pass: the backup's (`restoring`, the plan's count:
/// there is a plan only until the restore is served), else the spec's.
pub fn shards_now(cluster: &ValkeyCluster, restoring: Option<usize>) -> u32 {
    match restoring {
        Some(count) if count > 0 => u32::try_from(count).unwrap_or(u32::MAX),
        _ => spec_shards(cluster),
    }
}

fn spec_shards(cluster: &ValkeyCluster) -> u32 {
    u32::try_from(cluster.spec.shards.max(1)).unwrap_or(1)
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
    // The shards there are: the spec's, and those restored at the backup's count beyond it
    // until a scale-in takes them away.
    let shards = existing
        .iter()
        .filter_map(|n| position(n.metadata.labels.as_ref()))
        .map(|(shard, _)| shard + 1)
        .fold(spec_shards(cluster), u32::max);
    let first_members = (0..shards).map(|shard| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::{CLUSTER, cluster};

    /// A backup of two shards restored into a spec of three: two shards until the restore is
    /// served (the plan is there only until then), the spec's three after.
    #[test]
    fn a_restore_runs_at_the_backups_shard_count_until_it_is_served() {
        let c = cluster(CLUSTER);
        assert_eq!(shards_now(&c, Some(2)), 2);
        assert_eq!(shards_now(&c, None), 3);
        assert_eq!(shards_now(&c, Some(0)), 3, "an empty plan is no count");
    }
}
