//! Choosing a primary when there is none: at formation, after the primary restarted, and when it
//! is lost. Every choice is a `Promote`; the Kubernetes side records the chosen member as the
//! primary before the command runs, so a controller that dies between the two finds it.

use crate::engine::safety::restart_would_lose;
use crate::valkey::info::LinkStatus;

use super::super::decision::{Action, Decision, Reason};
use super::{Live, View};

pub(super) fn choose(view: &View) -> Decision {
    match view.recorded {
        None => form(view),
        Some(name) => match view.get(name) {
            Some(recorded) => restarted(view, recorded),
            None => lost(view, name),
        },
    }
}

/// No primary was ever recorded: once every member answers, the one with the most data (all
/// are empty in a new replication; after the object was recreated over kept volumes, the
/// fullest) becomes the primary, the member `spec.primary` names or the first on a tie. A
/// replication restored from a backup is formed on its restored member alone ([`restored`]).
fn form(view: &View) -> Decision {
    if let Some(name) = view.spec.restored.as_deref() {
        return restored(view, name);
    }
    if let Some(waiting) = waiting_for_members(view, Reason::Forming) {
        return waiting;
    }
    let Some(first) = view.live().max_by(|a, b| {
        a.state
            .keys()
            .cmp(&b.state.keys())
            .then_with(|| preferred(view, a).cmp(&preferred(view, b)))
            .then_with(|| b.member.index.cmp(&a.member.index))
    }) else {
        return Decision::wait(Reason::WaitingForNodes, "no member answers yet");
    };
    Decision::act(
        Action::Promote { on: first.target() },
        Reason::Forming,
        format!(
            "{} becomes the primary ({} keys, the most of any member)",
            first.name(),
            first.state.keys()
        ),
    )
}

/// A replication restored from a backup: the member that loads the backup's snapshot becomes
/// the primary because it holds the backup, whatever the others hold or `spec.primary` says
/// (an empty member, or one over a kept volume, promoted first would have it sync from there
/// and drop the restored data). Nothing is promoted before it answers with the data loaded; the
/// other members need not answer yet: they start empty and sync from it.
fn restored(view: &View, name: &str) -> Decision {
    let Some(member) = view.get(name) else {
        return Decision::wait(
            Reason::Forming,
            format!(
                "waiting for {name} to start with the backup's snapshot before it becomes the \
                 primary; no other member is promoted before it"
            ),
        );
    };
    if member.state.loading {
        return Decision::wait(
            Reason::Forming,
            format!(
                "waiting for {name} to load the backup's snapshot before it becomes the primary"
            ),
        );
    }
    Decision::act(
        Action::Promote {
            on: member.target(),
        },
        Reason::Forming,
        format!(
            "{name} becomes the primary: it holds the restored backup ({} keys); the other \
             members sync from it",
            member.state.keys()
        ),
    )
}

