//! The replication rules, from small fixtures: one test per rule, each naming what it protects.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Spec, decide, decide_in, health};
use crate::engine::safety::{LinkAge, ReplicationHistory};
use crate::engine::{Member, Scope};
use crate::replication::engine::decision::{Action, Decision, Reason};
use crate::replication::engine::observe::{Observation, Reach};
use crate::replication::engine::server::{PARKED_HOST, PARKED_PORT, ServerState, Upstream};
use crate::valkey::Version;
use crate::valkey::info::LinkStatus;

pub(super) const OLD: &str = "96d0ece2f6a59ea2e7d9c65d0cb88573c516fac1";
pub(super) const NEW: &str = "a13e72b19c9c5302fd9e871f769acf3b97d2bc13";
const ZERO: &str = "0000000000000000000000000000000000000000";

pub(super) fn name(i: u32) -> String {
    format!("r-{i}")
}

pub(super) fn addr(i: u32) -> SocketAddr {
    SocketAddr::from(([10, 213, 1, 10 + i as u8], 6379))
}

fn spec(replicas: u32) -> Spec {
    Spec {
        replicas,
        preferred: None,
        failover_after: Duration::from_secs(10),
        fence_user: None,
        switchover_timeout: Duration::from_secs(5),
        restored: None,
        sentinel: None,
    }
}

fn history(replid: &str, replid2: &str, offset: i64, keys: u64) -> ReplicationHistory {
    ReplicationHistory {
        replid: replid.into(),
        replid2: replid2.into(),
        offset,
        second_offset: if replid2 == ZERO { -1 } else { 1 },
        keys,
        aof: false,
    }
}

fn state(i: u32, upstream: Option<Upstream>, history: ReplicationHistory) -> ServerState {
    ServerState {
        address: addr(i),
        version: Version::new(9, 1, 2),
        upstream,
        offset: history.offset,
        history,
        loading: false,
        failover_state: "no-failover".into(),
        replicas: Vec::new(),
        replication_admitted: None,
        uptime_seconds: 0,
        aof: None,
    }
}

/// A primary on history `replid` (continuing `replid2`).
pub(super) fn primary(i: u32, replid: &str, replid2: &str, offset: i64, keys: u64) -> ServerState {
    state(i, None, history(replid, replid2, offset, keys))
}

/// A replica of member `of`, on that primary's history `replid`.
pub(super) fn replica(
    i: u32,
    of: u32,
    link: LinkAge,
    replid: &str,
    offset: i64,
    keys: u64,
) -> ServerState {
    let upstream = Upstream {
        host: addr(of).ip().to_string(),
        port: 6379,
        link: if link == LinkAge::Up {
            LinkStatus::Up
        } else {
            LinkStatus::Down
        },
        age: link,
        last_io_seconds: match link {
            LinkAge::Up => Some(0),
            LinkAge::DownFor(seconds) => Some(seconds),
            LinkAge::Never => None,
        },
        syncing: false,
    };
    state(i, Some(upstream), history(replid, ZERO, offset, keys))
}

/// A member that (re)started: a replica of nothing, a history of its own, its data.
fn parked(i: u32, keys: u64) -> ServerState {
    let upstream = Upstream {
        host: PARKED_HOST.into(),
        port: PARKED_PORT,
        link: LinkStatus::Down,
        age: LinkAge::Never,
        last_io_seconds: None,
        syncing: false,
    };
    state(
        i,
        Some(upstream),
        history(&format!("{:040}", 100 + i), ZERO, 0, keys),
    )
}

/// Members `0..n`, ready, each with an address.
pub(super) struct World {
    pub spec: Spec,
    pub members: Vec<Member>,
    pub observed: Observation,
    pub recorded: Option<String>,
}

impl World {
    pub(super) fn new(replicas: u32) -> Self {
        let members = (0..=replicas)
            .map(|i| {
                let mut m = Member::new(0, i, name(i));
                m.address = Some(addr(i));
                m.ready = true;
                m
            })
            .collect();
        Self {
            spec: spec(replicas),
            members,
            observed: Observation::default(),
            recorded: None,
        }
    }

    pub(super) fn recorded(mut self, i: u32) -> Self {
        self.recorded = Some(name(i));
        self
    }

    pub(super) fn up(mut self, i: u32, s: ServerState) -> Self {
        self.observed
            .members
            .insert(name(i), Reach::Up(Box::new(s)));
        self
    }

