//! A cluster at rest holds no connection to its servers: a steady pass lets go of the
//! connections it used, and the next look opens new ones. Work in progress keeps them (its looks
//! are at most seconds apart).

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::{Decision, Desired};
use redis::Value;

use common::lab::Lab;
use common::servers::{self, OPERATOR_USER};

/// How many connections the operator's user has open on `member`, as the server counts them.
async fn operator_connections(lab: &Lab, member: &str) -> usize {
    let reply = lab.command(member, &["CLIENT", "LIST"]).await;
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{member}: CLIENT LIST answered {other:?}"),
    };
    let user = format!("user={OPERATOR_USER}");
    text.lines()
        .filter(|line| line.split(' ').any(|field| field == user))
        .count()
}

/// Waits until no member counts a connection of the operator's user.
async fn until_no_operator_connection(lab: &Lab, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut open = Vec::new();
        for member in &lab.members {
            let count = operator_connections(lab, &member.name).await;
            if count > 0 {
                open.push(format!("{}: {count}", member.name));
            }
        }
        if open.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the operator's connections still open after {within:?}: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_pass_lets_go_of_its_connections() {
    let mut lab = Lab::new("rest", servers::valkey_9(), 250);
    lab.scale(Desired::new(3, 0));
    lab.converge(Duration::from_secs(60)).await;
    assert_eq!(lab.engine.client().open_connections(), 0);
    until_no_operator_connection(&lab, Duration::from_secs(5)).await;

    // The next look connects again, sees the same cluster, and lets go again.
    let pass = lab.pass().await;
    assert!(
        matches!(pass.decision, Decision::Steady(_)),
        "{}",
        pass.decision
    );
    assert!(
        pass.observation
            .members
            .values()
            .all(|m| m.state().is_some()),
        "every member answered the new connections"
    );
    assert_eq!(lab.engine.client().open_connections(), 0);
    until_no_operator_connection(&lab, Duration::from_secs(5)).await;

    // A shard added: the pass is work in progress, and its connections stay for the next look.
    lab.scale(Desired::new(4, 0));
    let growing = lab.pass().await;
    assert!(
        !matches!(growing.decision, Decision::Steady(_)),
        "{}",
        growing.decision
    );
    assert!(
        lab.engine.client().open_connections() >= 3,
        "a pass of work in progress keeps its connections"
    );
}