/// The recorded primary answers but is not primary: it restarted (every member starts as a
/// replica of nothing) or was told to follow another server. With its data it is the primary
/// again; without it, the replica that has the data takes over, before the empty server can
/// serve as anyone's sync source.
fn restarted(view: &View, recorded: Live<'_>) -> Decision {
    if recorded.state.loading {
        return Decision::wait(
            Reason::PrimaryRestarted,
            format!("{} restarted and is loading its data", recorded.name()),
        );
    }
    let richer = view.live().find(|other| {
        other.name() != recorded.name()
            && restart_would_lose(&recorded.state.history, &other.state.history)
    });
    let followed = view
        .live()
        .find(|other| other.name() != recorded.name() && followed_until_restart(&recorded, other));
    let richer = richer.or(followed);
    let Some(richer) = richer else {
        let promote = Action::Promote {
            on: recorded.target(),
        };
        let history = &recorded.state.history;
        if !history.aof && history.started_fresh() {
            // Nothing it held survived (no persistence), and no member holds it: said with a
            // Warning, never passed off as a restart with its data.
            return Decision::forced(
                promote,
                Reason::PrimaryEmptied,
                format!(
                    "{} restarted without persistence and no member holds its data: whatever it \
                     held is lost; it is the primary again, with {} keys",
                    recorded.name(),
                    recorded.state.keys()
                ),
            );
        }
        return Decision::act(
            promote,
            Reason::PrimaryRestarted,
            format!(
                "{} restarted with its data ({} keys; no member holds more) and is the primary again",
                recorded.name(),
                recorded.state.keys()
            ),
        );
    };
    let emptied = if recorded.state.history.aof {
        format!(
            "{} restarted from its append-only file, which can miss writes {} holds (Valkey puts \
             off writing the file while an fsync lags, and replies meanwhile); {} followed it \
             until it went away",
            recorded.name(),
            richer.name(),
            richer.name()
        )
    } else {
        format!(
            "{} restarted with less data than {} ({} keys against {})",
            recorded.name(),
            richer.name(),
            recorded.state.keys(),
            richer.state.keys()
        )
    };
    if let Some(waiting) = waiting_for_members(view, Reason::PrimaryEmptied) {
        return waiting;
    }
    match best_replica(view, recorded.name()) {
        Some(candidate) => Decision::forced(
            Action::Promote {
                on: candidate.target(),
            },
            Reason::PrimaryEmptied,
            format!(
                "{emptied}: {} has the most of its writes (offset {}) and becomes the primary; {} will replicate it",
                candidate.name(),
                candidate.state.offset,
                recorded.name()
            ),
        ),
        None => Decision::blocked(
            Reason::NoSafeCandidate,
            format!("{emptied}, and no replica can take over"),
        ),
    }
}