    pub(super) fn silent(mut self, i: u32) -> Self {
        self.observed.members.insert(
            name(i),
            Reach::Unreachable {
                address: addr(i),
                error: "connection refused".into(),
            },
        );
        self
    }

    pub(super) fn member(&mut self, i: u32) -> &mut Member {
        let Some(m) = self.members.iter_mut().find(|m| m.index == i) else {
            panic!("no member {i}");
        };
        m
    }

    pub(super) fn decide(&self) -> Decision {
        decide(
            &self.spec,
            &self.members,
            self.recorded.as_deref(),
            &self.observed,
        )
    }

    pub(super) fn decide_safely(&self) -> Decision {
        decide_in(
            Scope::Safety,
            &self.spec,
            &self.members,
            self.recorded.as_deref(),
            &self.observed,
        )
    }

    pub(super) fn health(&self) -> crate::replication::engine::Health {
        health(
            &self.spec,
            &self.members,
            self.recorded.as_deref(),
            &self.observed,
        )
    }

    /// A primary `r-0` with `r-1..=replicas` in step.
    pub(super) fn healthy(replicas: u32) -> Self {
        let mut w = Self::new(replicas)
            .recorded(0)
            .up(0, primary(0, NEW, OLD, 5000, 100));
        for i in 1..=replicas {
            w = w.up(i, replica(i, 0, LinkAge::Up, NEW, 5000, 100));
        }
        w
    }
}

fn action(d: &Decision) -> &Action {
    d.action()
        .unwrap_or_else(|| panic!("expected an action, got {d:?}"))
}

fn promoted(d: &Decision) -> &str {
    match action(d) {
        Action::Promote { on } => &on.member,
        other => panic!("expected a promotion, got {other:?}"),
    }
}

fn forced(d: &Decision) -> bool {
    matches!(d, Decision::Act { forced: true, .. })
}

#[test]
fn a_new_replication_promotes_its_first_member_then_attaches_the_others() {
    let w = World::new(2)
        .up(0, parked(0, 0))
        .up(1, parked(1, 0))
        .up(2, parked(2, 0));
    let d = w.decide();
    assert_eq!((promoted(&d), d.reason()), ("r-0", Reason::Forming));
    assert!(!forced(&d));

    let mut named = World::new(2)
        .up(0, parked(0, 0))
        .up(1, parked(1, 0))
        .up(2, parked(2, 0));
    named.spec.preferred = Some("r-1".into());
    assert_eq!(
        promoted(&named.decide()),
        "r-1",
        "spec.primary breaks the tie"
    );

    // Recreated over kept volumes: the fullest member wins whatever its index.
    let kept = World::new(2)
        .up(0, parked(0, 10))
        .up(1, parked(1, 0))
        .up(2, parked(2, 900));
    assert_eq!(promoted(&kept.decide()), "r-2");

    let formed = World::new(2)
        .recorded(0)
        .up(0, primary(0, NEW, ZERO, 0, 0))
        .up(1, parked(1, 0))
        .up(2, parked(2, 0));
    let d = formed.decide();
    assert!(
        matches!(action(&d), Action::Follow { on, primary } if on.member == "r-1" && primary.member == "r-0"),
        "{d:?}"
    );
}

#[test]
fn formation_waits_for_every_member_to_answer() {
    let w = World::new(2)
        .up(0, parked(0, 0))
        .up(1, parked(1, 0))
        .silent(2);
    let d = w.decide();
    assert!(
        matches!(d, Decision::Wait { .. }) && d.message().contains("r-2"),
        "{d:?}"
    );
}

#[test]
fn a_whole_replication_is_steady() {
    let w = World::healthy(2);
    assert_eq!(w.decide(), Decision::Steady(()));
    let h = health(&w.spec, &w.members, w.recorded.as_deref(), &w.observed);
    assert_eq!(
        (h.primary.as_deref(), h.replicas_in_step, h.replicas_wanted),
        (Some("r-0"), 2, 2)
    );
}

#[test]
fn a_restarted_replica_replicates_the_primary_again() {
    let w = World::healthy(2).up(2, parked(2, 100));
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Follow { on, .. } if on.member == "r-2"),
        "{d:?}"
    );
    assert_eq!(d.reason(), Reason::Attaching);
}

/// A member that restarted with its data: from its append-only file.
fn reloaded(i: u32, keys: u64) -> ServerState {
    let mut state = parked(i, keys);
    state.history.aof = true;
    state
}

