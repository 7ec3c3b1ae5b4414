//! Forming a cluster from fresh servers: MEET, slots split evenly, replicas attached.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::Desired;

use common::lab::Lab;
use common::servers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_three_shards_with_a_replica_each() {
    let mut lab = Lab::new("form", servers::valkey_9(), 101);
    lab.scale(Desired::new(3, 1));
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(60)).await;
    eprintln!(
        "[form] steady after {:?} and {} passes: {health:?}",
        started.elapsed(),
        lab.passes
    );
    assert_eq!(health.ready_shards, 3);
    assert_eq!(health.replicas_in_sync, 3);
    for member in lab.members.clone() {
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_state").await,
            "ok"
        );
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_slots_assigned")
                .await,
            "16384"
        );
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_known_nodes")
                .await,
            "6"
        );
    }
    lab.assert_topology().await;
    // The index-0 member of each shard took its shard's slots.
    for shard in 0..3 {
        let nodes = lab.cluster_nodes(&format!("c-{shard}-0")).await;
        let me = nodes.myself().expect("myself");
        assert!(me.is_primary(), "c-{shard}-0 should be the primary");
        assert_eq!(me.slots.count(), if shard == 0 { 5462 } else { 5461 });
    }
    // A steady cluster costs nothing: the next pass decides nothing to do.
    let pass = lab.pass().await;
    assert!(pass.outcome.is_none(), "{}", pass.decision);
}
