//! A rolling restart: the lab restarts a member's process when `AllowRestart` names it (as the
//! node-controller would roll its pod). One member at a time, replicas first, primaries after
//! a planned failover: no acknowledged write is lost and no shard ever has two members down.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::Desired;

use common::lab::Lab;
use common::servers;
use common::traffic::{self, Writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_loses_no_write() {
    let mut lab = Lab::new("rolling", servers::valkey_9(), 111);
    lab.scale(Desired::new(3, 1));
    lab.converge(Duration::from_secs(60)).await;
    let mut keys = traffic::write_keys(&lab.addresses(), "k", 1000).await;
    let writer = Writer::start(&lab.addresses(), "w").await;

    lab.max_down_per_shard = 0;
    for member in &mut lab.members {
        member.desired_revision = Some("r2".into());
    }
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(180)).await;
    eprintln!("[rolling] 6 members restarted in {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 3);
    assert_eq!(health.replicas_in_sync, 3);
    for member in &lab.members {
        assert_eq!(
            member.current_revision.as_deref(),
            Some("r2"),
            "{}",
            member.name
        );
    }
    assert_eq!(
        lab.max_down_per_shard, 1,
        "one member of a shard down at a time"
    );
    let restarts: Vec<&String> = lab
        .history
        .iter()
        .filter(|l| l.contains("allow c-"))
        .collect();
    assert_eq!(restarts.len(), 6, "{restarts:?}");
    let failovers = lab
        .history
        .iter()
        .filter(|l| l.contains("CLUSTER FAILOVER"))
        .count();
    assert_eq!(failovers, 3, "each primary handed over before restarting");
    lab.assert_topology().await;

    let report = writer.finish().await;
    eprintln!(
        "[rolling] {} writes acknowledged during, {} failed attempts retried",
        report.acked.len(),
        report.failed_attempts
    );
    assert!(!report.acked.is_empty());
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}
