//! Slots: finishing migrations that are open, giving unowned slots an owner, and moving slots
//! so the wanted shards hold them evenly (draining the shards that leave). One module a group of
//! rules, in the order `decide_on` tries them:
//!
//! - [`in_flight`]: migrations already under way, finished, rolled back or waited for;
//! - [`coverage`](mod@coverage): every slot has exactly one owner (at formation, slots first);
//! - [`balance`]: the moves of the rebalance plan, and new jobs beside running ones;
//!
//! and [`ends`], what the first and the last ask of a move's two ends. Each module says why its
//! rules stand where they do.

mod balance;
mod coverage;
mod ends;
mod in_flight;

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::decision::{Decision, Reason};
use crate::plan::rebalance::{self, Rebalance, RebalanceError};
use crate::valkey::slots::SlotSet;

use super::topology::Topology;

pub use balance::ATOMIC_MAX_ATTEMPTS;
pub(super) use balance::{rebalance, slots_to_move, start_beside_running_jobs};
pub(super) use coverage::{coverage, slots_first_at_formation};
pub(super) use in_flight::open_migrations;

/// Two members of `shard` both serve slots: a rule that acts on the shard's one primary cannot
/// tell which it is, so it stops and says so.
pub(super) fn shard_conflict(shard: u32, a: &str, b: &str) -> Decision {
    Decision::blocked(
        Reason::ShardConflict,
        format!("{a} and {b} of shard {shard} both serve slots; one shard must have one primary"),
    )
}

/// The rebalance plan from the slots each shard's primary serves now to the wanted shards: the
/// one plan the coverage rules (its unowned slots), the moves and the progress all read, made
/// once per look (the topology keeps it).
fn rebalance_plan<'t>(t: &'t Topology) -> Result<&'t Rebalance<u32>, &'t RebalanceError> {
    t.rebalance
        .get_or_init(|| rebalance::plan(&by_shard(t), &wanted_shards(t)))
        .as_ref()
}

/// The slots each shard's primary serves, by shard.
fn by_shard(t: &Topology) -> BTreeMap<u32, SlotSet> {
    let mut current: BTreeMap<u32, SlotSet> = BTreeMap::new();
    for l in t
        .live
        .iter()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
    {
        current
            .entry(l.member.shard)
            .or_default()
            .union_with(l.slots());
    }
    current
}

/// The shards the spec asks for, `0..shards`: the ones that keep slots (any other drains).
fn wanted_shards(t: &Topology) -> BTreeSet<u32> {
    (0..t.desired.shards).collect()
}
