//! The rules with Sentinel on, from the same fixtures: the engine follows the primary a majority
//! of Sentinels name, tells every Sentinel what to watch, hands planned switchovers to Sentinel
//! and never promotes once a Sentinel watches.

use std::net::SocketAddr;

use super::tests::{NEW, OLD, World, addr, name, primary, replica};
use crate::engine::safety::LinkAge;
use crate::replication::engine::decision::{Action, Decision, Reason};
use crate::replication::engine::sentinel::{MasterView, SentinelState, Watch};

fn watch() -> Watch {
    Watch {
        master_name: "orders".into(),
        quorum: 2,
        sentinels: 3,
        down_after_ms: 5000,
        failover_timeout_ms: 60000,
        login: None,
    }
}

fn sentinel_addr(i: u32) -> SocketAddr {
    SocketAddr::from(([10, 213, 2, 10 + i as u8], 26379))
}

trait WithSentinels {
    fn sentinel_on(self) -> Self;
    /// Sentinel `i` names member `of` as the primary, with the spec's settings.
    fn names(self, i: u32, of: u32) -> Self;
    fn unwatched(self, i: u32) -> Self;
    fn sentinel_silent(self, i: u32) -> Self;
    /// Sentinel `i` knows the replicas at these members' addresses and these other Sentinels.
    fn knows(self, i: u32, replicas: &[u32], sentinels: &[u32]) -> Self;
}

impl WithSentinels for World {
    fn sentinel_on(mut self) -> Self {
        self.spec.sentinel = Some(watch());
        self
    }

    fn names(mut self, i: u32, of: u32) -> Self {
        let w = watch();
        self.observed.sentinels.insert(
            format!("s-{i}"),
            Ok(SentinelState {
                address: sentinel_addr(i),
                master: Some(MasterView {
                    primary: addr(of),
                    quorum: w.quorum,
                    down_after_ms: w.down_after_ms,
                    failover_timeout_ms: w.failover_timeout_ms,
                    failing_over: false,
                    // Everything learned: the healthy worlds' replicas and the other two.
                    replicas: vec![addr(1), addr(2)],
                    peers: (0..3).filter(|j| *j != i).map(sentinel_addr).collect(),
                }),
            }),
        );
        self
    }

    fn unwatched(mut self, i: u32) -> Self {
        self.observed.sentinels.insert(
            format!("s-{i}"),
            Ok(SentinelState {
                address: sentinel_addr(i),
                master: None,
            }),
        );
        self
    }

    fn knows(mut self, i: u32, replicas: &[u32], sentinels: &[u32]) -> Self {
        if let Some(Ok(SentinelState {
            master: Some(master),
            ..
        })) = self.observed.sentinels.get_mut(&format!("s-{i}"))
        {
            master.replicas = replicas.iter().map(|r| addr(*r)).collect();
            master.peers = sentinels.iter().map(|s| sentinel_addr(*s)).collect();
        }
        self
    }

    fn sentinel_silent(mut self, i: u32) -> Self {
        self.observed
            .sentinels
            .insert(format!("s-{i}"), Err("connection refused".into()));
        self
    }
}

fn waits_for(d: &Decision, reason: Reason) -> bool {
    matches!(d, Decision::Wait { reason: r, .. } if *r == reason)
}

/// Nothing watches a new replication yet: its first primary is chosen as without Sentinel.
#[test]
fn the_first_primary_is_chosen_before_any_sentinel_watches() {
    let w = World::new(1)
        .sentinel_on()
        .up(0, primary(0, NEW, OLD, 0, 0))
        .up(1, primary(1, OLD, OLD, 0, 0))
        .unwatched(0);
    // Two servers claim primary with nothing recorded: formation picks one.
    let d = w.decide();
    assert!(matches!(d.action(), Some(Action::Promote { .. })), "{d:?}");
}

