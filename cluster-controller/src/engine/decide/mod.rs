//! The pure heart of the engine: from the spec, the members and one observation, the one next
//! step. Rules are tried in a fixed order and the first that has something to say wins, so a
//! later rule may assume every earlier one is satisfied:
//!
//! 1. the spec is valid and every wanted member exists;
//! 2. members know each other at their current addresses (MEET);
//! 3. failed primaries are being replaced by Valkey (wait), every staying member is live;
//! 4. node ids that belong to no member are forgotten (slots of a dead primary without a
//!    replica are declared lost);
//! 5. settled nodes admit replicas (the replication user is fenced on every start);
//! 6. open migrations are finished or rolled back;
//! 7. every slot has an owner (ADDSLOTS at formation or after a loss);
//! 8. replicas replicate their shard's primary;
//! 9. slots move until the wanted shards hold them evenly (leaving shards are drained);
//! 10. leaving members hand over, are forgotten, and deleted;
//! 11. the cluster is whole (replicas in sync, `cluster_state:ok`, everyone connected);
//! 12. outdated members restart one at a time;
//! 13. otherwise the cluster is steady.

mod failure;
mod fence;
mod health;
mod membership;
mod removal;
mod replicas;
mod rolling;
mod slots;
mod topology;

use std::collections::BTreeMap;

pub use slots::ATOMIC_MAX_ATTEMPTS;

use super::decision::{Decision, Health, Reason};
use super::member::{Desired, Member};
use super::observe::Observation;
use topology::Topology;

/// Decides the one next step. Pure: the same inputs give the same decision.
pub fn decide(desired: &Desired, members: &[Member], observed: &Observation) -> Decision {
    if let Some(decision) = check_spec(desired, members) {
        return decision;
    }
    let t = Topology::new(desired, members, observed);
    membership::meet(&t)
        .or_else(|| failure::failing_primaries(&t))
        .or_else(|| failure::unreachable(&t))
        .or_else(|| failure::strangers(&t))
        .or_else(|| fence::admit(&t, observed.fence_user.as_deref()))
        .or_else(|| slots::open_migrations(&t))
        .or_else(|| slots::coverage(&t))
        .or_else(|| replicas::attach(&t))
        .or_else(|| slots::rebalance(&t))
        .or_else(|| replicas::surplus_primaries(&t))
        .or_else(|| removal::remove_leaving(&t))
        .or_else(|| health::gates(&t))
        .or_else(|| rolling::roll(&t))
        .unwrap_or_else(|| Decision::Steady(health::health(&t)))
}

/// How the cluster stands this pass, whatever the next step is: the status reports it on every
/// pass, so `readyShards` drops while a shard is hurt instead of keeping its last steady value.
/// `None` for a spec no topology can be built from.
pub fn health(desired: &Desired, members: &[Member], observed: &Observation) -> Option<Health> {
    (desired.shards > 0).then(|| health::health(&Topology::new(desired, members, observed)))
}

fn check_spec(desired: &Desired, members: &[Member]) -> Option<Decision> {
    if desired.shards == 0 {
        return Some(Decision::blocked(
            Reason::InvalidSpec,
            "a cluster needs at least one shard",
        ));
    }
    let mut seen: BTreeMap<(u32, u32), &str> = BTreeMap::new();
    for member in members {
        if let Some(other) = seen.insert((member.shard, member.index), &member.name) {
            return Some(Decision::blocked(
                Reason::InvalidSpec,
                format!(
                    "{other} and {} are both member {} of shard {}",
                    member.name, member.index, member.shard
                ),
            ));
        }
    }
    let missing: Vec<String> = desired
        .slots_of_members()
        .filter(|key| !seen.contains_key(key))
        .map(|(shard, index)| format!("shard {shard} member {index}"))
        .collect();
    (!missing.is_empty()).then(|| {
        Decision::wait(
            Reason::WaitingForNodes,
            format!("waiting for {} to be created", missing.join(", ")),
        )
    })
}
