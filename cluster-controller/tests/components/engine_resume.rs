//! An engine dropped in the middle of a migration (between any two commands, or in the middle
//! of one) and a node restarted under it: a fresh engine finishes from what Valkey reports,
//! with no key lost and no slot left open.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig};
use cluster_controller::engine::{
    Action, Decision, Desired, Engine, EngineConfig, ExecuteConfig, execute, migrate_auth,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::lab::{Address, Lab};
use common::servers::{self, OPERATOR_PASSWORD, OPERATOR_USER};
use common::traffic;

fn fresh_engine() -> Engine<RedisClient> {
    engine_with_budget(ExecuteConfig::default().pass_budget)
}

/// An engine whose legacy moves stop starting slots after `budget`.
fn engine_with_budget(budget: Duration) -> Engine<RedisClient> {
    let credentials = Credentials::user(OPERATOR_USER, OPERATOR_PASSWORD);
    let mut config = EngineConfig::for_credentials(&credentials);
    config.execute.pass_budget = budget;
    Engine::new(
        RedisClient::new(RedisClientConfig {
            credentials,
            trust: None,
            connect_timeout: Duration::from_millis(500),
        }),
        config,
    )
}

async fn open_slots(lab: &Lab) -> usize {
    let mut open = 0;
    for member in lab.members.clone() {
        let nodes = lab.cluster_nodes(&member.name).await;
        let me = nodes.myself().expect("myself");
        open += me.migrating.len() + me.importing.len();
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_migration_resumes_after_the_engine_dies_anywhere() {
    let mut lab = Lab::new("resume8", servers::valkey_8(), 109);
    lab.scale(Desired::new(3, 0));
    lab.converge(Duration::from_secs(60)).await;
    let keys = traffic::write_keys(&lab.addresses(), "k", 3000).await;
    // The first step only starts the move (every pair moves side by side, and 3,000 keys would
    // all move within one ordinary pass): the engines below are killed in the middle of it.
    lab.engine = engine_with_budget(Duration::from_millis(20));
    lab.scale(Desired::new(4, 0));
    lab.run_until(Duration::from_secs(60), |pass| {
        matches!(
            &pass.decision,
            Decision::Act {
                action: Action::MigrateSlots(_),
                ..
            }
        )
    })
    .await;

    // Engines that die after a random few milliseconds, mid-command or between commands.
    let mut rng = StdRng::seed_from_u64(0x5107);
    let config = ExecuteConfig {
        migrate_auth: migrate_auth(&Credentials::user(OPERATOR_USER, OPERATOR_PASSWORD)),
        ..ExecuteConfig::default()
    };
    let mut interrupted = 0;
    for _ in 0..40 {
        lab.refresh().await;
        let engine = fresh_engine();
        let observed = cluster_controller::engine::observe(
            engine.client(),
            &lab.members,
            Duration::from_secs(2),
        )
        .await;
        let decision = cluster_controller::engine::decide(&lab.desired, &lab.members, &observed);
        let Decision::Act {
            action: action @ Action::MigrateSlots(_),
            ..
        } = decision
        else {
            break;
        };
        let cut = Duration::from_micros(rng.random_range(500..20_000));
        if tokio::time::timeout(cut, execute(engine.client(), &action, &config))
            .await
            .is_err()
        {
            interrupted += 1;
        }
    }
    let open = open_slots(&lab).await;
    eprintln!(
        "[resume8] {interrupted} engines killed mid-migration; {open} slot markers left open"
    );
    assert!(interrupted > 0);

    // And the target restarts while markers may be open (they live in its nodes.conf).
    lab.stop("c-3-0");
    lab.start("c-3-0", Address::Same);

    lab.engine = fresh_engine();
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(240)).await;
    eprintln!("[resume8] finished after {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 4);
    if open > 0 {
        assert!(
            lab.history
                .iter()
                .any(|l| l.contains("MigratingSlots") && l.contains("(Complete)")),
            "the open slots were finished"
        );
    }
    lab.assert_no_open_slots().await;
    lab.assert_topology().await;
    for member in lab.members.clone() {
        let slots = lab
            .cluster_nodes(&member.name)
            .await
            .myself()
            .expect("myself")
            .slots
            .count();
        assert!(
            (4096..=4096).contains(&slots),
            "{} serves {slots} slots",
            member.name
        );
    }
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_migration_survives_a_new_engine_and_a_killed_target() {
    let mut lab = Lab::new("resume9", servers::valkey_9(), 110);
    lab.scale(Desired::new(3, 0));
    lab.converge(Duration::from_secs(60)).await;
    let keys = traffic::write_keys(&lab.addresses(), "k", 3000).await;
    // The first step only starts the move (every pair moves side by side, and 3,000 keys would
    // all move within one ordinary pass): the engines below are killed in the middle of it.
    lab.engine = engine_with_budget(Duration::from_millis(20));
    lab.scale(Desired::new(4, 0));
    lab.run_until(Duration::from_secs(60), |pass| {
        matches!(
            &pass.decision,
            Decision::Act {
                action: Action::StartAtomicMigration { .. },
                ..
            }
        )
    })
    .await;
    // The engine that started the job is gone; the target dies while the job runs and
    // comes back from its own folder.
    lab.engine = fresh_engine();
    lab.kill("c-3-0");
    lab.start("c-3-0", Address::Same);
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(180)).await;
    eprintln!("[resume9] finished after {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 4);
    lab.assert_no_open_slots().await;
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}
