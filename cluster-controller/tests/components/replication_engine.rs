//! The replication engine against real valkey-server processes (9.1 and 8.0) on loopback: a
//! primary and its replicas formed, a primary that restarts with and without its data, a
//! primary lost for good, one the operator cannot reach while its replicas can, a planned
//! switchover and a roll. Every test checks that no write a replica confirmed (WAIT 1) is lost.

use crate::common;

use std::time::Duration;

use cluster_controller::replication::engine::{Action, Decision, Reason};
use common::replication_lab::ReplicationLab;
use common::servers::{self, Binary, Options};

const FORM: Duration = Duration::from_secs(60);

fn fenced() -> Options {
    Options {
        fenced: true,
        ..Options::default()
    }
}

async fn formed(
    name: &str,
    binary: Binary,
    subnet: u8,
    replicas: u32,
    options: Options,
) -> ReplicationLab {
    let mut lab = ReplicationLab::start(name, binary, subnet, replicas, options).await;
    let health = lab.converge(FORM).await;
    assert_eq!(health.primary.as_deref(), Some("r-0"), "{:?}", lab.history);
    assert_eq!(health.replicas_in_step, replicas);
    lab
}

async fn forms_and_serves(binary: Binary, subnet: u8) {
    let lab = formed("forms", binary, subnet, 2, fenced()).await;
    assert_eq!(lab.role(0).await, "master");
    assert_eq!(lab.role(1).await, "slave");
    let confirmed = lab.write_confirmed(0, "k", 50).await;
    assert_eq!(confirmed.len(), 50, "every write is confirmed by a replica");
    // WAIT 1 vouches for one replica; the other gets every write too, a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let missing = lab.missing(2, &confirmed).await;
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "r-2 still lacks {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Replicas refuse writes.
    assert!(lab.command(1, &["SET", "x", "y"]).await.is_err());
}

#[tokio::test]
async fn a_replication_forms_and_serves_on_valkey_9() {
    forms_and_serves(servers::valkey_9(), 200).await;
}

#[tokio::test]
async fn a_replication_forms_and_serves_on_valkey_8() {
    forms_and_serves(servers::valkey_8(), 201).await;
}

/// The primary's process is killed and restarted in place with its append-only file. The file
/// can miss writes the primary acknowledged and its replicas hold (Valkey puts off writing it
/// while an fsync lags, and replies meanwhile): a replica that followed it until it went away
/// takes over, the restarted member (parked, it took no write) rejoins as its replica, and no
/// confirmed write is lost anywhere. (Kept as the primary, its replicas resynced from the file
/// and a WAIT-confirmed write was lost on a loaded machine.)
#[tokio::test]
async fn a_primary_restarted_from_its_file_hands_over_to_a_replica_that_followed_it() {
    let mut lab = formed("restart-data", servers::valkey_9(), 202, 2, fenced()).await;
    let confirmed = lab.write_confirmed(0, "k", 200).await;
    lab.wait_aof_synced(0, Duration::from_secs(10)).await;
    lab.kill_and_restart(0);
    let step = lab
        .run_until(FORM, |s| {
            s.decision == Decision::Steady(())
                && s.health.primary.is_some()
                && s.health.primary.as_deref() != Some("r-0")
                && s.health.replicas_in_step == 2
        })
        .await;
    assert!(
        lab.forced.iter().any(|f| f.starts_with("PrimaryEmptied")),
        "{:?}",
        lab.history
    );
    assert_ne!(step.health.primary.as_deref(), Some("r-0"));
    for i in 0..=2 {
        assert!(
            lab.missing(i, &confirmed).await.is_empty(),
            "r-{i} lost writes"
        );
    }
}

