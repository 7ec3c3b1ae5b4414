//! What the backup controller reads from a real cluster's servers (INFO, CLUSTER NODES, slot
//! migration jobs) and the member it chooses per shard from that: a formed 3x1 cluster on
//! Valkey 9 is planned from its replicas, each following its shard's primary, with the slots
//! of the whole cluster; each replica, a cluster node, hands its snapshot to the backup user at
//! an offset holding its primary's writes of the plan (into a real object store); a slot left
//! migrating holds the backup back.

use crate::common;

use std::time::Duration;

use cluster_controller::backup::choose::{self, Plan};
use cluster_controller::backup::observe;
use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig};
use cluster_controller::engine::Desired;

use common::lab::Lab;
use common::servers::{self, OPERATOR_PASSWORD, OPERATOR_USER};

// The backup crate's test object store, as its own tests start it.
#[path = "../../../backup/tests/common/objectstore.rs"]
mod objectstore;

/// What `objectstore` waits with (it names it `super::wait_for`).
fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_formed_cluster_is_planned_from_its_in_step_replicas() {
    let mut lab = Lab::new("backup-plan", servers::valkey_9(), 131);
    lab.scale(Desired::new(3, 1));
    let health = lab.converge(Duration::from_secs(60)).await;
    assert_eq!(health.ready_shards, 3);
    lab.wait_replicas_caught_up(Duration::from_secs(30)).await;
    let client = RedisClient::new(RedisClientConfig {
        credentials: Credentials::user(OPERATOR_USER, OPERATOR_PASSWORD),
        ..RedisClientConfig::default()
    });
    let mut members = lab.members.clone();
    for m in &mut members {
        m.ready = true;
    }

    let (found, unanswered) = observe::servers(&client, &members, true).await;
    assert!(unanswered.is_empty(), "{unanswered:?}");
    assert_eq!(found.len(), 6);
    assert!(found.iter().all(|s| s.node_id.is_some() && !s.slots_moving));
    let Plan::Start(plans) = choose::plan(&found, &unanswered, 3, false) else {
        panic!("{:?}", choose::plan(&found, &unanswered, 3, false));
    };
    let mut covered = 0;
    for plan in &plans {
        let chosen = found
            .iter()
            .find(|s| s.member == plan.member)
            .expect("chosen");
        let primary = found
            .iter()
            .find(|s| s.member == plan.primary_member)
            .expect("primary");
        assert!(
            !plan.from_primary && !chosen.primary && primary.primary,
            "{plan:?}"
        );
        assert_eq!(chosen.shard, plan.shard);
        assert_eq!(
            chosen.primary_host.as_deref(),
            Some(primary.address.ip().to_string().as_str())
        );
        covered += plan.slots.count();
    }
    assert_eq!(covered, 16384);

    // Each chosen replica hands its snapshot to the backup user (as the operator's ACL has it).
    if let Some(binary) = objectstore::binary() {
        let dir = std::env::temp_dir().join(format!("backup-plan-{}", std::process::id()));
        let store_proc = objectstore::ObjectStore::start(
            binary,
            std::net::Ipv4Addr::new(127, 0, 131, 200),
            &dir,
        );
        let store = backup::Store::new(&store_proc.config()).expect("store");
        let rules = format!("backup on >bk-secret {}", backup::capture::BACKUP_RULES);
        for plan in &plans {
            let mut setuser = vec!["ACL", "SETUSER"];
            setuser.extend(rules.split_whitespace());
            lab.command_as_operator(&plan.member, &setuser).await;
            let captured = backup::capture(
                &backup::Source {
                    address: plan.address.to_string(),
                    user: "backup".into(),
                    password: "bk-secret".into(),
                },
                &store,
                &format!("plan/{}", choose::shard_object(plan.shard)),
                &backup::CaptureOptions::default(),
                &|_| {},
            )
            .await
            .unwrap_or_else(|e| panic!("capture of {}: {e}", plan.member));
            assert!(
                captured.bytes > 0 && captured.sha256.len() == 64,
                "{captured:?}"
            );
            assert!(
                i64::try_from(captured.offset).unwrap_or(0) >= plan.primary_offset,
                "{captured:?} {plan:?}"
            );
        }
        drop(store_proc);
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "SKIPPED the captures: the object store is not built (tests/objectstore/build.sh)"
        );
    }

    // A slot left migrating (as a legacy move half-way would) holds the backup back.
    let source = plans[0].primary_member.clone();
    let target_id = plans[1].primary_node_id.clone().expect("node id");
    let slot = plans[0].slots.iter().next().expect("a slot").to_string();
    lab.command_as_operator(
        &source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    )
    .await;
    let (found, unanswered) = observe::servers(&client, &members, true).await;
    match choose::plan(&found, &unanswered, 3, false) {
        Plan::Wait(problem) => assert_eq!(
            problem.reason,
            valkey_api::v1alpha1::StatusReason::SlotsMoving
        ),
        other => panic!("{other:?}"),
    }
    lab.command_as_operator(&source, &["CLUSTER", "SETSLOT", &slot, "STABLE"])
        .await;
}
