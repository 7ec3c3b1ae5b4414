//! The changes a user asks for, once the replication is whole: members leaving, the primary the
//! user names, a new revision rolled one member at a time. Every change of primary here is a
//! planned switchover (FAILOVER), which loses no acknowledged write.

use super::super::decision::{Action, Decision, Reason};
use super::{Live, View};

/// Members beyond `spec.replicas` leave, the highest index first; a leaving primary first hands
/// over to a staying replica in step.
pub(super) fn leaving(view: &View, primary: Live<'_>) -> Option<Decision> {
    let wanted = view.spec.replicas;
    if primary.member.index > wanted {
        if primary.state.switching_over() {
            return Some(switching(primary));
        }
        return Some(match successor(view, primary, |_| true) {
            Some(to) => switchover(view, primary, to, Reason::ScalingDown, "is leaving"),
            None => Decision::wait(
                Reason::ScalingDown,
                format!(
                    "{} is leaving; it hands over once a staying replica is in step with it",
                    primary.name()
                ),
            ),
        });
    }
    view.members
        .iter()
        .filter(|m| m.index > wanted)
        .max_by_key(|m| m.index)
        .map(|m| {
            Decision::act(
                Action::DeleteMember {
                    member: m.name.clone(),
                },
                Reason::ScalingDown,
                format!(
                    "{} is beyond spec.replicas ({wanted}); its ValkeyNode goes (its volume is kept)",
                    m.name
                ),
            )
        })
}

/// The replication is whole before anything else changes: no switchover running, every member
/// answering, ready and, but the primary, in step with it.
pub(super) fn gates(view: &View, primary: Live<'_>) -> Option<Decision> {
    if primary.state.switching_over() {
        return Some(switching(primary));
    }
    if let Some(silent) = view.silent().first() {
        return Some(Decision::wait(
            Reason::WaitingForNodes,
            format!("{silent} does not answer"),
        ));
    }
    if let Some(member) = view.members.iter().find(|m| !m.ready) {
        return Some(Decision::wait(
            Reason::WaitingForNodes,
            format!("{} is not ready", member.name),
        ));
    }
    view.live()
        .find(|l| l.name() != primary.name() && !l.state.in_step_with(primary.address()))
        .map(|l| {
            Decision::wait(
                Reason::ReplicaSyncing,
                format!("{} is catching up with {}", l.name(), primary.name()),
            )
        })
}

/// The member `spec.primary` names becomes the primary, by a planned switchover, once it is in
/// step (and runs its desired revision: a member about to restart is not handed the primary).
pub(super) fn preferred(view: &View, primary: Live<'_>) -> Option<Decision> {
    let name = view.spec.preferred.as_deref()?;
    if name == primary.name() {
        return None;
    }
    let to = view
        .get(name)
        .filter(|l| l.state.in_step_with(primary.address()) && !l.member.needs_restart())?;
    Some(switchover(
        view,
        primary,
        to,
        Reason::SwitchingOver,
        &format!("hands over to {name}, which spec.primary names"),
    ))
}

/// Outdated members restart one at a time: replicas first, then the primary after it has
/// handed over to a replica that runs the new revision (a standalone server just restarts).
pub(super) fn roll(view: &View, primary: Live<'_>) -> Option<Decision> {
    if let Some(m) = view.members.iter().find(|m| m.is_restarting()) {
        return Some(Decision::wait(
            Reason::Rolling,
            format!("{} restarts into its new revision", m.name),
        ));
    }
    if let Some(replica) = view
        .members
        .iter()
        .filter(|m| m.name != primary.name() && m.needs_restart())
        .max_by_key(|m| m.index)
    {
        return Some(Decision::act(
            Action::AllowRestart {
                member: replica.name.clone(),
            },
            Reason::Rolling,
            format!(
                "{} (a replica) restarts into its new revision; the primary goes last",
                replica.name
            ),
        ));
    }
    if !primary.member.needs_restart() {
        return None;
    }
    Some(
        match successor(view, primary, |l| !l.member.needs_restart()) {
            Some(to) => switchover(
                view,
                primary,
                to,
                Reason::Rolling,
                "restarts last; it first hands over",
            ),
            None if view.members.len() == 1 => Decision::act(
                Action::AllowRestart {
                    member: primary.name().to_owned(),
                },
                Reason::Rolling,
                format!(
                    "{} is a standalone server: it restarts into its new revision (clients wait while it does)",
                    primary.name()
                ),
            ),
            None => Decision::wait(
                Reason::Rolling,
                format!(
                    "{} restarts last, once a replica on the new revision is in step to take over",
                    primary.name()
                ),
            ),
        },
    )
}

/// The staying replica in step with the primary to hand over to: `spec.primary`'s member if it
/// qualifies, else the lowest index.
fn successor<'a>(
    view: &View<'a>,
    primary: Live<'_>,
    qualifies: impl Fn(&Live<'a>) -> bool,
) -> Option<Live<'a>> {
    let candidates: Vec<Live<'a>> = view
        .live()
        .filter(|l| {
            l.name() != primary.name()
                && l.member.index <= view.spec.replicas
                && l.state.in_step_with(primary.address())
        })
        .filter(|l| qualifies(l))
        .collect();
    let preferred = view.spec.preferred.as_deref();
    candidates
        .iter()
        .find(|l| Some(l.name()) == preferred)
        .or_else(|| candidates.first())
        .copied()
}

fn switchover(view: &View, primary: Live<'_>, to: Live<'_>, reason: Reason, why: &str) -> Decision {
    Decision::act(
        Action::Switchover {
            on: primary.target(),
            to: to.target(),
            timeout: view.spec.switchover_timeout,
        },
        reason,
        format!(
            "{} {why}: a planned switchover to {} (writes pause until it has every one)",
            primary.name(),
            to.name()
        ),
    )
}

fn switching(primary: Live<'_>) -> Decision {
    Decision::wait(
        Reason::SwitchingOver,
        format!(
            "{} is handing over ({})",
            primary.name(),
            primary.state.failover_state
        ),
    )
}
