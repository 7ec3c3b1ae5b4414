//! The pure heart of the engine: from the spec, the members and one observation, the one next
//! step. Rules are tried in a fixed order and the first that has something to say wins, so a
//! later rule may assume every earlier one is satisfied:
//!
//! 1. the spec is valid and every wanted member exists;
//! 2. at formation, each shard's primary-to-be takes its slots as soon as it is up (as
//!    valkey-cli does before its introductions); members know each other at their current
//!    addresses (MEET);
//! 3. failed primaries are being replaced by Valkey (wait), or taken over when no election can
//!    happen;
//! 4. a primary that came back without the data its replica holds hands over to that replica;
//! 5. node ids that belong to no member (and may not be a down member's) are forgotten; slots
//!    of a dead primary without a replica are declared lost, and served again only with the
//!    user's word;
//! 6. settled nodes admit replicas (the replication user is fenced on every start);
//!
//! With a staying member down (or answered by a node not taken for its own), what does not need
//! it goes on: replicas are attached to primaries that serve their shard's slots, a surplus
//! primary hands over; everything else waits for it. With every member live:
//!
//! 7. open migrations are finished or rolled back (while atomic jobs run, other sources may
//!    start theirs beside them);
//! 8. every slot has an owner (ADDSLOTS at formation, or after a loss the user accepted);
//! 9. replicas replicate their shard's primary;
//! 10. slots move until the wanted shards hold them evenly (leaving shards are drained);
//! 11. leaving members hand over, are forgotten, and deleted;
//! 12. the cluster is whole (replicas in sync, `cluster_state:ok`, everyone connected);
//! 13. outdated members restart one at a time;
//! 14. primaries that share a node or a zone are spread again, one planned failover at a time,
//!     each once the cluster has been steady for a while (`Desired::spread_after`; steady and
//!     Ready until then);
//! 15. otherwise the cluster is steady.

mod emptied;
mod failure;
mod fence;
mod health;
mod identity;
mod membership;
mod removal;
mod replicas;
mod rolling;
mod slots;
mod spread;
mod takeover;
mod topology;

use std::collections::BTreeMap;

pub use slots::ATOMIC_MAX_ATTEMPTS;

use super::decision::{Decision, Health, Reason};
use super::member::{Desired, Member};
pub use super::mode::Scope;
use super::observe::Observation;
use crate::valkey::cluster_nodes::NodeId;
use topology::Topology;

/// Decides the one next step. Pure: the same inputs give the same decision.
pub fn decide(desired: &Desired, members: &[Member], observed: &Observation) -> Decision {
    check_spec(desired, members)
        .unwrap_or_else(|| decide_on(&Topology::new(desired, members, observed), observed))
}

/// What one look at the cluster comes to: the next step ([`decide`]), the members' bindings
/// ([`bindings`]) and the cluster's health ([`health`]).
pub type Verdict = crate::engine::mode::Verdict<crate::engine::ClusterMode>;

/// [`decide`], [`bindings`] and [`health`] at once, from one topology: building it (every
/// member's view of every other, indexed) is most of a decision's cost at hundreds of members,
/// and a pass needs all three of the same look.
pub fn judge(desired: &Desired, members: &[Member], observed: &Observation) -> Verdict {
    judge_in(Scope::Everything, desired, members, observed)
}

/// [`judge`] with only the rules of `scope`.
pub fn judge_in(
    scope: Scope,
    desired: &Desired,
    members: &[Member],
    observed: &Observation,
) -> Verdict {
    let t = Topology::new(desired, members, observed);
    let decision = match scope {
        Scope::Everything => {
            check_spec(desired, members).unwrap_or_else(|| decide_on(&t, observed))
        }
        Scope::Safety => {
            protect(&t, observed).unwrap_or_else(|| Decision::Steady(health::health(&t)))
        }
    };
    let health = match &decision {
        Decision::Steady(health) => Some(health.clone()),
        _ => (desired.shards > 0).then(|| health::health(&t)),
    };
    Verdict {
        decision,
        bindings: t.bindings(),
        health,
    }
}

/// The rules of [`Scope::Safety`], in the order [`decide_on`] tries them.
fn protect(t: &Topology, observed: &Observation) -> Option<Decision> {
    failure::failing_primaries(t)
        .or_else(|| emptied::emptied_primaries(t))
        .or_else(|| fence::admit(t, observed.fence_user.as_deref()))
}

/// The rules, in order, over a topology of a spec [`check_spec`] accepted.
fn decide_on(t: &Topology, observed: &Observation) -> Decision {
    let repairs = slots::slots_first_at_formation(t)
        .or_else(|| membership::meet(t))
        .or_else(|| failure::failing_primaries(t))
        .or_else(|| emptied::emptied_primaries(t))
        .or_else(|| failure::strangers(t))
        .or_else(|| fence::admit(t, observed.fence_user.as_deref()));
    if !t.whole() {
        return repairs
            .or_else(|| replicas::attach(t))
            .or_else(|| replicas::surplus_primaries(t))
            .or_else(|| failure::unreachable(t))
            .unwrap_or_else(|| Decision::Steady(health::health(t)));
    }
    repairs
        .or_else(|| slots::open_migrations(t).map(|open| beside_running_jobs(t, open)))
        .or_else(|| slots::coverage(t))
        .or_else(|| replicas::attach(t))
        .or_else(|| slots::rebalance(t))
        .or_else(|| replicas::surplus_primaries(t))
        .or_else(|| removal::remove_leaving(t))
        .or_else(|| health::gates(t))
        .or_else(|| rolling::roll(t))
        .or_else(|| spread::spread_primaries(t))
        .unwrap_or_else(|| Decision::Steady(health::health(t)))
}

/// While migration jobs run (`open` waits for them), another source may start its own job
/// (`slots::start_beside_running_jobs`) when the rules between the open migrations and the
/// rebalance have nothing to say: every slot owned, every replica attached.
fn beside_running_jobs(t: &Topology, open: Decision) -> Decision {
    let waiting_for_jobs = matches!(
        &open,
        Decision::Wait {
            reason: Reason::MigratingSlots,
            ..
        }
    );
    if waiting_for_jobs
        && slots::coverage(t).is_none()
        && replicas::attach(t).is_none()
        && let Some(start) = slots::start_beside_running_jobs(t)
    {
        return start;
    }
    open
}

/// The node each member is bound to after this pass (see [`Member::node_id`]): what a live
/// member answered as, otherwise what it was bound to before. The Kubernetes side keeps it and
/// passes it back on the next pass.
pub fn bindings(
    desired: &Desired,
    members: &[Member],
    observed: &Observation,
) -> BTreeMap<String, NodeId> {
    Topology::new(desired, members, observed).bindings()
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
