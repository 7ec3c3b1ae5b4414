//! Every slot has exactly one owner: claims that overlap are waited out, slots assigned in some
//! views only are waited for, and slots nobody owns are added to a shard: all of them at
//! formation (or, for a restore, each shard's from its backup), later only the ones whose loss
//! the user accepted.
//!
//! After the migrations under way ([`super::in_flight`]), whose open slots look like overlapping
//! claims, and before any slot moves ([`super::balance`]): the rebalance plan moves only owned
//! slots, and a slot that lost its owner may have lost its data, which is the user's call before
//! anything else. Its formation shortcut, [`slots_first_at_formation`], runs earlier still,
//! before the members are even introduced.

use crate::engine::decide::failure;
use crate::engine::decide::topology::{Live, Topology};
use crate::engine::decision::{Action, Decision, Reason};
use crate::valkey::slots::SlotSet;

use super::plan::{rebalance_plan, shard_conflict};

/// Every slot has exactly one owner: claims must not overlap, views must agree, and slots
/// nobody owns are added to a shard (all of them at formation, the lost ones later).
pub(in crate::engine::decide) fn coverage(t: &Topology) -> Option<Decision> {
    let claimers: Vec<&Live> = t
        .live
        .iter()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
        .collect();
    if let Some(wait) = overlapping_claims(&claimers) {
        return Some(wait);
    }
    let claimed = t.claimed();
    let assigned = t.assigned_anywhere();
    let unclaimed = assigned.difference(&claimed);
    if !unclaimed.is_empty() {
        return Some(Decision::wait(
            Reason::Converging,
            format!("slots {unclaimed} are assigned in some views to nodes that do not serve them"),
        ));
    }
    let unassigned = assigned.complement();
    if unassigned.is_empty() {
        return None;
    }
    // Slots can only lose data once data was written; a cluster without a single key is
    // still being formed (perhaps by an engine that was stopped half-way), unless it had formed
    // before and every slot lost its owner (every node came back empty).
    // A restore forms with keys: its first members loaded the backup's snapshots. Not gated on
    // `formed`: a restored server claims the slots of its keys by itself when it loads them
    // (Valkey's verifyClusterConfigWithData), so the cluster looks formed before the rest of its
    // slots are assigned; the parent drops `restore` once every slot has been served.
    if let Some(shards) = t.desired.restore.as_ref() {
        return restored_slots(t, shards, &unassigned);
    }
    let forming =
        t.live.iter().all(|l| l.state.keys() == 0) && !(t.desired.formed && assigned.is_empty());
    let permit = t.desired.lost_slots.permits(&unassigned);
    if !forming && permit.is_none() {
        return Some(failure::lost_slots(
            &unassigned,
            &format!("slots {unassigned} have no owner"),
        ));
    }
    let plan = match rebalance_plan(t) {
        Ok(plan) => plan,
        Err(e) => return Some(Decision::blocked(Reason::SlotsConflict, e.to_string())),
    };
    let &(shard, ref slots) = plan.assign.first()?;
    let primary = match t.shard_primary(shard) {
        Ok(Some(primary)) => primary,
        Ok(None) => {
            return Some(Decision::wait(
                Reason::WaitingForNodes,
                format!("shard {shard} has no live primary to take slots {slots}"),
            ));
        }
        Err((a, b)) => return Some(shard_conflict(shard, &a, &b)),
    };
    let action = Action::AddSlots {
        on: primary.node_ref(),
        slots: slots.clone(),
    };
    Some(match permit.filter(|_| !forming) {
        None => Decision::act(
            action,
            Reason::Forming,
            format!("assigning slots {slots} to {}", primary.name()),
        ),
        Some(permit) => Decision::lossy(
            permit,
            action,
            Reason::SlotsLost,
            format!(
                "slots {slots} have no owner and their data is lost, as the user accepted; \
                 serving them again, empty, on {}",
                primary.name()
            ),
        ),
    })
}

/// A restored cluster's formation: each shard's first member, which loaded the shard's snapshot,
/// takes the manifest's slots of that shard; no other member ever takes them (an empty member
/// serving them would answer "no such key" for restored data), so a shard whose first member is
/// not up, or is not a primary, waits.
fn restored_slots(t: &Topology, shards: &[SlotSet], unassigned: &SlotSet) -> Option<Decision> {
    let (shard, slots) = shards
        .iter()
        .enumerate()
        .map(|(shard, slots)| (shard as u32, slots.intersection(unassigned)))
        .find(|(_, slots)| !slots.is_empty())?;
    let Some(first) = t
        .shard(shard)
        .find(|l| l.member.index == 0 && l.is_primary())
    else {
        return Some(Decision::wait(
            Reason::WaitingForNodes,
            format!(
                "shard {shard}'s first member, which holds its restored data, is not up as a \
                 primary yet to take slots {slots}"
            ),
        ));
    };
    Some(Decision::act(
        Action::AddSlots {
            on: first.node_ref(),
            slots: slots.clone(),
        },
        Reason::Forming,
        format!(
            "assigning the backup's slots {slots} of shard {shard} to {}, which holds its data",
            first.name()
        ),
    ))
}

/// At formation, slots come first, as `valkey-cli --cluster create` assigns them before its
/// introductions: each shard's primary-to-be takes its share as soon as it is up, whoever it
/// knows yet. Valkey keeps a primary's `cluster_state` at fail for its rejoin delay (up to 5 s)
/// after it last counted itself in a minority, which before it serves slots it always does: the
/// sooner it serves them, the sooner the cluster is Ready, and the introductions and gossip run
/// meanwhile. Only for a cluster that never served slots and holds no key, once every member
/// is up (as before, a cluster with a member that cannot start waits for it, unformed), and
/// only to each shard's first member; otherwise, and for anything but an assignment, the
/// ordinary rules decide.
pub(in crate::engine::decide) fn slots_first_at_formation(t: &Topology) -> Option<Decision> {
    if t.desired.formed || !t.whole() {
        return None;
    }
    coverage(t).filter(|decision| match decision {
        Decision::Act {
            action: Action::AddSlots { on, .. },
            reason: Reason::Forming,
            ..
        } => {
            !decision.is_forced()
                && t.live
                    .iter()
                    .any(|l| l.name() == on.member && l.member.index == 0)
        }
        _ => false,
    })
}

/// The first two claimers (in order) whose claims overlap. One pass over the claims finds
/// whether any do; only then are pairs compared, which with hundreds of primaries would
/// otherwise be most of a pass's work.
fn overlapping_claims(claimers: &[&Live]) -> Option<Decision> {
    let mut seen = SlotSet::new();
    let mut overlap = false;
    for claimer in claimers {
        overlap |= !seen.is_disjoint(claimer.slots());
        seen.union_with(claimer.slots());
    }
    if !overlap {
        return None;
    }
    for (i, a) in claimers.iter().enumerate() {
        for b in &claimers[i + 1..] {
            let both = a.slots().intersection(b.slots());
            if !both.is_empty() {
                return Some(Decision::wait(
                    Reason::SlotsConflict,
                    format!(
                        "slots {both} are claimed by both {} and {}; waiting for the newer claim \
                         to win",
                        a.name(),
                        b.name()
                    ),
                ));
            }
        }
    }
    None
}
