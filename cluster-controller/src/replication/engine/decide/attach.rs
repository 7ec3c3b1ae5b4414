//! With a primary: it may serve replicas, and every other member replicates it.

use crate::engine::safety::sync_would_lose;

use super::super::decision::{Action, Decision, Reason};
use super::{Live, View};

/// The replication user starts disabled on every server start (the ACL file's fence). The
/// primary is admitted once no member that follows its address could lose data by syncing from
/// it, and replicas in step are admitted too, so that a planned switchover to one of them finds
/// it ready to serve.
pub(super) fn fence(view: &View, primary: Live<'_>) -> Option<Decision> {
    let user = view.spec.fence_user.as_deref()?;
    if primary.state.replication_admitted == Some(false) {
        let following = |l: &Live<'_>| {
            l.state
                .upstream
                .as_ref()
                .is_some_and(|u| u.is(primary.address()))
        };
        if let Some(richer) = richer_than(view, primary).filter(following) {
            return Some(conflict(primary, richer));
        }
        return Some(Decision::act(
            Action::Admit {
                on: primary.target(),
                user: user.to_owned(),
            },
            Reason::Converging,
            format!(
                "{} is the primary and no member holds data it lacks: it may serve replicas",
                primary.name()
            ),
        ));
    }
    view.live()
        .find(|l| {
            l.state.replication_admitted == Some(false) && l.state.in_step_with(primary.address())
        })
        .map(|replica| {
            Decision::act(
                Action::Admit {
                    on: replica.target(),
                    user: user.to_owned(),
                },
                Reason::Converging,
                format!(
                    "{} is in step with the primary: it may serve replicas after a switchover",
                    replica.name()
                ),
            )
        })
}

/// Every other member that does not follow the primary (it restarted, it was a primary, it
/// follows an address that is gone) is told to, unless it holds data the primary lacks: that
/// one is left alone and reported once nothing else is left to do.
pub(super) fn followers(view: &View, primary: Live<'_>) -> Option<Decision> {
    let strays: Vec<Live<'_>> = view
        .live()
        .filter(|l| l.name() != primary.name() && !l.state.loading)
        .filter(|l| {
            !l.state
                .upstream
                .as_ref()
                .is_some_and(|u| u.is(primary.address()))
        })
        .collect();
    let (richer, safe): (Vec<Live<'_>>, Vec<Live<'_>>) = strays
        .into_iter()
        .partition(|l| sync_would_lose(&primary.state.history, &l.state.history));
    if safe.is_empty() {
        return richer.first().map(|member| conflict(primary, *member));
    }
    safe.first().map(|member| {
            let member = *member;
            let why = match &member.state.upstream {
                None => format!(
                    "{} still acts as a primary; it now replicates {} (writes that only it took, which no replica confirmed, are dropped)",
                    member.name(),
                    primary.name()
                ),
                Some(u) if u.parked() => format!(
                    "{} (re)started and waits for its place; it replicates {}",
                    member.name(),
                    primary.name()
                ),
                Some(u) => format!(
                    "{} follows {}:{}, not the primary; it replicates {}",
                    member.name(),
                    u.host,
                    u.port,
                    primary.name()
                ),
            };
            Decision::act(
                Action::Follow {
                    on: member.target(),
                    primary: primary.target(),
                },
                Reason::Attaching,
                why,
            )
        })
}

/// A member that would lose data by replicating the primary.
fn richer_than<'a>(view: &View<'a>, primary: Live<'_>) -> Option<Live<'a>> {
    view.live().find(|l| {
        l.name() != primary.name() && sync_would_lose(&primary.state.history, &l.state.history)
    })
}

fn conflict(primary: Live<'_>, richer: Live<'_>) -> Decision {
    Decision::blocked(
        Reason::DataConflict,
        format!(
            "{} holds data the primary {} lacks ({} keys at offset {} of another history, against {} keys): replicating the primary would throw it away, so the operator leaves it alone. To keep the primary's data, delete {}'s volume (PVC valkey-{}-data) and its pod; it comes back empty and replicates the primary",
            richer.name(),
            primary.name(),
            richer.state.keys(),
            richer.state.history.offset,
            primary.state.keys(),
            richer.name(),
            richer.name()
        ),
    )
}