#[test]
fn a_primary_that_restarted_with_its_data_is_the_primary_again() {
    let w = World::healthy(2).up(0, reloaded(0, 100));
    let d = w.decide();
    assert_eq!(
        (promoted(&d), d.reason()),
        ("r-0", Reason::PrimaryRestarted)
    );

    // A standalone server has no one to hand over to, with or without data; back without it
    // (no persistence), the loss is said with a Warning.
    let alone = World::new(0).recorded(0).up(0, parked(0, 0));
    let d = alone.decide();
    assert_eq!(
        (promoted(&d), d.reason(), forced(&d)),
        ("r-0", Reason::PrimaryEmptied, true)
    );
    assert!(d.message().contains("lost"), "{}", d.message());
    let kept = World::new(0).recorded(0).up(0, reloaded(0, 10));
    let d = kept.decide();
    assert_eq!((d.reason(), forced(&d)), (Reason::PrimaryRestarted, false));
}

/// A primary whose process was killed and restarted at once from its append-only file: the
/// file can miss writes it acknowledged and its replicas hold (Valkey puts off writing the file
/// while an fsync lags, up to 2 s, and replies meanwhile), WAIT-confirmed ones included. A replica
/// that followed it until it went away (its link went down when the process did) takes over; the
/// restarted member, parked, took no write since. Key counts say nothing here: the file's 100
/// keys against the replica's 100 (a missing write beside one the replica lacks). Seen on a
/// 2-core machine: 1 of 240 WAIT-confirmed writes lost when the file was kept.
#[test]
fn a_primary_back_from_its_file_hands_over_to_a_replica_that_followed_it_until_it_went_away() {
    let mut back = reloaded(0, 100);
    back.uptime_seconds = 3;
    let w = World::new(2)
        .recorded(0)
        .up(0, back.clone())
        .up(1, replica(1, 0, LinkAge::DownFor(4), OLD, 4900, 100))
        .up(2, replica(2, 0, LinkAge::DownFor(4), OLD, 5000, 100));
    let d = w.decide();
    assert_eq!((promoted(&d), d.reason()), ("r-2", Reason::PrimaryEmptied));
    assert!(forced(&d), "a failover is announced with a Warning");
    assert!(d.message().contains("append-only file"), "{}", d.message());

    // Replicas cut off well before it restarted may be far behind what the file holds: the
    // file wins.
    let behind = World::new(2)
        .recorded(0)
        .up(0, back.clone())
        .up(1, replica(1, 0, LinkAge::DownFor(120), OLD, 4900, 100))
        .up(2, replica(2, 0, LinkAge::DownFor(120), OLD, 5000, 100));
    let d = behind.decide();
    assert_eq!(
        (promoted(&d), d.reason()),
        ("r-0", Reason::PrimaryRestarted)
    );
}

#[test]
fn a_primary_that_restarted_empty_hands_over_to_the_replica_with_its_writes() {
    // r-0 restarted without its data; its replicas hold the data, r-2 a little more of it.
    let w = World::new(2)
        .recorded(0)
        .up(0, parked(0, 0))
        .up(1, replica(1, 0, LinkAge::DownFor(1), OLD, 4900, 99))
        .up(2, replica(2, 0, LinkAge::DownFor(1), OLD, 5000, 100));
    let d = w.decide();
    assert_eq!((promoted(&d), d.reason()), ("r-2", Reason::PrimaryEmptied));
    assert!(forced(&d), "a failover is announced with a Warning");
    assert!(d.message().contains("less data"), "{}", d.message());

    // Not before every member answers: the silent one might have more.
    let unsure = World::new(2)
        .recorded(0)
        .up(0, parked(0, 0))
        .up(1, replica(1, 0, LinkAge::DownFor(1), OLD, 4900, 99))
        .silent(2);
    assert!(matches!(unsure.decide(), Decision::Wait { .. }));
}

