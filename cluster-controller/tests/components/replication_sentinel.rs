//! The replication engine with Sentinel on, against real servers and real Sentinels (9.1 and
//! 8.0) on loopback: Sentinel, not the engine, replaces a lost primary (also with one Sentinel
//! gone), the engine follows it, brings the old primary back as a replica and has the Sentinels
//! forget its old address (`SENTINEL RESET`); a member restarted
//! empty is never elected, even while the primary hangs; a planned switchover is carried out by
//! `SENTINEL FAILOVER`. Every test checks that no write a replica confirmed (WAIT 1) is lost.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::replication::engine::Decision;
use cluster_controller::replication::engine::sentinel::Watch;
use common::replication_lab::{ReplicationLab, Step};
use common::servers::{self, Binary, Options};

const FORM: Duration = Duration::from_secs(60);
/// Sentinel's own timing, short for a test: down after 2 s, a failover given 10 s.
const DOWN_AFTER_MS: u64 = 2000;

fn watch() -> Watch {
    Watch {
        master_name: "orders".into(),
        quorum: 2,
        sentinels: 3,
        down_after_ms: DOWN_AFTER_MS,
        failover_timeout_ms: 10_000,
        login: None,
    }
}

/// Formed, every Sentinel watching, and every Sentinel naming r-0 to a client.
async fn formed(
    name: &str,
    binary: Binary,
    subnet: u8,
    replicas: u32,
    options: Options,
) -> ReplicationLab {
    let mut lab =
        ReplicationLab::start_with_sentinels(name, binary, subnet, replicas, options, watch())
            .await;
    let health = lab.converge(FORM).await;
    assert_eq!(health.primary.as_deref(), Some("r-0"), "{:?}", lab.history);
    assert_eq!(health.replicas_in_step, replicas);
    let primary = lab.address(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while lab
        .sentinels_name()
        .await
        .iter()
        .any(|a| *a != Some(primary))
    {
        assert!(
            Instant::now() < deadline,
            "the Sentinels do not all name r-0: {:?}\n{}",
            lab.sentinels_name().await,
            lab.sentinel_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lab
}

/// Passes until `done`, or panics after `within` with the history and the Sentinels' logs.
async fn wait_for(
    lab: &mut ReplicationLab,
    within: Duration,
    what: &str,
    mut done: impl FnMut(&Step) -> bool,
) -> Step {
    let deadline = Instant::now() + within;
    loop {
        let step = lab.pass().await;
        if done(&step) {
            return step;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}; last: {:?}\nhistory:\n{}\nSentinels:\n{}",
            step.decision,
            lab.history.join("\n"),
            lab.sentinel_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn persistent_fenced() -> Options {
    Options {
        fenced: true,
        ..Options::default()
    }
}

async fn a_lost_primary_is_replaced_by_sentinel(binary: Binary, subnet: u8) {
    let mut lab = formed("sentinel-lost", binary, subnet, 2, persistent_fenced()).await;
    let confirmed = lab.write_confirmed(0, "k", 100).await;
    assert_eq!(confirmed.len(), 100);
    // One Sentinel lost first: the two left are still a majority and the quorum.
    lab.kill_sentinel(2);
    lab.kill(0);
    // The engine is not steady while r-0 does not answer; its status names Sentinel's primary.
    let step = wait_for(
        &mut lab,
        Duration::from_secs(60),
        "Sentinel elects a new primary and the engine follows",
        |s| {
            s.health.primary.as_deref().is_some_and(|p| p != "r-0")
                && s.health.replicas_in_step == 1
        },
    )
    .await;
    let new = step.health.primary.clone().unwrap_or_default();
    assert_eq!(
        lab.promotions,
        ["r-0"],
        "the engine promoted only at formation: Sentinel elected {new}"
    );
    let i: u32 = new.trim_start_matches("r-").parse().unwrap_or(0);
    assert_eq!(lab.missing(i, &confirmed).await, Vec::<String>::new());
    let address = lab.address(i);
    assert!(
        lab.sentinels_name()
            .await
            .iter()
            .all(|a| *a == Some(address)),
        "{:?}",
        lab.sentinels_name().await
    );

    // The old primary comes back on a new address with its data: the engine (not Sentinel,
    // which cannot log in to it before the engine admits it) makes it a replica of the new one.
    lab.start_again(0);
    wait_for(
        &mut lab,
        Duration::from_secs(60),
        "the old primary is back as a replica in step",
        |s| s.decision == Decision::Steady(()) && s.health.replicas_in_step == 2,
    )
    .await;
    assert_eq!(lab.role(0).await, "slave");
    assert_eq!(lab.promotions, ["r-0"]);
    // Steady means every Sentinel forgot r-0's old address (SENTINEL RESET) and knows the two
    // live replicas.
    let known = lab.sentinels_replicas_known().await;
    assert!(
        known.iter().all(|k| k.as_deref() == Some("2")),
        "{known:?}\n{}",
        lab.history.join("\n")
    );
    assert!(
        lab.history
            .iter()
            .any(|l| l.contains("learns the live ones again"))
    );
    assert_eq!(lab.missing(0, &confirmed).await, Vec::<String>::new());
}

/// On 9.1 only: Sentinel 8.0's election of a lost primary's replica is shown end to end (the
/// e2e test with the primary's pod deleted on 8.0, the chaos rows `.on-8.0`), and the engine's
/// part does not depend on the version.
#[tokio::test]
async fn sentinel_replaces_a_lost_primary_with_one_sentinel_gone_and_the_engine_follows() {
    a_lost_primary_is_replaced_by_sentinel(servers::valkey_9(), 240).await;
}

/// A replica restarts empty (no persistence) and the primary then hangs past Sentinel's
/// down-after: Sentinel tries to fail over but finds no replica it may elect (the restarted one
/// refuses its login until the engine admits it), so the empty replica never becomes the
/// primary its peers would then sync from. The primary resumes, the replica syncs from it, and
/// no confirmed write is lost.
#[tokio::test]
async fn a_replica_back_empty_is_never_elected_while_the_primary_hangs() {
    let options = Options {
        fenced: true,
        persistence: false,
        ..Options::default()
    };
    let mut lab = formed("sentinel-empty", servers::valkey_9(), 242, 1, options).await;
    let confirmed = lab.write_confirmed(0, "k", 100).await;
    assert_eq!(confirmed.len(), 100);
    lab.kill_and_restart(1);
    lab.pause(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // The engine keeps looking (it may not promote either), and r-1 never serves as primary.
        let step = lab.pass().await;
        assert_eq!(lab.promotions, ["r-0"], "{:?}", step.decision);
        assert_ne!(lab.role(1).await, "master", "{}", lab.sentinel_logs());
        if lab
            .sentinel_logs()
            .contains("-failover-abort-no-good-slave")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Sentinel never tried to fail over:\n{}",
            lab.sentinel_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lab.resume(0);
    wait_for(
        &mut lab,
        Duration::from_secs(60),
        "r-1 is back in step with r-0",
        |s| {
            s.decision == Decision::Steady(())
                && s.health.primary.as_deref() == Some("r-0")
                && s.health.replicas_in_step == 1
        },
    )
    .await;
    assert_eq!(lab.missing(0, &confirmed).await, Vec::<String>::new());
    assert_eq!(lab.missing(1, &confirmed).await, Vec::<String>::new());
}

/// Writes `<prefix>:<n>` to `at` with `WAIT 1` until it refuses (a replica now) or `stop`;
/// returns the keys a replica confirmed.
fn confirmed_writer(
    at: std::net::SocketAddr,
    prefix: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
    tokio::spawn(async move {
        let client = RedisClient::new(RedisClientConfig {
            credentials: Credentials::user("default", servers::DEFAULT_PASSWORD),
            trust: None,
            connect_timeout: Duration::from_millis(500),
        });
        let mut confirmed = Vec::new();
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let key = format!("{prefix}:{n}");
            n += 1;
            let mut set = redis::cmd("SET");
            set.arg(&key).arg("v");
            if client
                .command(at, &set, Duration::from_secs(5))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let mut wait = redis::cmd("WAIT");
            wait.arg(1).arg(1000);
            if let Ok(redis::Value::Int(acks)) =
                client.command(at, &wait, Duration::from_secs(5)).await
                && acks >= 1
            {
                confirmed.push(key);
            }
        }
        confirmed
    })
}

/// `spec.primary` naming a replica, with two replicas and a client writing to the primary
/// throughout: the engine hands the switchover to Sentinel (`SENTINEL FAILOVER`), Sentinel elects
/// the named replica (the others' `replica-priority` is 0 meanwhile), the engine never promotes,
/// and no write a replica confirmed is lost. The primary's writes are paused until its replicas
/// have them all: unpaused, the replica Sentinel has not moved yet confirmed writes to the old
/// primary that the new one never got (found by the e2e test: half of them lost).
async fn a_planned_switchover_is_sentinels(binary: Binary, subnet: u8) {
    let mut lab = formed("sentinel-switch", binary, subnet, 2, persistent_fenced()).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = confirmed_writer(lab.address(0), "k", stop.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.missing(0, &["k:50".to_owned()]).await.len() == 1 {
        assert!(Instant::now() < deadline, "the writer does not write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lab.spec.preferred = Some("r-1".into());
    wait_for(
        &mut lab,
        Duration::from_secs(60),
        "r-1 is the primary Sentinel names",
        |s| {
            s.decision == Decision::Steady(())
                && s.health.primary.as_deref() == Some("r-1")
                && s.health.replicas_in_step == 2
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let confirmed = writer.await.unwrap_or_default();
    assert!(confirmed.len() > 50, "{}", confirmed.len());
    let switchovers = lab
        .history
        .iter()
        .filter(|l| l.contains("SENTINEL FAILOVER"))
        .count();
    assert_eq!(switchovers, 1, "one SENTINEL FAILOVER: {:?}", lab.history);
    assert_eq!(lab.promotions, ["r-0"]);
    assert_eq!(lab.role(1).await, "master");
    assert_eq!(lab.missing(1, &confirmed).await, Vec::<String>::new());
    let address = lab.address(1);
    assert!(
        lab.sentinels_name()
            .await
            .iter()
            .all(|a| *a == Some(address))
    );
    // Every replica may be elected again.
    for i in [0, 2] {
        let priority = lab.command(i, &["CONFIG", "GET", "replica-priority"]).await;
        assert!(
            format!("{priority:?}").contains("100"),
            "r-{i}: {priority:?}"
        );
    }
}

#[tokio::test]
async fn a_planned_switchover_is_carried_out_by_sentinel_on_9() {
    a_planned_switchover_is_sentinels(servers::valkey_9(), 243).await;
}

#[tokio::test]
async fn a_planned_switchover_is_carried_out_by_sentinel_on_8() {
    a_planned_switchover_is_sentinels(servers::valkey_8(), 244).await;
}

/// A changed clients' password reaches a running Sentinel (which read its ACL file when it
/// started) through the operator's `ACL SETUSER`: the new password logs in, the old one no more.
#[tokio::test]
async fn a_changed_clients_password_reaches_a_running_sentinel() {
    use cluster_controller::access::sentinels::SentinelUsers;
    use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
    use common::sentinels::{self, Sentinel};

    let dir = std::env::temp_dir()
        .join("valkey-engine-tests")
        .join(format!("sentinel-password-{}", std::process::id()));
    let ip = std::net::Ipv4Addr::new(127, 245, 2, 1);
    let sentinel = Sentinel::start(&servers::valkey_9(), &dir, ip);
    let client = |user: &str, password: &str| {
        RedisClient::new(RedisClientConfig {
            credentials: Credentials::user(user, password),
            trust: None,
            connect_timeout: Duration::from_millis(500),
        })
    };
    let at = sentinel.address();
    let asks = |c: RedisClient| async move {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTERS");
        c.command(at, &cmd, Duration::from_secs(1)).await.is_ok()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !asks(client("default", servers::DEFAULT_PASSWORD)).await {
        assert!(Instant::now() < deadline, "{}", sentinel.log_tail(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let operator = client(servers::OPERATOR_USER, servers::OPERATOR_PASSWORD);
    let state = SentinelUsers::default();
    let users = sentinels::users_with_clients_password("rotated-secret");
    let failed = state
        .sync(
            &operator,
            &[sentinel.address()],
            &users,
            Duration::from_secs(2),
        )
        .await;
    assert!(failed.is_empty(), "{failed:?}");
    assert!(asks(client("default", "rotated-secret")).await);
    assert!(!asks(client("default", servers::DEFAULT_PASSWORD)).await);
    // The operator kept its rights: a second change goes through too.
    let again = sentinels::users_with_clients_password("rotated-again");
    assert!(
        state
            .sync(
                &operator,
                &[sentinel.address()],
                &again,
                Duration::from_secs(2)
            )
            .await
            .is_empty()
    );
    assert!(asks(client("default", "rotated-again")).await);
}
