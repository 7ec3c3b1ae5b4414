//! The rules with Sentinel on (`spec.sentinel`): Sentinel elects the primary when the primary
//! fails, the engine never does. The primary is the one a majority of all the Sentinels name;
//! with it the engine's own rules run as ever (the fence, strays told to follow, members leaving,
//! rolls), except that a planned switchover is handed to Sentinel (`SENTINEL FAILOVER`),
//! every Sentinel is first told to watch it, and nothing planned moves before every Sentinel
//! knows every replica in step (so that it could elect one). Where the engine alone would
//! promote, it waits.

use std::net::SocketAddr;

use super::super::decision::{Action, Decision, Handover, Reason, Target};
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

/// The primary a majority of all `watch.sentinels` Sentinels name, and no Sentinel that answers
/// names another (a Sentinel that does not answer counts against every address).
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
    if counts.len() > 1 {
        // A Sentinel names another member: one that just elected a new primary while the others
        // have not heard yet, or one left behind. Acting on the majority could demote the
        // primary just elected; the Sentinels agree again within seconds.
        let named: Vec<String> = answers
            .iter()
            .map(|(name, address)| format!("{name} names {address}"))
            .collect();
        return Named::Disagree(format!(
            "the Sentinels name different primaries ({})",
            named.join(", ")
        ));
    }
    let Some(member) = view.members.iter().find(|m| m.address == Some(address)) else {
        return Named::Disagree(format!(
            "{votes} of {} Sentinels name {address}, which is no member's address",
            watch.sentinels
        ));
    };
    if votes >= majority {
        Named::Agreed(member.name.clone())
    } else {
        Named::Partly(member.name.clone())
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
                    Decision::Steady(())
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
        // Nothing planned moves (a member leaving, a switchover, a restart) until every
        // Sentinel knows every replica in step: a Sentinel that knows no replica it can reach
        // cannot elect one if the primary is lost meanwhile, and the engine never promotes.
        decision
            .or_else(|| learning(view, primary))
            .or_else(|| changes::leaving(view, primary))
            .or_else(|| changes::gates(view, primary))
            .or_else(|| changes::preferred(view, primary))
            .or_else(|| changes::roll(view, primary))
    };
    match decision {
        Some(d) => handed_to_sentinel(view, watch, d),
        None if safety_only => Decision::Steady(()),
        None => forgetting(view, watch).unwrap_or(Decision::Steady(())),
    }
}

/// The first watching Sentinel that knows a replica at an address no member has, or (when every
/// Sentinel answers, so that one cut off for a while is not taken for gone) a Sentinel at an
/// address none of them has, is told `SENTINEL RESET`: a Sentinel never forgets an address by
/// itself (a deleted pod's, a restarted Sentinel's old one). Only once every Sentinel has learned
/// the live ones ([`learning`] comes first), so one at a time.
fn forgetting(view: &View, watch: &Watch) -> Option<Decision> {
    let members: Vec<SocketAddr> = view.members.iter().filter_map(|m| m.address).collect();
    let all_answer = view.observed.sentinels.len() == watch.sentinels as usize
        && view.observed.sentinels.values().all(Result::is_ok);
    let sentinels: Vec<SocketAddr> = view
        .observed
        .sentinels
        .values()
        .filter_map(|reach| Some(reach.as_ref().ok()?.address))
        .collect();
    view.observed.sentinels.iter().find_map(|(name, reach)| {
        let state = reach.as_ref().ok()?;
        let master = state.master.as_ref()?;
        let why = if let Some(gone) = master.replicas.iter().find(|r| !members.contains(r)) {
            format!("{name} knows a replica at {gone}, which no member has")
        } else if let Some(gone) = master
            .peers
            .iter()
            .find(|p| all_answer && !sentinels.contains(p))
        {
            format!("{name} knows a Sentinel at {gone}, which none of them has")
        } else {
            return None;
        };
        Some(Decision::act(
            Action::SentinelReset {
                on: Target {
                    member: name.clone(),
                    address: state.address,
                },
                master_name: watch.master_name.clone(),
            },
            Reason::Converging,
            format!("{why}: it forgets those gone and learns the live ones again"),
        ))
    })
}

/// A watching Sentinel that does not know every replica in step with the primary, or every
/// other Sentinel that answers: until it does, it could not elect a replica it does not know or
/// gather the others' votes, so the replication is not steady (a Sentinel learns replicas from
/// the primary's INFO every 10 s, and its peers from their hellos every 2 s).
fn learning(view: &View, primary: Live<'_>) -> Option<Decision> {
    let in_step: Vec<(String, SocketAddr)> = view
        .live()
        .filter(|l| l.name() != primary.name() && l.state.in_step_with(primary.address()))
        .filter_map(|l| Some((l.name().to_owned(), l.member.address?)))
        .collect();
    let answering: Vec<(&str, SocketAddr)> = view
        .observed
        .sentinels
        .iter()
        .filter_map(|(name, reach)| {
            let state = reach.as_ref().ok()?;
            state.master.as_ref()?;
            Some((name.as_str(), state.address))
        })
        .collect();
    view.observed.sentinels.iter().find_map(|(name, reach)| {
        let state = reach.as_ref().ok()?;
        let master = state.master.as_ref()?;
        let unknown = in_step
            .iter()
            .find(|(_, a)| !master.replicas.contains(a))
            .map(|(replica, _)| format!("the replica {replica}"))
            .or_else(|| {
                answering
                    .iter()
                    .find(|(_, a)| *a != state.address && !master.peers.contains(a))
                    .map(|(sentinel, _)| format!("the Sentinel {sentinel}"))
            })?;
        Some(Decision::wait(
            Reason::Converging,
            format!("{name} has not learned {unknown} yet: it could not fail over well before"),
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
    let others = view
        .live()
        .filter(|l| l.name() != from.member && l.name() != to.member)
        .map(|l| l.target())
        .collect();
    Decision::act(
        Action::SentinelFailover {
            on,
            master_name: watch.master_name.clone(),
            handover: Box::new(Handover {
                from: from.clone(),
                to: to.clone(),
                others,
            }),
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