/// Without persistence the restarted primary is empty at the same address. It must never feed
/// its replicas (they would drop their copy): the replica with its writes takes over, and the
/// empty server rejoins as its replica. Fenced and unfenced alike (the parked start is the fence).
async fn empty_restart(options: Options, binary: Binary, subnet: u8) {
    let options = Options {
        persistence: false,
        ..options
    };
    let mut lab = formed("restart-empty", binary, subnet, 2, options).await;
    let confirmed = lab.write_confirmed(0, "k", 300).await;
    assert_eq!(confirmed.len(), 300);
    lab.kill_and_restart(0);
    let step = lab
        .run_until(FORM, |s| {
            s.decision == Decision::Steady(()) && s.health.primary.as_deref() != Some("r-0")
        })
        .await;
    let primary = step.health.primary.unwrap_or_default();
    assert!(
        lab.forced.iter().any(|f| f.starts_with("PrimaryEmptied")),
        "{:?}",
        lab.history
    );
    let new = if primary == "r-1" { 1 } else { 2 };
    assert!(
        lab.missing(new, &confirmed).await.is_empty(),
        "the new primary lost writes"
    );
    assert!(
        lab.missing(0, &confirmed).await.is_empty(),
        "the old primary did not resync"
    );
    assert_eq!(lab.role(0).await, "slave");
}

#[tokio::test]
async fn a_primary_restarted_empty_hands_over_fenced_on_valkey_9() {
    empty_restart(fenced(), servers::valkey_9(), 203).await;
}

#[tokio::test]
async fn a_primary_restarted_empty_hands_over_without_auth_fence_on_valkey_8() {
    empty_restart(Options::default(), servers::valkey_8(), 204).await;
}

/// A replica made primary by a switchover, then killed and restarted in place without
/// persistence, with the RDB file its first full sync left in its folder. It is no sync source
/// for the members that copied more: the member with its writes takes over, as after an empty
/// restart. (A member restarts parked, as a replica of nothing, so this mode already judged it
/// right before `restart_would_lose`; the test keeps it so.)
#[tokio::test]
async fn a_promoted_replica_restarted_from_an_old_snapshot_hands_over() {
    let options = Options {
        persistence: false,
        ..fenced()
    };
    let mut lab = formed("snapshot", servers::valkey_9(), 210, 2, options).await;
    lab.write_confirmed(0, "before", 100).await;
    lab.spec.preferred = Some("r-1".into());
    lab.run_until(FORM, |s| {
        s.decision == Decision::Steady(()) && s.health.primary.as_deref() == Some("r-1")
    })
    .await;
    let confirmed = lab.write_confirmed(1, "k", 300).await;
    assert_eq!(confirmed.len(), 300);
    let snapshot = lab.folder(1).join("dump.rdb");
    assert!(
        snapshot.exists(),
        "{} is what it reloads",
        snapshot.display()
    );
    // No preference any more: it would only send the primary back to r-1 once it is whole.
    lab.spec.preferred = None;
    lab.kill_and_restart(1);
    let step = lab
        .run_until(FORM, |s| {
            s.decision == Decision::Steady(()) && s.health.primary.as_deref() != Some("r-1")
        })
        .await;
    assert!(
        lab.forced.iter().any(|f| f.starts_with("PrimaryEmptied")),
        "{:?}",
        lab.history
    );
    let new = if step.health.primary.as_deref() == Some("r-0") {
        0
    } else {
        2
    };
    assert!(
        lab.missing(new, &confirmed).await.is_empty(),
        "the new primary lost writes"
    );
    assert!(
        lab.missing(1, &confirmed).await.is_empty(),
        "the restarted member did not resync"
    );
}