/// A Sentinel that does not monitor the name is told to watch the primary the engine serves.
#[test]
fn a_sentinel_that_does_not_watch_is_told_to_monitor_the_primary() {
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .unwatched(1)
        .names(2, 0);
    let d = w.decide();
    match d.action() {
        Some(Action::SentinelWatch {
            on,
            primary,
            monitor,
            watch: told,
        }) => {
            assert_eq!(on.member, "s-1");
            assert_eq!(primary.member, name(0));
            assert!(*monitor);
            assert_eq!(told.quorum, 2);
        }
        other => panic!("expected SENTINEL MONITOR, got {other:?} ({d:?})"),
    }
    // Watched as the spec says everywhere: steady.
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 0)
        .names(2, 0);
    assert_eq!(w.decide(), Decision::Steady(()));
}

/// A Sentinel watching with other settings (the spec changed) gets SENTINEL SET, no MONITOR.
#[test]
fn changed_settings_reach_a_watching_sentinel_by_sentinel_set() {
    let mut w = World::healthy(1)
        .sentinel_on()
        .names(0, 0)
        .names(1, 0)
        .names(2, 0);
    if let Some(watch) = w.spec.sentinel.as_mut() {
        watch.down_after_ms = 3000;
    }
    let d = w.decide();
    assert!(
        matches!(
            d.action(),
            Some(Action::SentinelWatch { monitor: false, .. })
        ),
        "{d:?}"
    );
}

/// The primary lost: without Sentinel the engine would promote the replica with its writes
/// (once every check passes); with Sentinel it waits for Sentinel's election, also in the safety
/// scope and when no Sentinel answers.
#[test]
fn the_engine_never_promotes_while_sentinel_watches() {
    let lost = || {
        World::new(2)
            .recorded(0)
            .silent(0)
            .up(1, replica(1, 0, LinkAge::DownFor(60), NEW, 5000, 100))
            .up(2, replica(2, 0, LinkAge::DownFor(60), NEW, 4000, 90))
    };
    let mut without = lost();
    without.member(0).ready = false;
    assert!(
        matches!(without.decide().action(), Some(Action::Promote { .. })),
        "the fixture is one where the engine alone promotes"
    );
    let mut with = lost().sentinel_on().names(0, 0).names(1, 0).names(2, 0);
    with.member(0).ready = false;
    assert!(
        waits_for(&with.decide(), Reason::SentinelFailingOver),
        "{:?}",
        with.decide()
    );
    assert!(waits_for(
        &with.decide_safely(),
        Reason::SentinelFailingOver
    ));
    let mut unanswered = lost()
        .sentinel_on()
        .sentinel_silent(0)
        .sentinel_silent(1)
        .sentinel_silent(2);
    unanswered.member(0).ready = false;
    let d = unanswered.decide();
    assert!(waits_for(&d, Reason::SentinelFailingOver), "{d:?}");
}

/// Sentinel elected r-2: the engine follows it (the status, the Services), tells the member
/// still following the old primary to follow r-2, and does not counter the election even though
/// r-0 was recorded.
#[test]
fn a_primary_elected_by_sentinel_is_followed_and_never_countered() {
    let w = World::new(2)
        .sentinel_on()
        .recorded(0)
        .silent(0)
        .up(1, replica(1, 0, LinkAge::DownFor(8), NEW, 5000, 100))
        .up(2, primary(2, "f".repeat(40).as_str(), NEW, 5000, 100))
        .names(0, 2)
        .names(1, 2)
        .names(2, 2);
    let health = w.health();
    assert_eq!(health.primary.as_deref(), Some("r-2"));
    let d = w.decide();
    match d.action() {
        Some(Action::Follow { on, primary }) => {
            assert_eq!(
                (on.member.as_str(), primary.member.as_str()),
                ("r-1", "r-2")
            );
        }
        other => panic!("expected r-1 told to follow r-2, got {other:?} ({d:?})"),
    }
}

/// No majority names one primary: nothing changes.
#[test]
fn sentinels_that_disagree_change_nothing() {
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 1)
        .sentinel_silent(2);
    let d = w.decide();
    assert!(waits_for(&d, Reason::SentinelsDisagree), "{d:?}");
    assert_eq!(
        w.health().primary.as_deref(),
        Some("r-0"),
        "the engine's own view"
    );
}

