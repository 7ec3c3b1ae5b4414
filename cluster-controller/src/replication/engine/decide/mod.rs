//! The pure heart of the replication engine: from the spec, the members, the primary last
//! recorded and one observation, the one next step. Rules are tried in order and the first that
//! has something to say wins, so a later rule may assume every earlier one is satisfied:
//!
//! 1. every wanted member exists;
//! 2. there is a primary: the one recorded, or the member it handed over to ([`primary`]); when
//!    there is none, one is chosen: at formation the member with the most data (in a restore,
//!    the member that loaded the backup, once it has, whatever the others hold), after a restart
//!    the recorded primary again if it kept its data, else (and when it is lost) the replica
//!    with the most of its writes, under the safety rules below;
//! 3. the primary may serve replicas (the ACL fence) and every other member replicates it
//!    ([`attach`]);
//! 4. members the spec no longer wants leave, the primary first handing over ([`changes`]);
//! 5. every member is ready and every replica in step;
//! 6. the primary the user named takes over by a planned switchover;
//! 7. outdated members restart one at a time, replicas first, the primary after a switchover;
//! 8. otherwise the replication is steady.
//!
//! The safety rules are the engine's, shared with clusters ([`crate::engine::safety`]): no
//! member becomes the sync source of a replica that holds data it lacks; no replica is promoted
//! while the primary is alive for anyone (a replica's link, the node-controller's PING); and a
//! replica is promoted only when every member answers, so the one with the most writes is
//! known.

mod attach;
mod changes;
mod primary;
mod sentinel;
#[cfg(test)]
mod sentinel_tests;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

use crate::engine::{Member, Scope};

use super::decision::{Decision, Health, Reason, Target};
use super::observe::Observation;
use super::server::ServerState;

/// What the spec asks of the engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// Replicas wanted: members `0..=replicas`.
    pub replicas: u32,
    /// The member the user wants as primary (`spec.primary`).
    pub preferred: Option<String>,
    /// How long the primary must have been silent before a replica is promoted.
    pub failover_after: Duration,
    /// The replication user the ACL file starts disabled, when authentication fences it.
    pub fence_user: Option<String>,
    /// How long a planned switchover may pause writes.
    pub switchover_timeout: Duration,
    /// The member that loads a restored backup (`spec.restoreFrom`: the first member, until the
    /// restore is served): the first primary is this member, because it holds the backup's data,
    /// and no other member is promoted or trusted as primary before it has loaded that data.
    pub restored: Option<String>,
    /// With Sentinel on (`spec.sentinel`): what the Sentinels watch. Sentinel then elects the
    /// primary when it fails, and the engine never promotes one once a Sentinel watches.
    pub sentinel: Option<super::sentinel::Watch>,
}

/// Decides the one next step. Pure: the same inputs give the same decision.
pub fn decide(
    spec: &Spec,
    members: &[Member],
    recorded_primary: Option<&str>,
    observed: &Observation,
) -> Decision {
    decide_in(Scope::Everything, spec, members, recorded_primary, observed)
}

/// [`decide`] with only the rules of `scope`. [`Scope::Safety`]: a primary lost or back without
/// its data replaced by the replica with its writes, the primary admitted, and members that do
/// not follow it told to (each under the safety rules); never a formation, a member added or
/// removed, a switchover or a roll.
pub fn decide_in(
    scope: Scope,
    spec: &Spec,
    members: &[Member],
    recorded_primary: Option<&str>,
    observed: &Observation,
) -> Decision {
    if let Some(watch) = &spec.sentinel {
        if scope == Scope::Everything
            && let Some(decision) = check_members(spec, members)
        {
            return decision;
        }
        let view = View::new(spec, members, recorded_primary, observed);
        return sentinel::decide(&view, watch, scope == Scope::Safety);
    }
    if scope == Scope::Safety {
        let view = View::new(spec, members, recorded_primary, observed);
        return match view.primary() {
            None if recorded_primary.is_none() => Decision::Steady(()),
            None => primary::choose(&view),
            Some(primary) => attach::fence(&view, primary)
                .or_else(|| attach::followers(&view, primary))
                .unwrap_or(Decision::Steady(())),
        };
    }
    if let Some(decision) = check_members(spec, members) {
        return decision;
    }
    let view = View::new(spec, members, recorded_primary, observed);
    let Some(primary) = view.primary() else {
        return primary::choose(&view);
    };
    attach::fence(&view, primary)
        .or_else(|| attach::followers(&view, primary))
        .or_else(|| changes::leaving(&view, primary))
        .or_else(|| changes::gates(&view, primary))
        .or_else(|| changes::preferred(&view, primary))
        .or_else(|| changes::roll(&view, primary))
        .unwrap_or(Decision::Steady(()))
}

