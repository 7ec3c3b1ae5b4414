//! Which slots to move where so that the wanted shards end up evenly loaded.
//!
//! The plan moves the fewest slots possible: only the surplus of each shard (slots above its
//! quota) and everything held by shards that leave. A shard either gives, receives, or is left
//! alone, so no slot moves twice and two shards that keep their size never trade slots.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::valkey::slots::{SLOT_COUNT, SlotSet, balanced_sizes};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RebalanceError {
    #[error("no wanted shards to place the slots on")]
    NoWantedShards,
    #[error("slots {slots} are claimed by two shards, {first} and {second}")]
    OverlappingOwners {
        first: String,
        second: String,
        slots: SlotSet,
    },
}

/// Slots to migrate from one shard to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move<K> {
    pub from: K,
    pub to: K,
    pub slots: SlotSet,
}

/// A rebalance plan, as [`plan`] makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalance<K> {
    /// Migrations, ordered by source then destination.
    pub moves: Vec<Move<K>>,
    /// Slots nobody owns, with the wanted shard each should be given to by `CLUSTER ADDSLOTS`
    /// (no data to move). Ordered by shard.
    pub assign: Vec<(K, SlotSet)>,
    /// How many slots each wanted shard holds once the moves and assignments are done.
    pub quotas: BTreeMap<K, usize>,
}

impl<K: Ord> Rebalance<K> {
    /// Every slot nobody owned before the plan.
    pub fn unowned(&self) -> SlotSet {
        let mut unowned = SlotSet::new();
        for (_, slots) in &self.assign {
            unowned.union_with(slots);
        }
        unowned
    }

    /// True when nothing needs to change.
    pub fn is_noop(&self) -> bool {
        self.moves.is_empty() && self.assign.is_empty()
    }

    /// How many slots migrate (unowned slots are not counted: they carry no data).
    pub fn moved_slots(&self) -> usize {
        self.moves.iter().map(|m| m.slots.count()).sum()
    }
}

/// Plans the moves that spread all 16384 slots evenly over the `wanted` shards.
///
/// `current` maps each shard that owns slots today (including shards that must leave) to its
/// slots; wanted shards missing from it start empty. Quotas: every wanted shard gets `16384 / n`
/// slots, and the `16384 % n` extra slots go to the wanted shards that hold the most today (ties to
/// the lower key), which is what keeps the number of moved slots minimal. A shard above its
/// quota gives away its highest slots; receivers are filled in key order, unowned slots first.
/// Deterministic: the same input gives the same plan.
pub fn plan<K: Ord + Clone + ToString>(
    current: &BTreeMap<K, SlotSet>,
    wanted: &BTreeSet<K>,
) -> Result<Rebalance<K>, RebalanceError> {
    check_disjoint(current)?;
    let (base, larger) = balanced_sizes(wanted.len()).ok_or(RebalanceError::NoWantedShards)?;
    let held = |k: &K| current.get(k).map_or(0, SlotSet::count);

    // The extra slots go to the fullest wanted shards: each one given to a shard above `base` saves
    // one move.
    let mut by_size: Vec<&K> = wanted.iter().collect();
    by_size.sort_by(|a, b| held(b).cmp(&held(a)).then_with(|| a.cmp(b)));
    let quotas: BTreeMap<K, usize> = by_size
        .iter()
        .enumerate()
        .map(|(i, k)| ((*k).clone(), base + usize::from(i < larger)))
        .collect();

    // Surplus of each giver: all slots of a leaving shard, the highest slots above quota of a
    // wanted shard.
    let mut givers: Vec<(K, SlotSet)> = Vec::new();
    for (shard, slots) in current {
        let surplus = match quotas.get(shard) {
            Some(quota) => slots.highest(slots.count().saturating_sub(*quota)),
            None => slots.clone(),
        };
        if !surplus.is_empty() {
            givers.push((shard.clone(), surplus));
        }
    }
    let mut needs: Vec<(K, usize)> = quotas
        .iter()
        .filter(|(k, quota)| held(k) < **quota)
        .map(|(k, quota)| (k.clone(), quota - held(k)))
        .collect();

    let mut owned = SlotSet::new();
    for slots in current.values() {
        owned.union_with(slots);
    }
    let mut assign = Vec::new();
    let mut unowned = owned.complement();
    for (shard, need) in needs.iter_mut() {
        let take = unowned.lowest(*need);
        if take.is_empty() {
            continue;
        }
        *need -= take.count();
        unowned = unowned.difference(&take);
        assign.push((shard.clone(), take));
    }

    let mut moves = Vec::new();
    let mut receivers = needs.into_iter().filter(|(_, need)| *need > 0);
    let mut receiver = receivers.next();
    for (giver, mut surplus) in givers {
        while !surplus.is_empty() {
            let Some((to, need)) = receiver.as_mut() else {
                // Unreachable while quotas sum to 16384 and owners are disjoint; stop rather
                // than loop.
                break;
            };
            let take = surplus.lowest(*need);
            *need -= take.count();
            surplus = surplus.difference(&take);
            moves.push(Move {
                from: giver.clone(),
                to: to.clone(),
                slots: take,
            });
            if *need == 0 {
                receiver = receivers.next();
            }
        }
    }
    moves.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    debug_assert_eq!(quotas.values().sum::<usize>(), usize::from(SLOT_COUNT));
    Ok(Rebalance {
        moves,
        assign,
        quotas,
    })
}

