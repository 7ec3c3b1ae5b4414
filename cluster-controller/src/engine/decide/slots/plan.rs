//! The rebalance plan of a look, made once (the topology keeps it) and read by coverage, the
//! moves and the progress; and the conflict every slot rule stops at.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::decide::topology::Topology;
use crate::engine::decision::{Decision, Reason};
use crate::plan::rebalance::{self, Rebalance, RebalanceError};
use crate::valkey::slots::SlotSet;

/// Two members of `shard` both serve slots: a rule that acts on the shard's one primary cannot
/// tell which it is, so it stops and says so.
pub(in crate::engine::decide) fn shard_conflict(shard: u32, a: &str, b: &str) -> Decision {
    Decision::blocked(
        Reason::ShardConflict,
        format!("{a} and {b} of shard {shard} both serve slots; one shard must have one primary"),
    )
}

/// The rebalance plan from the slots each shard's primary serves now to the wanted shards: the
/// one plan the coverage rules (its unowned slots), the moves and the progress all read, made
/// once per look (the topology keeps it).
pub(super) fn rebalance_plan<'t>(
    t: &'t Topology,
) -> Result<&'t Rebalance<u32>, &'t RebalanceError> {
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
