//! Taking over for Valkey: `CLUSTER FAILOVER TAKEOVER` promotes a replica without a vote, so the
//! operator uses it only when it is provably the only way forward, and says so with a Warning.
//!
//! Valkey replaces a failed primary itself when most slot-owning primaries agree it failed and
//! vote for one of its replicas. The operator waits for that. It takes over only when all of
//! these hold:
//! - no live member sees the primary healthy: one that does shows the primary is alive for part
//!   of the cluster, and so for clients; a partition that hides a primary from the operator and
//!   from one replica is not a failure (Valkey alone loses nothing there, a takeover would lose
//!   every write the primary accepts meanwhile);
//! - no election can happen: the slot-owning primaries the candidate still reaches, live for the
//!   operator too, are no majority;
//! - the primaries the operator cannot see are no majority either: a majority could be a side of
//!   a partition where the primary still serves its clients, which the operator cannot tell
//!   from a dead one (in a one-shard cluster the primary alone is that majority);
//! - the primary has been silent for two node timeouts and a margin, on the servers' own clocks
//!   and by the servers' own `cluster-node-timeout`;
//! - the candidate is one Valkey itself would promote: not set `cluster-replica-no-failover`,
//!   not too stale by `cluster-replica-validity-factor`.
//!
//! Where the user accepted losing the primary's slots (`onSlotsLost: Refill`, or the slots named in
//! `acceptLostSlots`), the last two rules about partitions and staleness give way: a replica that
//! missed some writes serves the slots rather than nobody.

use std::cmp::Reverse;

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::safety::{self, LinkAge};
use crate::valkey::cluster_nodes::ClusterNode;

use super::topology::{Live, Topology};