/// The primary dies and stays down: after `failover_after` of silence for everyone the replica
/// with the most of its writes is promoted; the old one, back on a new address, replicates it.
#[tokio::test]
async fn a_lost_primary_is_replaced_and_rejoins_as_a_replica() {
    let mut lab = formed("lost", servers::valkey_9(), 205, 2, fenced()).await;
    let confirmed = lab.write_confirmed(0, "k", 200).await;
    let started = std::time::Instant::now();
    lab.kill(0);
    lab.run_until(FORM, |s| {
        matches!(s.decision.action(), Some(Action::Promote { .. }))
    })
    .await;
    assert!(
        started.elapsed() >= lab.spec.failover_after,
        "promoted after {:?}, before the primary was silent for {:?}",
        started.elapsed(),
        lab.spec.failover_after
    );
    assert!(
        lab.forced
            .last()
            .is_some_and(|f| f.starts_with(Reason::FailingOver.as_str())),
        "{:?}",
        lab.history
    );
    lab.start_again(0);
    let health = lab.converge(FORM).await;
    let new = if health.primary.as_deref() == Some("r-1") {
        1
    } else {
        2
    };
    assert!(lab.missing(new, &confirmed).await.is_empty());
    assert!(lab.missing(0, &confirmed).await.is_empty());
    assert_eq!(lab.role(0).await, "slave");
    assert_eq!(health.replicas_in_step, 2);
}