/// spec.primary names another member: the switchover is handed to Sentinel.
#[test]
fn a_planned_switchover_is_a_sentinel_failover() {
    let mut w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 0)
        .names(2, 0);
    w.spec.preferred = Some(name(2));
    let d = w.decide();
    match d.action() {
        Some(Action::SentinelFailover {
            master_name,
            handover,
            ..
        }) => {
            assert_eq!(master_name, "orders");
            assert_eq!(
                (handover.from.member.as_str(), handover.to.member.as_str()),
                ("r-0", "r-2")
            );
            let others: Vec<&str> = handover.others.iter().map(|o| o.member.as_str()).collect();
            assert_eq!(others, ["r-1"]);
        }
        other => panic!("expected SENTINEL FAILOVER, got {other:?} ({d:?})"),
    }
    assert!(!matches!(d.action(), Some(Action::Switchover { .. })));
}

/// The safety pass (the rest of the pass failed: no Secrets read, so no login to give) never
/// tells a Sentinel to watch: a Sentinel told to monitor without the login would find every
/// server refusing it and take the primary for down.
#[test]
fn the_safety_pass_tells_no_sentinel_what_to_watch() {
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .unwatched(1)
        .names(2, 0);
    assert_eq!(w.decide_safely(), Decision::Steady(()));
}

/// Sentinels told one at a time: while only one watches (a minority), the others that watch
/// nothing are told to watch the same primary, which still serves; a Sentinel that names
/// another member is a disagreement, and nothing is told.
#[test]
fn sentinels_are_taught_one_after_another_while_a_minority_watches() {
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .unwatched(1)
        .unwatched(2);
    match w.decide().action() {
        Some(Action::SentinelWatch { on, primary, .. }) => {
            assert_eq!(on.member, "s-1");
            assert_eq!(primary.member, name(0));
        }
        other => panic!("expected SENTINEL MONITOR, got {other:?}"),
    }
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 1)
        .unwatched(2);
    assert!(waits_for(&w.decide(), Reason::SentinelsDisagree));
}

/// A Sentinel that has not learned every replica in step, or every other Sentinel that
/// answers, could not fail over well (it would not know whom to elect, or could not gather a
/// quorum): the replication is not steady (not Ready) until it has.
#[test]
fn the_replication_is_not_steady_before_every_sentinel_learned_the_replicas_and_its_peers() {
    let learned = || {
        World::healthy(2)
            .sentinel_on()
            .names(0, 0)
            .names(1, 0)
            .names(2, 0)
    };
    assert_eq!(learned().decide(), Decision::Steady(()));
    for w in [
        learned().knows(1, &[1], &[0, 2]),
        learned().knows(2, &[1, 2], &[0]),
    ] {
        let d = w.decide();
        assert!(waits_for(&d, Reason::Converging), "{d:?}");
        assert!(d.message().contains("has not learned"), "{d:?}");
    }
    // A Sentinel that does not answer is not expected to be known.
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 0)
        .sentinel_silent(2)
        .knows(0, &[1, 2], &[1])
        .knows(1, &[1, 2], &[0]);
    assert_eq!(w.decide(), Decision::Steady(()));
}

