//! Replicas per shard up and down: new members replicate their shard's primary; surplus ones
//! are forgotten and deleted, a surplus primary handing its slots over first.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::Desired;

use common::lab::Lab;
use common::servers;
use common::traffic::{self, Writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_one_to_two_to_zero() {
    let mut lab = Lab::new("replicas", servers::valkey_9(), 108);
    lab.scale(Desired::new(3, 1));
    lab.converge(Duration::from_secs(60)).await;
    let mut keys = traffic::write_keys(&lab.addresses(), "k", 1000).await;
    let writer = Writer::start(&lab.addresses(), "w").await;

    let started = Instant::now();
    lab.scale(Desired::new(3, 2));
    let health = lab.converge(Duration::from_secs(60)).await;
    eprintln!("[replicas] 1->2 took {:?}", started.elapsed());
    assert_eq!(health.replicas_in_sync, 6);
    assert_eq!(health.ready_shards, 3);
    lab.assert_topology().await;

    // Make a member that is about to become surplus the primary of shard 0.
    let reply = lab.command("c-0-1", &["CLUSTER", "FAILOVER"]).await;
    assert_eq!(
        cluster_controller::valkey::value::text(&reply).as_deref(),
        Some("OK")
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lab
        .cluster_nodes("c-0-1")
        .await
        .myself()
        .expect("myself")
        .is_primary()
    {
        assert!(Instant::now() < deadline, "manual failover did not happen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let started = Instant::now();
    lab.scale(Desired::new(3, 0));
    let health = lab.converge(Duration::from_secs(60)).await;
    eprintln!("[replicas] 2->0 took {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 3);
    assert_eq!(lab.members.len(), 3, "surplus members are deleted");
    assert!(
        lab.history
            .iter()
            .any(|l| l.contains("CLUSTER FAILOVER on c-0-0")),
        "the surplus primary handed over to c-0-0 first: {:?}",
        lab.history
    );
    for member in lab.members.clone() {
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_known_nodes")
                .await,
            "3"
        );
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_state").await,
            "ok"
        );
    }
    lab.assert_topology().await;

    let report = writer.finish().await;
    eprintln!(
        "[replicas] {} writes acknowledged during, {} failed attempts retried",
        report.acked.len(),
        report.failed_attempts
    );
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}