#[test]
fn a_primary_is_replaced_only_when_it_is_silent_for_everyone() {
    let lost = |age: LinkAge| {
        World::new(2)
            .recorded(0)
            .silent(0)
            .up(1, replica(1, 0, age, OLD, 5000, 100))
            .up(2, replica(2, 0, LinkAge::DownFor(30), OLD, 4000, 90))
    };
    let mut not_seen = lost(LinkAge::DownFor(30));
    not_seen.member(0).ready = false;
    let d = not_seen.decide();
    assert_eq!((promoted(&d), d.reason()), ("r-1", Reason::FailingOver));
    assert!(forced(&d));

    // A replica still has a link to it: it is alive, cut from the operator only.
    let mut alive = lost(LinkAge::Up);
    alive.member(0).ready = false;
    let d = alive.decide();
    assert!(
        matches!(
            d,
            Decision::Wait {
                reason: Reason::PrimaryUnreachable,
                ..
            }
        ),
        "{d:?}"
    );

    // A link Valkey still counts as up (for repl-timeout) but silent for longer than
    // failoverAfterSeconds proves nothing: it is a cut, not a live primary.
    let mut stale_link = lost(LinkAge::Up);
    stale_link.member(0).ready = false;
    if let Some(Reach::Up(s)) = stale_link.observed.members.get_mut("r-1")
        && let Some(u) = s.upstream.as_mut()
    {
        u.last_io_seconds = Some(40);
    }
    assert_eq!(promoted(&stale_link.decide()), "r-1");

    // The node-controller still reaches it.
    let seen = lost(LinkAge::DownFor(30));
    assert!(matches!(seen.decide(), Decision::Wait { .. }));

    // Silent for less than spec.failoverAfterSeconds.
    let mut brief = lost(LinkAge::DownFor(3));
    brief.member(0).ready = false;
    let d = brief.decide();
    assert!(
        matches!(d, Decision::Wait { .. }) && d.message().contains("3s"),
        "{d:?}"
    );

    // A replica that does not answer either: the one with every WAIT-acknowledged write may be
    // that one.
    let mut unsure = World::new(2)
        .recorded(0)
        .silent(0)
        .up(1, replica(1, 0, LinkAge::DownFor(30), OLD, 5000, 100))
        .silent(2);
    unsure.member(0).ready = false;
    assert!(matches!(
        unsure.decide(),
        Decision::Blocked {
            reason: Reason::NoSafeCandidate,
            ..
        }
    ));
}

#[test]
fn an_old_primary_never_takes_over_from_the_replicas_that_followed_the_new_one() {
    // r-1 was promoted (continuing r-0's history OLD); r-1 is now lost too, and r-0, back from a
    // partition, still claims to be primary with its own last writes.
    let mut w = World::new(2)
        .recorded(1)
        .up(0, primary(0, OLD, ZERO, 6000, 120))
        .silent(1)
        .up(2, replica(2, 1, LinkAge::DownFor(30), NEW, 5500, 110));
    w.member(1).ready = false;
    let d = w.decide();
    assert_eq!(promoted(&d), "r-2", "{d:?}");
}

#[test]
fn a_completed_switchover_is_followed() {
    // FAILOVER TO r-1 finished: r-0 follows r-1, which is primary; r-2 still follows r-0.
    let w = World::new(2)
        .recorded(0)
        .up(0, replica(0, 1, LinkAge::Up, NEW, 5000, 100))
        .up(1, primary(1, NEW, OLD, 5000, 100))
        .up(2, replica(2, 0, LinkAge::Up, NEW, 5000, 100));
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Follow { on, primary } if on.member == "r-2" && primary.member == "r-1"),
        "{d:?}"
    );
    let h = health(&w.spec, &w.members, w.recorded.as_deref(), &w.observed);
    assert_eq!(h.primary.as_deref(), Some("r-1"));
}

#[test]
fn an_old_primary_back_from_a_partition_replicates_the_new_one() {
    let w = World::new(2)
        .recorded(1)
        .up(0, primary(0, OLD, ZERO, 6000, 120))
        .up(1, primary(1, NEW, OLD, 5500, 110))
        .up(2, replica(2, 1, LinkAge::Up, NEW, 5500, 110));
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Follow { on, primary } if on.member == "r-0" && primary.member == "r-1"),
        "{d:?}"
    );
    assert!(d.message().contains("acts as a primary"), "{}", d.message());
}