/// A Sentinel remembers every replica and Sentinel it ever saw (an address a pod no longer has,
/// a Sentinel restarted at a new address). Once everything else is steady, a Sentinel that knows
/// a replica at an address no member has, or a Sentinel none of them is, is told `SENTINEL
/// RESET`, one at a time: it forgets them and learns the live ones again (and until it has, the
/// replication is not steady, so the next waits).
#[test]
fn a_sentinel_that_remembers_gone_replicas_or_sentinels_is_reset_once_steady() {
    let stale = |w: World| {
        let d = w.decide();
        match d.action() {
            Some(Action::SentinelReset { on, master_name }) => {
                assert_eq!(master_name, "orders");
                on.member.clone()
            }
            other => panic!("expected SENTINEL RESET, got {other:?} ({d:?})"),
        }
    };
    let learned = || {
        World::healthy(2)
            .sentinel_on()
            .names(0, 0)
            .names(1, 0)
            .names(2, 0)
    };
    // Member 7 does not exist (a deleted pod's address); Sentinel 5 neither.
    assert_eq!(stale(learned().knows(1, &[1, 2, 7], &[0, 2])), "s-1");
    assert_eq!(stale(learned().knows(2, &[1, 2], &[0, 1, 5])), "s-2");
    // Not while another is still learning again.
    let d = learned()
        .knows(0, &[1], &[1, 2])
        .knows(1, &[1, 2, 7], &[0, 2])
        .decide();
    assert!(waits_for(&d, Reason::Converging), "{d:?}");
    // A Sentinel that does not answer may only be cut off: the others keep knowing it.
    let w = World::healthy(2)
        .sentinel_on()
        .names(0, 0)
        .names(1, 0)
        .sentinel_silent(2)
        .knows(0, &[1, 2], &[1, 2])
        .knows(1, &[1, 2], &[0, 2]);
    assert_eq!(w.decide(), Decision::Steady(()));
    // Not in the safety pass.
    assert_eq!(
        learned().knows(1, &[1, 2, 7], &[0, 2]).decide_safely(),
        Decision::Steady(())
    );
}

/// Right after a Sentinel elected a new primary the others still name the old one for a moment
/// (they learn the new configuration from its hellos): a majority names the old primary, but
/// acting on it would demote the primary just elected. While any Sentinel that answers names
/// another member, nothing is done (found by the component test with a writer running: the
/// engine turned the new primary back into a replica and confirmed writes were lost).
#[test]
fn a_sentinel_naming_another_primary_stops_everything_even_against_a_majority() {
    let w = World::healthy(2)
        .up(1, primary(1, NEW, OLD, 5000, 100))
        .sentinel_on()
        .names(0, 1)
        .names(1, 0)
        .names(2, 0);
    let d = w.decide();
    assert!(waits_for(&d, Reason::SentinelsDisagree), "{d:?}");
}

/// A roll restarted r-2 (a new pod, a new address) and the Sentinels have not learned it yet
/// (they learn replicas from the primary's INFO, every 10 s). Restarting r-1 now would leave
/// Sentinel knowing no replica it can reach: were the primary then lost, it could elect no one,
/// and the engine never promotes with Sentinel on (seen: a roll with the primary restarted in
/// place, stuck for good with every member a replica). So nothing planned moves until every
/// Sentinel knows every replica in step: no restart, no switchover.
#[test]
fn planned_changes_wait_until_every_sentinel_knows_every_replica() {
    let outdated = |w: &mut World, i: u32| {
        let m = w.member(i);
        m.current_revision = Some("a".into());
        m.desired_revision = Some("b".into());
        m.allowed_revision = Some("a".into());
    };
    let unlearned = || {
        World::healthy(2)
            .sentinel_on()
            .names(0, 0)
            .names(1, 0)
            .names(2, 0)
            .knows(0, &[1], &[1, 2])
    };
    let mut rolling = unlearned();
    outdated(&mut rolling, 0);
    outdated(&mut rolling, 1);
    let d = rolling.decide();
    assert!(waits_for(&d, Reason::Converging), "{d:?}");
    assert!(d.message().contains("has not learned"), "{d:?}");

    let mut switching = unlearned();
    switching.spec.preferred = Some(name(1));
    let d = switching.decide();
    assert!(waits_for(&d, Reason::Converging), "{d:?}");

    // Once learned, the roll goes on.
    let mut learned = unlearned().knows(0, &[1, 2], &[1, 2]);
    outdated(&mut learned, 0);
    outdated(&mut learned, 1);
    let d = learned.decide();
    assert!(matches!(d, Decision::Act { .. }), "{d:?}");
}
