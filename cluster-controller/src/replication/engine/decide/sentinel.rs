//! The rules with Sentinel on (`spec.sentinel`): Sentinel elects the primary when the primary
//! fails, the engine never does. The primary is the one a majority of all the Sentinels name;
//! with it the engine's own rules run as ever (the fence, strays told to follow, members leaving,
//! rolls), except that a planned switchover is handed to Sentinel (`SENTINEL FAILOVER`), and
//! every Sentinel is first told to watch it. Where the engine alone would promote, it waits.

use std::net::SocketAddr;

use super::super::decision::{Action, Decision, Reason, Target};
use super::super::sentinel::Watch;
use super::{Live, View, attach, changes, primary};

/// Which primary the Sentinels name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Named {
    /// No Sentinel that answers monitors the master name.
    Unwatched,
    /// A majority of all the Sentinels name this member.
    Agreed(String),
    /// Fewer than a majority name this member, no Sentinel names another, and the rest watch
    /// nothing yet (they are being told one after another).
    Partly(String),
    /// No majority names one member; why.
    Disagree(String),
}

/// The primary a majority of all `watch.sentinels` Sentinels name (a Sentinel that does not
/// answer counts against every address).
pub(super) fn named(view: &View, watch: &Watch) -> Named {
    let answers: Vec<(&str, SocketAddr)> = view
        .observed
        .sentinels
        .iter()
        .filter_map(|(name, reach)| {
            let master = reach.as_ref().ok()?.master.as_ref()?;
            Some((name.as_str(), master.primary))
        })
        .collect();
    if answers.is_empty() {
        return Named::Unwatched;
    }
    let majority = watch.sentinels / 2 + 1;
    let mut counts: Vec<(SocketAddr, u32)> = Vec::new();
    for (_, address) in &answers {
        match counts.iter_mut().find(|(a, _)| a == address) {
            Some((_, n)) => *n += 1,
            None => counts.push((*address, 1)),
        }
    }
    let Some((address, votes)) = counts.iter().max_by_key(|(_, n)| *n).copied() else {
        return Named::Unwatched;
    };
    let Some(member) = view.members.iter().find(|m| m.address == Some(address)) else {
        return Named::Disagree(format!(
            "{votes} of {} Sentinels name {address}, which is no member's address",
            watch.sentinels
        ));
    };
    if votes >= majority {
        Named::Agreed(member.name.clone())
    } else if counts.len() == 1 {
        Named::Partly(member.name.clone())
    } else {
        Named::Disagree(format!(
            "{} of {} Sentinels name {address}, not a majority ({majority})",
            votes, watch.sentinels
        ))
    }
}

/// The member a majority of Sentinels name, for the status and the Services.
pub(super) fn primary_name(view: &View, watch: &Watch) -> Option<String> {
    match named(view, watch) {
        Named::Agreed(name) => Some(name),
        _ => None,
    }
}

/// The next step with Sentinel on. `safety_only`: no member leaving, switchover or roll.
pub(super) fn decide(view: &View, watch: &Watch, safety_only: bool) -> Decision {
    let primary = match named(view, watch) {
        Named::Disagree(why) => {
            return Decision::wait(
                Reason::SentinelsDisagree,
                format!("{why}: nothing changes until they agree"),
            );
        }
        Named::Partly(name) => {
            // The rest are told to watch the same member, if it serves as primary; nothing else
            // is done before a majority watches.
            let serving = view.get(&name).filter(|p| p.state.is_primary());
            let teach = serving.filter(|_| !safety_only);
            return teach
                .and_then(|primary| watching(view, watch, primary))
                .unwrap_or_else(|| {
                    Decision::wait(
                        Reason::SentinelsDisagree,
                        format!(
                            "only a minority of the Sentinels watch {name}: nothing changes \
                             until a majority does"
                        ),
                    )
                });
        }
        Named::Unwatched => match view.primary() {
            // Nothing watches yet: the first primary is chosen as without Sentinel (nobody
            // else could choose one), and only the first.
            None if view.recorded.is_none() => {
                return if safety_only {
                    Decision::Steady
                } else {
                    primary::choose(view)
                };
            }
            None => {
                return Decision::wait(
                    Reason::SentinelFailingOver,
                    format!(
                        "no Sentinel names a primary and {} does not serve: with Sentinel on, \
                         the operator never promotes one itself",
                        view.recorded.unwrap_or("the primary")
                    ),
                );
            }
            Some(primary) => primary,
        },
        Named::Agreed(name) => match view.get(&name).filter(|p| p.state.is_primary()) {
            Some(primary) => primary,
            None => {
                return Decision::wait(
                    Reason::SentinelFailingOver,
                    format!(
                        "the Sentinels name {name}, which does not serve as primary: Sentinel \
                         elects the next primary; the operator never promotes one itself"
                    ),
                );
            }
        },
    };
    // Not in the safety pass: it runs when the rest of the pass failed, without the login a
    // Sentinel needs (told to monitor without it, it would find every server refusing it).
    if !safety_only && let Some(decision) = watching(view, watch, primary) {
        return decision;
    }
    if let Some(sentinel) = failing_over(view) {
        return Decision::wait(
            Reason::SentinelFailingOver,
            format!("{sentinel} runs a failover; the operator waits for its end"),
        );
    }
    let decision = attach::fence(view, primary).or_else(|| attach::followers(view, primary));
    let decision = if safety_only {
        decision
    } else {
        decision
            .or_else(|| changes::leaving(view, primary))
            .or_else(|| changes::gates(view, primary))
            .or_else(|| changes::preferred(view, primary))
            .or_else(|| changes::roll(view, primary))
    };
    match decision {
        Some(d) => handed_to_sentinel(view, watch, d),
        None if safety_only => Decision::Steady,
        None => learning(view, primary).unwrap_or(Decision::Steady),
    }
}

