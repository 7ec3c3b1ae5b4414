//! Scaling shards out and in with keys written before and a writer writing throughout: every
//! acknowledged write reads back. Valkey 9.1 moves slots with atomic slot migration, 8.0 with
//! the legacy SETSLOT/MIGRATE machine.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::Desired;

use common::lab::Lab;
use common::servers;
use common::traffic::{self, Writer};

const KEYS: usize = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_9_scales_three_to_five_to_two() {
    let mut lab = Lab::new("scale9", servers::valkey_9(), 102);
    lab.scale(Desired::new(3, 1));
    lab.converge(Duration::from_secs(60)).await;
    let mut keys = traffic::write_keys(&lab.addresses(), "before", KEYS).await;
    let writer = Writer::start(&lab.addresses(), "during").await;

    let started = Instant::now();
    lab.scale(Desired::new(5, 1));
    let health = lab.converge(Duration::from_secs(180)).await;
    let out = started.elapsed();
    assert_eq!(health.ready_shards, 5);
    // Seen, not asserted: with a few thousand keys a job may end before the next look sees it
    // beside another (engine_decide tests the rule itself).
    let side_by_side = lab.most_sources_exporting;
    lab.assert_topology().await;
    lab.assert_no_open_slots().await;

    let started = Instant::now();
    lab.scale(Desired::new(2, 1));
    let health = lab.converge(Duration::from_secs(180)).await;
    let back = started.elapsed();
    assert_eq!(health.ready_shards, 2);
    assert_eq!(lab.members.len(), 4, "the leaving members are deleted");
    lab.assert_topology().await;
    lab.assert_no_open_slots().await;
    for member in lab.members.clone() {
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_known_nodes")
                .await,
            "4",
            "{} still knows a removed node",
            member.name
        );
    }

    let report = writer.finish().await;
    eprintln!(
        "[scale9] 3->5 took {out:?} (at most {side_by_side} sources exporting at once), 5->2 \
         took {back:?}; {} writes acknowledged during, {} failed attempts retried",
        report.acked.len(),
        report.failed_attempts
    );
    assert!(!report.acked.is_empty());
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_8_scales_three_to_four() {
    let mut lab = Lab::new("scale8", servers::valkey_8(), 103);
    lab.scale(Desired::new(3, 1));
    lab.converge(Duration::from_secs(60)).await;
    let mut keys = traffic::write_keys(&lab.addresses(), "before", KEYS).await;
    let writer = Writer::start(&lab.addresses(), "during").await;

    let started = Instant::now();
    lab.scale(Desired::new(4, 1));
    let health = lab.converge(Duration::from_secs(300)).await;
    let out = started.elapsed();
    assert_eq!(health.ready_shards, 4);
    lab.assert_topology().await;
    lab.assert_no_open_slots().await;

    let report = writer.finish().await;
    eprintln!(
        "[scale8] 3->4 (4096 slots, legacy) took {out:?} in {} passes; {} writes acknowledged \
         during, {} failed attempts retried",
        lab.passes,
        report.acked.len(),
        report.failed_attempts
    );
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}