/// What to do about `failed`, a slot-owning primary some member sees failing, no live member
/// is, and that has the live replicas `electors`.
pub(super) fn for_failed_primary(
    t: &Topology,
    failed: &ClusterNode,
    electors: &[&Live],
) -> Decision {
    let id = &failed.id;
    let slots = &failed.slots;
    let waiting = |reason: Reason, why: String| {
        Decision::wait(
            reason,
            format!("primary {id} of slots {slots} is failing; {why}"),
        )
    };
    if let Some(witness) = t
        .staying()
        .find(|l| l.entry(id).is_some_and(|e| e.is_healthy()))
    {
        return waiting(
            Reason::FailingOver,
            format!(
                "{} still sees it healthy, so it is cut off from the operator, not from the \
                 cluster: Valkey decides",
                witness.name()
            ),
        );
    }
    let staying: Vec<&Live> = electors.iter().copied().filter(|l| l.staying()).collect();
    let names = |list: &[&Live]| {
        list.iter()
            .map(|l| l.name().to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if staying.is_empty() {
        return waiting(
            Reason::FailingOver,
            format!("waiting for {} to take over", names(electors)),
        );
    }
    let permit = t.desired.lost_slots.permits(slots);
    let accepted = permit.is_some();
    let mut eligible = Vec::new();
    let mut refusals = Refusals::default();
    for candidate in staying {
        match refusal(candidate, accepted) {
            None => eligible.push(candidate),
            Some(Refusal::Unknown(why)) => refusals.unknown.push(why),
            Some(Refusal::NoFailover) => refusals.no_failover.push(candidate.name()),
            Some(Refusal::Stale(why)) => refusals.stale.push(why),
        }
    }
    let Some(best) = eligible
        .iter()
        .max_by_key(|l| (l.state.replication_offset(), Reverse(l.name())))
        .copied()
    else {
        return refusals.decision(id, slots);
    };
    let Ok(settings) = best.state.settings() else {
        return refusals.decision(id, slots);
    };

    let Electorate { size, reachable } = electorate(t, best, failed);
    let quorum = size / 2 + 1;
    if reachable >= quorum {
        return waiting(
            Reason::FailingOver,
            format!(
                "{reachable} of the {size} primaries can still vote: Valkey elects one of {} \
                 itself",
                names(&eligible)
            ),
        );
    }
    let unseen = size - reachable;
    if unseen >= quorum && !accepted {
        return waiting(
            Reason::NodeUnreachable,
            format!(
                "{unseen} of the {size} primaries (it among them) are out of the operator's sight, \
                 enough for a majority that still serves it and its clients, which the operator \
                 cannot tell from a dead primary, so it does not take over. When it is gone for \
                 good, set spec.acceptLostSlots to \"{slots}\" to let {} take over and lose the \
                 writes it did not receive",
                best.name()
            ),
        );
    }
    let Some(silent_ms) = silence_ms(t, failed) else {
        return waiting(
            Reason::FailingOver,
            "no member can tell how long it has been silent".into(),
        );
    };
    let after = settings.takeover_after_ms();
    if silent_ms < after {
        return waiting(
            Reason::FailingOver,
            format!(
                "silent for {} s of the {} s (twice cluster-node-timeout, and 5 s) after which \
                 {} takes over, as no election can happen",
                silent_ms / 1000,
                after / 1000,
                best.name()
            ),
        );
    }
    let takeover = Action::Takeover {
        on_replica: best.node_ref(),
        failed: id.clone(),
    };
    let message = format!(
        "primary {id} of slots {slots} has been silent for {} s and no election can happen \
         ({reachable} of {size} primaries can vote); {} takes over without a vote, and writes it \
         had not received are lost",
        silent_ms / 1000,
        best.name()
    );
    // Taken on the user's word only when the ordinary rules would not take it: the primaries
    // out of sight could be a majority, or the replica is too stale for Valkey.
    let link = best.state.link_age().unwrap_or(LinkAge::Never);
    let on_the_users_word = unseen >= quorum || safety::too_stale(settings, link);
    match permit.filter(|_| on_the_users_word) {
        Some(permit) => Decision::lossy(permit, takeover, Reason::FailingOver, message),
        None => Decision::forced(takeover, Reason::FailingOver, message),
    }
}

enum Refusal {
    /// Its settings could not be read.
    Unknown(String),
    /// The user set `cluster-replica-no-failover yes`.
    NoFailover,
    /// Valkey would consider its data too old to promote it.
    Stale(String),
}

/// Why `candidate` may not take over, if it may not. `accepted`: the user accepted losing the
/// slots, so staleness does not hold it back.
fn refusal(candidate: &Live, accepted: bool) -> Option<Refusal> {
    let settings = match candidate.state.settings() {
        Ok(settings) => settings,
        Err(why) => {
            return Some(Refusal::Unknown(format!(
                "{}'s failover settings are unknown ({why})",
                candidate.name()
            )));
        }
    };
    if settings.replica_no_failover || candidate.me().flags.nofailover {
        return Some(Refusal::NoFailover);
    }
    let link = candidate.state.link_age().unwrap_or(LinkAge::Never);
    if !accepted && safety::too_stale(settings, link) {
        let age = match link {
            LinkAge::DownFor(s) => format!("its link has been down for {s} s"),
            LinkAge::Never => "it never synced since it started".into(),
            LinkAge::Up => "its link is up".into(),
        };
        return Some(Refusal::Stale(format!(
            "{} missed too many writes: {age}, more than Valkey's {} s (cluster-node-timeout × \
             cluster-replica-validity-factor + repl-ping-replica-period)",
            candidate.name(),
            (settings.node_timeout_ms * settings.validity_factor) / 1000 + settings.ping_period_s
        )));
    }
    None
}

#[derive(Default)]
struct Refusals<'a> {
    unknown: Vec<String>,
    no_failover: Vec<&'a str>,
    stale: Vec<String>,
}

impl Refusals<'_> {
    /// Why no replica takes over: a stale replica needs a person; a disabled failover is the
    /// user's choice; unknown settings may be read on a later pass.
    fn decision(
        &self,
        id: &crate::valkey::cluster_nodes::NodeId,
        slots: &crate::valkey::slots::SlotSet,
    ) -> Decision {
        let head = format!("primary {id} of slots {slots} failed");
        if !self.stale.is_empty() {
            return Decision::blocked(
                Reason::ReplicaTooStale,
                format!(
                    "{head} and no replica Valkey would promote is left: {}. Bring the primary \
                     back, or set spec.acceptLostSlots to \"{slots}\" to let the most caught-up \
                     replica take over and lose the writes it missed",
                    self.stale.join("; ")
                ),
            );
        }
        if !self.no_failover.is_empty() {
            return Decision::wait(
                Reason::NodeUnreachable,
                format!(
                    "{head}; cluster-replica-no-failover is yes on {}, so neither Valkey nor \
                     the operator fails it over: waiting for the primary to return",
                    self.no_failover.join(", ")
                ),
            );
        }
        Decision::wait(
            Reason::FailingOver,
            format!("{head}; {}", self.unknown.join("; ")),
        )
    }
}

struct Electorate {
    /// Slot-owning primaries in the candidate's view, the failed one included.
    size: usize,
    /// Those, other than the failed one, that the candidate sees healthy and the operator
    /// reaches: the votes an election could get.
    reachable: usize,
}

fn electorate(t: &Topology, candidate: &Live, failed: &ClusterNode) -> Electorate {
    let owners: Vec<&ClusterNode> = candidate
        .view()
        .primaries()
        .filter(|p| !p.slots.is_empty() || p.id == failed.id)
        .collect();
    let reachable = owners
        .iter()
        .filter(|p| p.id != failed.id && p.is_healthy())
        .filter(|p| t.by_id(&p.id).is_some())
        .count();
    Electorate {
        size: owners.len(),
        reachable,
    }
}

/// How long the primary has been silent: the shortest time any staying member has not heard
/// from it, on that member's own clock (a member that never heard from it since it started has
/// not heard from it for its whole uptime).
fn silence_ms(t: &Topology, failed: &ClusterNode) -> Option<u64> {
    t.staying()
        .filter_map(|viewer| {
            let entry = viewer.entry(&failed.id)?;
            let now = viewer.state.info().server_time_ms()?;
            Some(if entry.pong_received > 0 {
                now.saturating_sub(entry.pong_received)
            } else {
                viewer.state.uptime_ms()
            })
        })
        .min()
}