/// The recorded primary does not answer. A replica is promoted only when the primary is
/// silent for everyone: no replica has heard from it for `failover_after` (the members ping
/// their replicas every second, `repl-ping-replica-period 1`, so a live primary is heard), the
/// node-controller does not reach it either, and every other member answers (so the replica
/// with the most of the primary's writes is known, and every write a replica acknowledged, with
/// WAIT, is on it).
fn lost(view: &View, recorded: &str) -> Decision {
    let others: Vec<Live<'_>> = view.live().filter(|l| l.name() != recorded).collect();
    if others.is_empty() && view.members.iter().all(|m| m.name == recorded) {
        return Decision::wait(
            Reason::PrimaryUnreachable,
            format!(
                "{recorded} does not answer; it has no replica to take over, so the replication waits for it"
            ),
        );
    }
    let after = view.spec.failover_after.as_secs();
    // Valkey counts whole seconds of its clock, so a reported N may be as little as N - 1 in
    // fact: only more than `after` proves `after`. A replica whose link still counts as up
    // heard from the primary within `repl-timeout`; its last byte says more precisely when.
    let silences: Vec<(Live<'_>, u64)> = others
        .iter()
        .filter_map(|l| {
            let upstream = l.state.upstream.as_ref().filter(|u| !u.parked())?;
            Some((*l, upstream.silent_for()?))
        })
        .collect();
    if let Some((witness, seconds)) = silences.iter().find(|(l, seconds)| {
        *seconds <= after
            && l.state
                .upstream
                .as_ref()
                .is_some_and(|u| u.link == crate::valkey::info::LinkStatus::Up)
    }) {
        return Decision::wait(
            Reason::PrimaryUnreachable,
            format!(
                "{recorded} does not answer the operator, but {} heard from it {seconds}s ago over its replication link: it is alive, and no replica is promoted",
                witness.name()
            ),
        );
    }
    if view.member(recorded).is_some_and(|m| m.ready) {
        return Decision::wait(
            Reason::PrimaryUnreachable,
            format!(
                "{recorded} does not answer the operator, but the node-controller still reaches it: no replica is promoted"
            ),
        );
    }
    let silent: Vec<&str> = view
        .silent()
        .into_iter()
        .filter(|name| *name != recorded)
        .collect();
    if !silent.is_empty() {
        return Decision::blocked(
            Reason::NoSafeCandidate,
            format!(
                "{recorded} and {} do not answer; a replica is promoted only when every other member answers, so that the one with every acknowledged write is known",
                silent.join(", ")
            ),
        );
    }
    let shortest = silences.iter().map(|(_, seconds)| *seconds).min();
    if let Some(seconds) = shortest
        && seconds <= after
    {
        return Decision::wait(
            Reason::PrimaryUnreachable,
            format!(
                "{recorded} has not answered for {seconds}s; a replica is promoted once it has been silent for {after}s"
            ),
        );
    }
    match best_replica(view, recorded) {
        Some(candidate) => Decision::forced(
            Action::Promote {
                on: candidate.target(),
            },
            Reason::FailingOver,
            format!(
                "{recorded} is lost (silent for {}s to the operator, the node-controller and every replica): {} has the most of its writes (offset {}) and becomes the primary",
                shortest.unwrap_or(after),
                candidate.name(),
                candidate.state.offset
            ),
        ),
        None => Decision::blocked(
            Reason::NoSafeCandidate,
            format!("{recorded} is lost and no replica can take over"),
        ),
    }
}

/// Wait while any member is silent or loading: a choice made without it could be the wrong one.
fn waiting_for_members(view: &View, reason: Reason) -> Option<Decision> {
    let silent = view.silent();
    if !silent.is_empty() {
        return Some(Decision::wait(
            reason,
            format!(
                "waiting for {} to answer before choosing the primary",
                silent.join(", ")
            ),
        ));
    }
    view.live().find(|l| l.state.loading).map(|l| {
        Decision::wait(
            reason,
            format!(
                "waiting for {} to load its data before choosing the primary",
                l.name()
            ),
        )
    })
}

/// The replica (never a server that claims to be primary: an old primary or someone else's)
/// with the most of the lost primary's writes: those that were following it first, by
/// replication offset, then restarted ones by key count; `spec.primary`'s member, then the
/// lowest index, on a tie.
/// How long a killed process may take to start again and still count as restarted at once.
const RESTART_SLACK_SECONDS: u64 = 5;

/// Whether `replica` followed the recorded primary, now back from its append-only file, until
/// the primary's process went away: it followed that server, and its link went down no earlier
/// than the new process started (less the time a restart takes). The file can miss writes the
/// primary acknowledged (with `appendfsync everysec` Valkey puts off writing it, up to 2 s,
/// while an earlier fsync lags, and replies all the same), which its replicas received at once:
/// WAIT-confirmed writes among them. Such a replica holds every write a replica acknowledged,
/// and the restarted member, parked, took none since; the replica takes over, and what it may
/// lack is what asynchronous replication loses in any failover. A replica cut off well before
/// the restart (a partition, a long sync) may be far behind the file, which then wins, as it
/// does when the replica has not seen its link go down (a machine that crashed, not a process).
fn followed_until_restart(restarted: &Live<'_>, replica: &Live<'_>) -> bool {
    let history = &restarted.state.history;
    if !history.aof || !history.started_fresh() || replica.state.offset <= 0 {
        return false;
    }
    let Some(upstream) = replica.state.upstream.as_ref() else {
        return false;
    };
    upstream.is(restarted.state.address)
        && upstream.link == LinkStatus::Down
        && replica.state.history.replid != history.replid
        && upstream
            .silent_for()
            .is_some_and(|silent| silent <= restarted.state.uptime_seconds + RESTART_SLACK_SECONDS)
}

pub(super) fn best_replica<'a>(view: &View<'a>, except: &str) -> Option<Live<'a>> {
    view.live()
        .filter(|l| l.name() != except && !l.state.is_primary() && !l.state.loading)
        .max_by(|a, b| {
            let linked = |l: &Live<'_>| !l.state.parked();
            linked(a)
                .cmp(&linked(b))
                .then_with(|| a.state.offset.cmp(&b.state.offset))
                .then_with(|| a.state.keys().cmp(&b.state.keys()))
                .then_with(|| preferred(view, a).cmp(&preferred(view, b)))
                .then_with(|| b.member.index.cmp(&a.member.index))
        })
}

fn preferred(view: &View, live: &Live<'_>) -> bool {
    view.spec.preferred.as_deref() == Some(live.name())
}