/// A watching Sentinel that has not learned every replica in step with the primary, or every
/// other Sentinel that answers: until it has, it could not elect a replica it does not know or
/// gather the others' votes, so the replication is not steady (a Sentinel learns replicas from
/// the primary's INFO every 10 s, and its peers from their hellos every 2 s).
fn learning(view: &View, primary: Live<'_>) -> Option<Decision> {
    let in_step = view
        .live()
        .filter(|l| l.name() != primary.name() && l.state.in_step_with(primary.address()))
        .count();
    let answering = view
        .observed
        .sentinels
        .values()
        .filter(|reach| reach.as_ref().is_ok_and(|s| s.master.is_some()))
        .count();
    view.observed.sentinels.iter().find_map(|(name, reach)| {
        let master = reach.as_ref().ok()?.master.as_ref()?;
        let replicas = usize::try_from(master.replicas_known).unwrap_or(usize::MAX);
        let peers = usize::try_from(master.sentinels_known).unwrap_or(usize::MAX);
        let missing = if replicas < in_step {
            format!("{replicas} of the {in_step} replicas in step")
        } else if peers + 1 < answering {
            format!("{peers} of the {} other Sentinels", answering - 1)
        } else {
            return None;
        };
        Some(Decision::wait(
            Reason::Converging,
            format!("{name} has not learned {missing} yet: it could not fail over well before"),
        ))
    })
}

/// The first Sentinel that does not monitor the master name, or watches it otherwise than the
/// spec says, is told to watch `primary`.
fn watching(view: &View, watch: &Watch, primary: Live<'_>) -> Option<Decision> {
    view.observed.sentinels.iter().find_map(|(name, reach)| {
        let state = reach.as_ref().ok()?;
        let monitor = match &state.master {
            None => true,
            Some(master) if !master.as_watched(watch) => false,
            Some(_) => return None,
        };
        let why = if monitor {
            format!(
                "{name} does not watch {}: it monitors {} now",
                watch.master_name,
                primary.name()
            )
        } else {
            format!("{name} watches {} with other settings", watch.master_name)
        };
        Some(Decision::act(
            Action::SentinelWatch {
                on: Target {
                    member: name.clone(),
                    address: state.address,
                },
                primary: primary.target(),
                watch: Box::new(watch.clone()),
                monitor,
            },
            Reason::Converging,
            why,
        ))
    })
}

/// A Sentinel whose master flags say a failover runs.
fn failing_over<'a>(view: &View<'a>) -> Option<&'a str> {
    view.observed.sentinels.iter().find_map(|(name, reach)| {
        let failing = reach.as_ref().ok()?.master.as_ref()?.failing_over;
        failing.then_some(name.as_str())
    })
}

/// A planned switchover (FAILOVER TO) becomes `SENTINEL FAILOVER` on a Sentinel that answers;
/// every other decision stays as it is (none of the engine's rules here promotes).
fn handed_to_sentinel(view: &View, watch: &Watch, decision: Decision) -> Decision {
    let Decision::Act {
        action: Action::Switchover { on: from, to, .. },
        reason,
        ..
    } = &decision
    else {
        return decision;
    };
    let sentinel = view.observed.sentinels.iter().find_map(|(name, reach)| {
        let state = reach.as_ref().ok()?;
        state.master.as_ref()?;
        Some(Target {
            member: name.clone(),
            address: state.address,
        })
    });
    let Some(on) = sentinel else {
        return Decision::wait(*reason, "no Sentinel answers to hand the switchover to");
    };
    Decision::act(
        Action::SentinelFailover {
            on,
            master_name: watch.master_name.clone(),
            from: from.clone(),
            to: to.clone(),
        },
        *reason,
        format!(
            "{}; handed to Sentinel (SENTINEL FAILOVER {}): it elects the replica, toward {}",
            decision.message(),
            watch.master_name,
            to.member
        ),
    )
}