#[test]
fn a_member_with_data_the_primary_lacks_is_left_alone_and_reported() {
    // r-2 came back with keys of a history the primary never had, more than the primary holds.
    let mut fresh_primary = primary(0, NEW, ZERO, 10, 5);
    fresh_primary.history.replid2 = ZERO.into();
    let w = World::new(2)
        .recorded(0)
        .up(0, fresh_primary)
        .up(1, parked(1, 0))
        .up(2, replica(2, 7, LinkAge::DownFor(600), OLD, 9000, 500));
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Follow { on, .. } if on.member == "r-1"),
        "the others are attached first: {d:?}"
    );
    let w = w.up(1, replica(1, 0, LinkAge::Up, NEW, 10, 5));
    let d = w.decide();
    assert!(
        matches!(
            d,
            Decision::Blocked {
                reason: Reason::DataConflict,
                ..
            }
        ),
        "{d:?}"
    );
    assert!(
        d.message().contains("r-2") && d.message().contains("PVC"),
        "{}",
        d.message()
    );
}

#[test]
fn the_fence_admits_the_primary_then_replicas_in_step() {
    let mut w = World::healthy(1);
    w.spec.fence_user = Some("replication".into());
    let mut p = primary(0, NEW, OLD, 5000, 100);
    p.replication_admitted = Some(false);
    let mut r = replica(1, 0, LinkAge::Up, NEW, 5000, 100);
    r.replication_admitted = Some(false);
    let w = w.up(0, p.clone()).up(1, r);
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Admit { on, user } if on.member == "r-0" && user == "replication")
    );
    p.replication_admitted = Some(true);
    let d = w.up(0, p).decide();
    assert!(
        matches!(action(&d), Action::Admit { on, .. } if on.member == "r-1"),
        "{d:?}"
    );
}

#[test]
fn the_named_primary_takes_over_by_a_planned_switchover() {
    let mut w = World::healthy(2);
    w.spec.preferred = Some("r-2".into());
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Switchover { on, to, .. } if on.member == "r-0" && to.member == "r-2"),
        "{d:?}"
    );
    assert!(!forced(&d), "a switchover loses nothing");

    // Not while it is catching up.
    let w2 = {
        let mut w2 = World::healthy(2).up(2, replica(2, 0, LinkAge::DownFor(2), NEW, 4000, 90));
        w2.spec.preferred = Some("r-2".into());
        w2
    };
    assert!(matches!(
        w2.decide(),
        Decision::Wait {
            reason: Reason::ReplicaSyncing,
            ..
        }
    ));
}

#[test]
fn a_roll_restarts_replicas_first_then_hands_over_and_restarts_the_primary() {
    let outdated = |m: &mut Member| {
        m.current_revision = Some("a".into());
        m.desired_revision = Some("b".into());
        m.allowed_revision = Some("a".into());
    };
    let mut w = World::healthy(2);
    for i in 0..=2 {
        outdated(w.member(i));
    }
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::AllowRestart { member } if member == "r-2"),
        "{d:?}"
    );
    // While it restarts, nothing else moves.
    w.member(2).allowed_revision = Some("b".into());
    assert!(matches!(
        w.decide(),
        Decision::Wait {
            reason: Reason::Rolling,
            ..
        }
    ));
    for i in 1..=2 {
        let m = w.member(i);
        m.current_revision = Some("b".into());
        m.allowed_revision = Some("b".into());
    }
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::Switchover { on, to, .. } if on.member == "r-0" && to.member == "r-1"),
        "the primary goes last, after a switchover: {d:?}"
    );
    assert_eq!(d.reason(), Reason::Rolling);

    let mut alone = World::healthy(0);
    outdated(alone.member(0));
    let d = alone.decide();
    assert!(matches!(action(&d), Action::AllowRestart { member } if member == "r-0"));
}

/// While the rest of a pass cannot go on, a primary back without its data is still replaced
/// and members still follow the primary; nothing that follows the spec happens (no formation, no
/// roll).
#[test]
fn the_safety_rules_run_when_nothing_else_may() {
    let emptied = World::new(2)
        .recorded(0)
        .up(0, parked(0, 0))
        .up(1, replica(1, 0, LinkAge::DownFor(1), OLD, 4900, 99))
        .up(2, replica(2, 0, LinkAge::DownFor(1), OLD, 5000, 100));
    assert_eq!(emptied.decide_safely(), emptied.decide());
    assert_eq!(promoted(&emptied.decide_safely()), "r-2");

    let stray = World::healthy(2).up(2, parked(2, 100));
    assert!(
        matches!(action(&stray.decide_safely()), Action::Follow { on, .. } if on.member == "r-2")
    );

    let forming = World::new(1).up(0, parked(0, 0)).up(1, parked(1, 0));
    assert!(matches!(forming.decide(), Decision::Act { .. }));
    assert_eq!(
        forming.decide_safely(),
        Decision::Steady(()),
        "no formation"
    );

    let mut rolling = World::healthy(1);
    rolling.member(1).current_revision = Some("a".into());
    rolling.member(1).desired_revision = Some("b".into());
    rolling.member(1).allowed_revision = Some("a".into());
    assert!(matches!(
        action(&rolling.decide()),
        Action::AllowRestart { .. }
    ));
    assert_eq!(rolling.decide_safely(), Decision::Steady(()), "no roll");
}