/// The operator (and the node-controller) lose the primary while its replicas still reach it:
/// it is alive, so no replica is promoted, however long it lasts.
#[tokio::test]
async fn a_primary_the_replicas_still_see_is_never_replaced() {
    let mut lab = formed("unseen", servers::valkey_9(), 206, 2, fenced()).await;
    lab.hide_from_operator(0);
    let deadline = std::time::Instant::now() + lab.spec.failover_after * 3;
    while std::time::Instant::now() < deadline {
        let step = lab.pass().await;
        assert!(
            !matches!(step.decision.action(), Some(Action::Promote { .. })),
            "{:?}",
            step.decision
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        lab.history
            .iter()
            .any(|h| h.contains("over its replication link: it is alive")),
        "{:?}",
        lab.history
    );
    lab.show_to_operator(0);
    let health = lab.converge(FORM).await;
    assert_eq!(health.primary.as_deref(), Some("r-0"));
}

/// spec.primary names a replica: a planned switchover (FAILOVER) makes it the primary while a
/// writer writes to the old one; every write a replica confirmed is on the new primary.
async fn switchover(binary: Binary, subnet: u8) {
    let mut lab = formed("switchover", binary, subnet, 2, fenced()).await;
    let before = lab.write_confirmed(0, "before", 100).await;
    lab.spec.preferred = Some("r-2".into());
    let old = lab.address(0);
    let probe = lab.probe.clone();
    let writer = tokio::spawn(async move {
        use cluster_controller::client::ValkeyClient;
        let mut confirmed = Vec::new();
        for n in 0..2000 {
            let key = format!("during:{n}");
            let set = redis::cmd("SET").arg(&key).arg("v").clone();
            if probe
                .command(old, &set, Duration::from_secs(2))
                .await
                .is_err()
            {
                continue;
            }
            let wait = redis::cmd("WAIT").arg(1).arg(1000).clone();
            if let Ok(redis::Value::Int(acks)) =
                probe.command(old, &wait, Duration::from_secs(3)).await
                && acks >= 1
            {
                confirmed.push(key);
            }
        }
        confirmed
    });
    let health = lab
        .run_until(FORM, |s| {
            s.decision == Decision::Steady(()) && s.health.primary.as_deref() == Some("r-2")
        })
        .await
        .health;
    assert_eq!(health.replicas_in_step, 2);
    let during = writer.await.unwrap_or_default();
    assert!(lab.forced.is_empty(), "a switchover is no forced step");
    assert!(lab.missing(2, &before).await.is_empty());
    let lost = lab.missing(2, &during).await;
    assert!(
        lost.is_empty(),
        "{} of {} confirmed writes lost",
        lost.len(),
        during.len()
    );
    assert_eq!(lab.role(0).await, "slave");
}

#[tokio::test]
async fn a_planned_switchover_loses_no_confirmed_write_on_valkey_9() {
    switchover(servers::valkey_9(), 207).await;
}

#[tokio::test]
async fn a_planned_switchover_loses_no_confirmed_write_on_valkey_8() {
    switchover(servers::valkey_8(), 208).await;
}

/// A new revision: replicas restart one at a time, then the primary hands over and restarts
/// last; never two members down at once.
#[tokio::test]
async fn a_roll_restarts_the_primary_last_after_a_switchover() {
    let mut lab = formed("roll", servers::valkey_9(), 209, 2, fenced()).await;
    let confirmed = lab.write_confirmed(0, "k", 100).await;
    for m in &mut lab.members {
        m.current_revision = Some("a".into());
        m.allowed_revision = Some("a".into());
        m.desired_revision = Some("b".into());
    }
    let mut restarts = Vec::new();
    lab.run_until(FORM, |s| {
        if let Some(Action::AllowRestart { member }) = s.decision.action() {
            restarts.push(member.clone());
        }
        s.decision == Decision::Steady(())
    })
    .await;
    let primary_restart = restarts.iter().position(|m| m == "r-0");
    assert_eq!(
        primary_restart,
        Some(2),
        "the primary restarts last: {restarts:?}"
    );
    assert!(
        lab.history
            .iter()
            .any(|h| h.starts_with("Rolling") && h.contains("planned switchover"))
    );
    for i in 0..=2 {
        assert!(lab.missing(i, &confirmed).await.is_empty(), "r-{i}");
    }
}

/// Makes member `i` hold `count` keys `<prefix>:<n>` in its `dump.rdb` and restarts it parked
/// on them, as a pod whose volume holds that snapshot (restored, or kept from before).
async fn parked_with(lab: &mut ReplicationLab, i: u32, prefix: &str, count: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + FORM;
    while let Err(e) = lab.command(i, &["REPLICAOF", "NO", "ONE"]).await {
        assert!(std::time::Instant::now() < deadline, "r-{i}: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut keys = Vec::new();
    for n in 0..count {
        let key = format!("{prefix}:{n}");
        lab.command(
            i,
            &["SET", &key, &format!("{n}-{}", "v".repeat(n % 32 * 32))],
        )
        .await
        .unwrap_or_else(|e| panic!("r-{i}: {e}"));
        keys.push(key);
    }
    lab.command(i, &["SAVE"])
        .await
        .unwrap_or_else(|e| panic!("r-{i}: {e}"));
    lab.kill_and_restart(i);
    while lab.command(i, &["DBSIZE"]).await != Ok(redis::Value::Int(count as i64)) {
        assert!(std::time::Instant::now() < deadline, "r-{i} did not reload");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    keys
}

/// A restore with real servers: `r-0` starts on the backup's snapshot (300 keys) and `r-1` on a
/// kept volume with more keys (900 others). Told that `r-0` is the restored member, the engine
/// makes it the primary (by key count it would take `r-1`), and `r-1` syncs from it: both end
/// with exactly the restored keys.
#[tokio::test]
async fn a_restored_member_becomes_the_primary_and_its_replica_syncs_the_backup() {
    let options = Options {
        persistence: false,
        fenced: false,
        ..Options::default()
    };
    let mut lab = ReplicationLab::start("restored", servers::valkey_9(), 231, 1, options).await;
    let restored = parked_with(&mut lab, 0, "restored", 300).await;
    parked_with(&mut lab, 1, "stale", 900).await;
    lab.spec.restored = Some("r-0".into());
    let health = lab.converge(FORM).await;
    assert_eq!(health.primary.as_deref(), Some("r-0"), "{:?}", lab.history);
    assert_eq!(health.replicas_in_step, 1, "{:?}", lab.history);
    assert!(
        lab.history
            .iter()
            .find(|h| h.contains("becomes the primary"))
            .is_some_and(|h| h.contains("r-0") && h.contains("restored backup")),
        "{:?}",
        lab.history
    );
    for i in 0..=1 {
        assert_eq!(
            lab.command(i, &["DBSIZE"]).await,
            Ok(redis::Value::Int(300)),
            "r-{i}"
        );
        assert!(lab.missing(i, &restored).await.is_empty(), "r-{i}");
    }
}