fn check_disjoint<K: Ord + ToString>(current: &BTreeMap<K, SlotSet>) -> Result<(), RebalanceError> {
    // One pass finds whether any two overlap; only then are pairs compared, to name the first
    // two: with hundreds of shards comparing every pair would be most of a pass's work.
    let mut all = SlotSet::new();
    let mut overlap = false;
    for slots in current.values() {
        overlap |= !all.is_disjoint(slots);
        all.union_with(slots);
    }
    if !overlap {
        return Ok(());
    }
    let mut seen: Vec<(&K, &SlotSet)> = Vec::new();
    for (shard, slots) in current {
        for (other, other_slots) in &seen {
            let both = slots.intersection(other_slots);
            if !both.is_empty() {
                return Err(RebalanceError::OverlappingOwners {
                    first: other.to_string(),
                    second: shard.to_string(),
                    slots: both,
                });
            }
        }
        seen.push((shard, slots));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::valkey::slots::{SlotRange, even_split};

    fn shards(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn evenly(names: &[String]) -> BTreeMap<String, SlotSet> {
        names
            .iter()
            .cloned()
            .zip(even_split(names.len()).into_iter().map(SlotSet::from_range))
            .collect()
    }

    fn wanted(names: &[String]) -> BTreeSet<String> {
        names.iter().cloned().collect()
    }

    /// Applies the plan and checks every promise `plan` makes; returns the final owners.
    fn check(
        current: &BTreeMap<String, SlotSet>,
        wanted: &BTreeSet<String>,
        plan: &Rebalance<String>,
    ) -> BTreeMap<String, SlotSet> {
        let mut owners = current.clone();
        let mut moved = SlotSet::new();
        for m in &plan.moves {
            assert!(!m.slots.is_empty(), "empty move {m:?}");
            assert!(moved.is_disjoint(&m.slots), "slot moved twice: {m:?}");
            moved = moved.union(&m.slots);
            let from = owners.entry(m.from.clone()).or_default();
            assert!(
                m.slots.is_subset(from),
                "{} does not own {}",
                m.from,
                m.slots
            );
            *from = from.difference(&m.slots);
            let to = owners.entry(m.to.clone()).or_default();
            *to = to.union(&m.slots);
        }
        let before_unowned = current
            .values()
            .fold(SlotSet::new(), |a, s| a.union(s))
            .complement();
        assert_eq!(plan.unowned(), before_unowned);
        for (shard, slots) in &plan.assign {
            let to = owners.entry(shard.clone()).or_default();
            *to = to.union(slots);
        }
        // Conservation: every slot owned exactly once.
        let mut all = SlotSet::new();
        for slots in owners.values() {
            assert!(all.is_disjoint(slots));
            all = all.union(slots);
        }
        assert_eq!(all, SlotSet::all());
        // Balance: leavers are empty, wanted shards within one slot of each other.
        let (base, _) = balanced_sizes(wanted.len()).unwrap();
        for (shard, slots) in &owners {
            if wanted.contains(shard) {
                assert!(
                    (base..=base + 1).contains(&slots.count()),
                    "{shard}: {}",
                    slots.count()
                );
                assert_eq!(plan.quotas[shard], slots.count());
            } else {
                assert!(slots.is_empty(), "{shard} still holds {slots}");
            }
        }
        // Givers only shrink and receivers only grow: no trade between shards that keep size.
        let count = |m: &BTreeMap<String, SlotSet>, k: &String| m.get(k).map_or(0, SlotSet::count);
        for m in &plan.moves {
            assert!(count(&owners, &m.from) < count(current, &m.from), "{m:?}");
            assert!(count(&owners, &m.to) > count(current, &m.to), "{m:?}");
        }
        // Minimal: exactly the unavoidable surplus moved.
        assert_eq!(plan.moved_slots(), lower_bound(current, wanted));
        owners
    }

    /// The fewest slots any balancing plan must migrate, computed independently of `plan`.
    fn lower_bound(current: &BTreeMap<String, SlotSet>, wanted: &BTreeSet<String>) -> usize {
        let (base, larger) = balanced_sizes(wanted.len()).unwrap();
        let mut above_base = 0;
        let mut total = 0;
        for (shard, slots) in current {
            let n = slots.count();
            if wanted.contains(shard) {
                total += n.saturating_sub(base);
                above_base += usize::from(n > base);
            } else {
                total += n;
            }
        }
        total - above_base.min(larger)
    }

    #[test]
    fn three_to_five() {
        let old = shards(3, "a");
        let new: Vec<String> = old.iter().cloned().chain(shards(2, "b")).collect();
        let current = evenly(&old);
        let p = plan(&current, &wanted(&new)).unwrap();
        check(&current, &wanted(&new), &p);
        // Each old shard keeps 3276 or 3277 and gives the rest to the two new ones.
        assert_eq!(p.moved_slots(), 16384 - 3 * 3277);
        assert!(
            p.moves
                .iter()
                .all(|m| m.from.starts_with('a') && m.to.starts_with('b'))
        );
        assert!(p.assign.is_empty());
    }

    #[test]
    fn five_to_two() {
        let old = shards(5, "a");
        let current = evenly(&old);
        let keep = wanted(&old[..2]);
        let p = plan(&current, &keep).unwrap();
        let owners = check(&current, &keep, &p);
        assert_eq!(owners["a0"].count(), 8192);
        // The two kept shards each hold 3277 of the 16384; the other three give everything.
        assert_eq!(p.moved_slots(), 16384 - 2 * 3277);
        assert!(p.moves.iter().all(|m| m.to == "a0" || m.to == "a1"));
    }

    #[test]
    fn three_to_four() {
        let old = shards(3, "a");
        let new: Vec<String> = old.iter().cloned().chain(shards(1, "b")).collect();
        let current = evenly(&old);
        let p = plan(&current, &wanted(&new)).unwrap();
        check(&current, &wanted(&new), &p);
        assert_eq!(p.moved_slots(), 4096);
        assert_eq!(p.moves.len(), 3);
        assert_eq!(p.moves[0].slots.to_string(), "4096-5461");
        assert_eq!(p.moves[1].slots.to_string(), "9558-10922");
        assert_eq!(p.moves[2].slots.to_string(), "15019-16383");
    }

    #[test]
    fn one_to_one_is_a_noop() {
        let one = shards(1, "a");
        let current = evenly(&one);
        let p = plan(&current, &wanted(&one)).unwrap();
        assert!(p.is_noop());
        check(&current, &wanted(&one), &p);
    }

    #[test]
    fn balanced_three_is_a_noop_whatever_the_extra_slot_order() {
        // The classic 5461/5462/5461 layout is as balanced as even_split's 5462/5461/5461.
        let names = shards(3, "a");
        let current: BTreeMap<String, SlotSet> = names
            .iter()
            .cloned()
            .zip(["0-5460", "5461-10922", "10923-16383"].map(|r| r.parse().unwrap()))
            .collect();
        let p = plan(&current, &wanted(&names)).unwrap();
        assert!(p.is_noop(), "{p:?}");
    }

    #[test]
    fn uneven_start_with_holes_and_a_leaver() {
        let mut current = BTreeMap::new();
        current.insert("a".to_string(), "0-9999".parse::<SlotSet>().unwrap());
        current.insert("b".to_string(), "10000-10099".parse().unwrap());
        current.insert("gone".to_string(), "12000-12999".parse().unwrap());
        let want: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let p = plan(&current, &want).unwrap();
        let owners = check(&current, &want, &p);
        // 10100-11999 and 13000-16383 are unowned: assigned, not migrated.
        assert_eq!(p.unowned().to_string(), "10100-11999,13000-16383");
        assert_eq!(owners["a"].count(), 5462);
        assert!(p.moves.iter().all(|m| m.from == "a" || m.from == "gone"));
    }

    #[test]
    fn empty_cluster_is_all_assignment() {
        let want = wanted(&shards(3, "a"));
        let p = plan(&BTreeMap::new(), &want).unwrap();
        assert!(p.moves.is_empty());
        let owners = check(&BTreeMap::new(), &want, &p);
        let got: Vec<String> = owners.values().map(|s| s.to_string()).collect();
        assert_eq!(got, ["0-5461", "5462-10922", "10923-16383"]);
    }

    #[test]
    fn rejects_no_wanted_shards_and_overlaps() {
        let current = evenly(&shards(2, "a"));
        assert_eq!(
            plan(&current, &BTreeSet::new()),
            Err(RebalanceError::NoWantedShards)
        );
        let mut overlapping = current.clone();
        overlapping.insert("z".into(), "100-200".parse().unwrap());
        assert!(matches!(
            plan(&overlapping, &wanted(&shards(2, "a"))),
            Err(RebalanceError::OverlappingOwners { .. })
        ));
    }

    #[test]
    fn same_input_same_plan() {
        let current = evenly(&shards(7, "a"));
        let want = wanted(&shards(4, "a"))
            .union(&wanted(&shards(3, "b")))
            .cloned()
            .collect();
        assert_eq!(plan(&current, &want), plan(&current, &want));
    }

    /// Random owners (with holes), random leavers and newcomers: the plan always balances,
    /// conserves every slot, and moves the minimum.
    #[test]
    fn property_random_layouts() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..300 {
            let owners_n = rng.random_range(0..8usize);
            let names: Vec<String> = shards(owners_n, "s");
            let mut current: BTreeMap<String, SlotSet> = BTreeMap::new();
            // Cut 0..16384 at random points into pieces; each piece goes to a random owner or
            // to nobody.
            let mut cuts: Vec<u16> = (0..rng.random_range(0..40))
                .map(|_| rng.random_range(1..16384))
                .collect();
            cuts.extend([0, 16384]);
            cuts.sort_unstable();
            cuts.dedup();
            for pair in cuts.windows(2) {
                let Some(range) = SlotRange::new(pair[0], pair[1] - 1) else {
                    continue;
                };
                if owners_n == 0 || rng.random_bool(0.1) {
                    continue;
                }
                let owner = names[rng.random_range(0..owners_n)].clone();
                current.entry(owner).or_default().insert_range(range);
            }
            let mut want: BTreeSet<String> = names
                .iter()
                .filter(|_| rng.random_bool(0.6))
                .cloned()
                .collect();
            want.extend(shards(rng.random_range(0..4), "n"));
            if want.is_empty() {
                want.insert("n0".into());
            }
            let p = plan(&current, &want).unwrap();
            check(&current, &want, &p);
            assert_eq!(p, plan(&current, &want).unwrap());
        }
    }
}