#[test]
fn scaling_in_removes_replicas_and_a_leaving_primary_hands_over_first() {
    let mut w = World::healthy(2);
    w.spec.replicas = 0;
    let d = w.decide();
    assert!(
        matches!(action(&d), Action::DeleteMember { member } if member == "r-2"),
        "{d:?}"
    );

    let mut leaving = World::new(2)
        .recorded(2)
        .up(0, replica(0, 2, LinkAge::Up, NEW, 5000, 100))
        .up(1, replica(1, 2, LinkAge::Up, NEW, 5000, 100))
        .up(2, primary(2, NEW, OLD, 5000, 100));
    leaving.spec.replicas = 0;
    let d = leaving.decide();
    assert!(
        matches!(action(&d), Action::Switchover { on, to, .. } if on.member == "r-2" && to.member == "r-0"),
        "{d:?}"
    );
}

#[test]
fn a_missing_member_is_waited_for() {
    let mut w = World::healthy(2);
    w.members.retain(|m| m.index != 1);
    let d = w.decide();
    assert!(
        matches!(
            d,
            Decision::Wait {
                reason: Reason::WaitingForNodes,
                ..
            }
        ) && d.message().contains("member 1")
    );
}

/// A replication restored from a backup: `r-0` loads the snapshot (`spec.restoreFrom`).
fn restoring(replicas: u32) -> World {
    let mut w = World::new(replicas);
    w.spec.restored = Some(name(0));
    w
}

#[test]
fn no_member_is_promoted_before_the_restored_member_has_loaded_its_data() {
    // Its init container still fetches the snapshot: the empty replica answers, and waits.
    let fetching = restoring(1).silent(0).up(1, parked(1, 0));
    let d = fetching.decide();
    assert!(
        matches!(d, Decision::Wait { .. }) && d.message().contains("r-0"),
        "{d:?}"
    );
    assert_eq!(fetching.decide_safely(), Decision::Steady(()));

    // Loading the snapshot: its key count means nothing yet.
    let mut state = parked(0, 10);
    state.loading = true;
    let loading = restoring(1).up(0, state).up(1, parked(1, 0));
    let d = loading.decide();
    assert!(
        matches!(d, Decision::Wait { .. }) && d.message().contains("r-0"),
        "{d:?}"
    );
}

#[test]
fn the_restored_member_becomes_the_primary_because_it_is_restored_not_by_its_key_count() {
    // An empty backup, and spec.primary naming another member: still the restored one.
    let mut empty = restoring(1).up(0, parked(0, 0)).up(1, parked(1, 0));
    empty.spec.preferred = Some(name(1));
    let d = empty.decide();
    assert_eq!((promoted(&d), d.reason()), ("r-0", Reason::Forming));
    assert!(d.message().contains("restored"), "{d:?}");

    // A replica over a kept volume with more keys than the backup: it syncs from the restored
    // member, never the other way round.
    let fuller = restoring(1).up(0, parked(0, 3000)).up(1, parked(1, 9000));
    assert_eq!(promoted(&fuller.decide()), "r-0");

    // The choice does not hang on a replica that is not up yet.
    let alone = restoring(2)
        .up(0, parked(0, 3000))
        .up(1, parked(1, 0))
        .silent(2);
    assert_eq!(promoted(&alone.decide()), "r-0");
}

#[test]
fn an_empty_member_that_says_it_is_primary_is_not_taken_for_the_restored_one() {
    // Nothing recorded, and the one member that says it is primary is not the restored one:
    // attaching the restored member to it would drop the backup's data.
    let w = restoring(1)
        .up(0, parked(0, 3000))
        .up(1, primary(1, NEW, ZERO, 0, 0));
    let d = w.decide();
    assert_eq!(
        (promoted(&d), d.reason()),
        ("r-0", Reason::Forming),
        "{d:?}"
    );
    let h = health(&w.spec, &w.members, w.recorded.as_deref(), &w.observed);
    assert_eq!(h.primary, None);
}
