//! How long one pass watches a slot migration job that Valkey 9 runs by itself: to its end when
//! it ends within the pass's budget, so the step after it comes in the same pass; and no longer
//! than the budget when it does not. Servers answer from memory (`common::memory`), each
//! CLUSTER GETSLOTMIGRATIONS as the test scripts it, in the replies captured from Valkey 9.1.

use crate::common;

use std::time::Duration;

use cluster_controller::client::Credentials;
use cluster_controller::engine::{Decision, Engine, EngineConfig, Reason};
use common::memory::{Cluster, REPLICATION_USER, Servers};

const POLL: Duration = Duration::from_millis(10);

/// An engine over `servers` that looks again every [`POLL`] and watches a job for `budget`.
fn engine(servers: Servers, budget: Duration) -> Engine<Servers> {
    let mut config = EngineConfig::for_credentials(&Credentials::none());
    config.fence_user = Some(REPLICATION_USER.to_owned());
    config.settle_poll = POLL;
    config.job_poll = POLL;
    config.job_watch_budget = budget;
    Engine::new(servers, config)
}

/// A healthy cluster of two shards whose first primary exports slots: the job runs for
/// `running` looks, then (`ends`) reports success, or runs on.
fn exporting(running: usize, ends: bool) -> (Cluster, Servers) {
    let cluster = Cluster::new(4);
    let servers = Servers::new(&cluster);
    let started = common::value("v9/getslotmigrations_source_started.resp2");
    let mut replies = vec![started; running];
    if ends {
        replies.push(common::value("v9/getslotmigrations_source_success.resp2"));
    }
    servers.script_migrations(cluster.nodes[0].address(), replies);
    (cluster, servers)
}

#[tokio::test]
async fn a_pass_watches_a_running_job_to_its_end_and_decides_what_follows() {
    let (cluster, servers) = exporting(3, true);
    let engine = engine(servers, Duration::from_secs(5));
    let pass = engine.pass(&cluster.desired(), &cluster.members()).await;
    assert!(
        matches!(pass.decision, Decision::Steady(_)),
        "the pass ended on {} instead of the steady cluster after the job",
        pass.decision
    );
    assert_eq!(
        pass.timing.looks, 4,
        "three looks at the running job, one after"
    );
    assert!(pass.outcome.is_none(), "nothing to do after the job");
}

#[tokio::test]
async fn a_job_running_past_the_budget_ends_the_pass_waiting_on_it() {
    let budget = Duration::from_millis(200);
    let (cluster, servers) = exporting(1, false);
    let engine = engine(servers, budget);
    let started = tokio::time::Instant::now();
    let pass = engine.pass(&cluster.desired(), &cluster.members()).await;
    assert!(
        matches!(
            pass.decision,
            Decision::Wait {
                reason: Reason::MigratingSlots,
                ..
            }
        ),
        "{}",
        pass.decision
    );
    assert!(
        started.elapsed() >= budget,
        "left the job before the budget"
    );
    assert!(pass.timing.looks > 1, "the job was looked at once");
    // Each wait adds one poll to the pass's settle time, and none starts once the budget is
    // spent: what it slept is bounded, however slow the machine.
    assert!(
        pass.timing.settle <= budget + POLL,
        "slept {:?} watching the job, past its budget",
        pass.timing.settle
    );
}
