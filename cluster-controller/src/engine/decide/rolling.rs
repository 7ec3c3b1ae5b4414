//! Rolling restarts: one member at a time, replicas first; a primary hands its slots to its
//! most caught-up replica with a planned failover before it is released. Runs only when the
//! cluster is whole, so no two members of a shard are ever down together.

use crate::engine::decision::{Action, Decision, Reason};

use super::replicas::best_replica;
use super::topology::{Live, Topology};

pub(super) fn roll(t: &Topology) -> Option<Decision> {
    if let Some(member) = t
        .members
        .iter()
        .find(|m| t.desired.place(m) == crate::engine::member::Place::Staying && m.is_restarting())
    {
        return Some(Decision::wait(
            Reason::Rolling,
            format!(
                "{} is restarting into revision {}",
                member.name,
                member.desired_revision.as_deref().unwrap_or("?")
            ),
        ));
    }
    let outdated: Vec<&Live> = t.staying().filter(|l| l.member.needs_restart()).collect();
    let remaining = outdated.len();
    if let Some(replica) = outdated.iter().find(|l| !l.is_primary()) {
        return Some(allow(replica, remaining, "a replica"));
    }
    let primary = outdated.first()?;
    if primary.slots().is_empty() {
        return Some(allow(primary, remaining, "a primary without slots"));
    }
    match best_replica(t, primary) {
        Some(replica) => Some(Decision::act(
            Action::Failover {
                on_replica: replica.node_ref(),
                primary: primary.node_ref(),
            },
            Reason::Rolling,
            format!(
                "{} takes over from {} before it restarts",
                replica.name(),
                primary.name()
            ),
        )),
        None if t.desired.replicas == 0 => Some(restart_alone(t, primary, remaining)),
        None => Some(Decision::wait(
            Reason::ReplicaSyncing,
            format!(
                "waiting for a replica of {} in sync before it restarts",
                primary.name()
            ),
        )),
    }
}

/// A primary without replicas restarts with its slots unserved until it is back; without
/// persistence it comes back empty, which the user must have accepted.
fn restart_alone(t: &Topology, primary: &Live, remaining: usize) -> Decision {
    if t.desired.persistent || primary.state.keys() == 0 {
        return allow(
            primary,
            remaining,
            "a primary without replicas: its slots are unavailable until it is back",
        );
    }
    let slots = primary.slots();
    let Some(permit) = t.desired.lost_slots.permits(slots) else {
        return Decision::blocked(
            Reason::RestartWouldLoseData,
            format!(
                "restarting {} would lose its {} keys: it has no replica and no persistence. Add \
                 a replica (spec.replicas: 1) or enable persistence first, or accept losing slots \
                 {slots}: set spec.acceptLostSlots to \"{slots}\" (or spec.onSlotsLost to Refill, \
                 for a cache)",
                primary.name(),
                primary.state.keys()
            ),
        );
    };
    Decision::lossy(
        permit,
        Action::AllowRestart {
            member: primary.name().to_owned(),
        },
        Reason::Rolling,
        format!(
            "restarting {} (a primary without replicas or persistence): its {} keys in slots \
             {slots} are lost, as the user accepted; {remaining} member(s) left on the old \
             revision",
            primary.name(),
            primary.state.keys()
        ),
    )
}

fn allow(member: &Live, remaining: usize, what: &str) -> Decision {
    Decision::act(
        Action::AllowRestart {
            member: member.name().to_owned(),
        },
        Reason::Rolling,
        format!(
            "restarting {} ({what}); {remaining} member(s) left on the old revision",
            member.name()
        ),
    )
}