/// How the replication stands this pass, whatever the next step is.
pub fn health(
    spec: &Spec,
    members: &[Member],
    recorded_primary: Option<&str>,
    observed: &Observation,
) -> Health {
    let view = View::new(spec, members, recorded_primary, observed);
    // With Sentinel, the primary is the one a majority of Sentinels name.
    let named = spec
        .sentinel
        .as_ref()
        .and_then(|watch| sentinel::primary_name(&view, watch));
    let primary = match &named {
        Some(name) => view.get(name),
        None => view.primary(),
    };
    let in_step = primary.map_or(0, |p| {
        view.live()
            .filter(|l| l.name() != p.name() && l.state.in_step_with(p.address()))
            .filter(|l| l.member.index <= spec.replicas)
            .count()
    });
    Health {
        primary: named
            .or_else(|| primary.map(|p| p.name().to_owned()))
            .or_else(|| recorded_primary.map(str::to_owned)),
        replicas_wanted: spec.replicas,
        replicas_in_step: u32::try_from(in_step).unwrap_or(u32::MAX),
        answering: u32::try_from(view.live().count()).unwrap_or(u32::MAX),
        members_to_restart: u32::try_from(
            members
                .iter()
                .filter(|m| m.index <= spec.replicas && m.is_outdated())
                .count(),
        )
        .unwrap_or(u32::MAX),
    }
}

fn check_members(spec: &Spec, members: &[Member]) -> Option<Decision> {
    let missing: Vec<String> = (0..=spec.replicas)
        .filter(|i| !members.iter().any(|m| m.index == *i))
        .map(|i| format!("member {i}"))
        .collect();
    (!missing.is_empty()).then(|| {
        Decision::wait(
            Reason::WaitingForNodes,
            format!("waiting for {} to be created", missing.join(", ")),
        )
    })
}

/// A member that answered, with what it said.
#[derive(Debug, Clone, Copy)]
pub(super) struct Live<'a> {
    pub member: &'a Member,
    pub state: &'a ServerState,
}

impl Live<'_> {
    pub fn name(&self) -> &str {
        &self.member.name
    }

    pub fn address(&self) -> SocketAddr {
        self.state.address
    }

    pub fn target(&self) -> Target {
        Target {
            member: self.member.name.clone(),
            address: self.state.address,
        }
    }
}

/// The members, the observation and the spec, read once.
pub(super) struct View<'a> {
    pub spec: &'a Spec,
    pub members: &'a [Member],
    pub recorded: Option<&'a str>,
    pub observed: &'a Observation,
}

impl<'a> View<'a> {
    fn new(
        spec: &'a Spec,
        members: &'a [Member],
        recorded: Option<&'a str>,
        observed: &'a Observation,
    ) -> Self {
        Self {
            spec,
            members,
            recorded,
            observed,
        }
    }

    /// Members that answered, in index order.
    pub fn live(&self) -> impl Iterator<Item = Live<'a>> + '_ {
        let observed = self.observed;
        let mut members: Vec<&'a Member> = self.members.iter().collect();
        members.sort_by_key(|m| m.index);
        members.into_iter().filter_map(move |member| {
            Some(Live {
                member,
                state: observed.state(&member.name)?,
            })
        })
    }

    pub fn get(&self, name: &str) -> Option<Live<'a>> {
        let member = self.members.iter().find(|m| m.name == name)?;
        Some(Live {
            member,
            state: self.observed.state(name)?,
        })
    }

    pub fn member(&self, name: &str) -> Option<&'a Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Members that did not answer (no address, or no reply), by name.
    pub fn silent(&self) -> Vec<&'a str> {
        let mut silent: Vec<&'a Member> = self
            .members
            .iter()
            .filter(|m| self.observed.state(&m.name).is_none())
            .collect();
        silent.sort_by_key(|m| m.index);
        silent.into_iter().map(|m| m.name.as_str()).collect()
    }

    /// The primary: the recorded one while it says it is primary; the member it handed over to
    /// (it follows that member, which says it is primary: a switchover completed); with nothing
    /// recorded, the one member that says it is primary (in a restore, only the restored
    /// member). Any other primary is an old one, or a stranger's doing: never trusted with the
    /// data, only told to follow.
    pub fn primary(&self) -> Option<Live<'a>> {
        let masters: Vec<Live<'a>> = self
            .live()
            .filter(|l| l.state.is_primary())
            .filter(|l| {
                self.recorded.is_some()
                    || self.spec.restored.as_deref().is_none_or(|r| r == l.name())
            })
            .collect();
        match self.recorded.and_then(|name| self.get(name)) {
            Some(recorded) if recorded.state.is_primary() => Some(recorded),
            Some(recorded) => {
                let upstream = recorded.state.upstream.as_ref()?;
                masters.into_iter().find(|m| upstream.is(m.address()))
            }
            None if self.recorded.is_none() && masters.len() == 1 => masters.into_iter().next(),
            None => None,
        }
    }
}
