//! The Valkey 9 migration machine against what a 9.1 server reported before, during and after
//! `CLUSTER MIGRATESLOTS`, and for cancelled and failed jobs.

use crate::common;

use cluster_controller::plan::migration::atomic::{Observed, Step, next_step};
use cluster_controller::valkey::cluster_nodes::{self, ClusterNodes};
use cluster_controller::valkey::slot_migrations::{self, SlotMigrationJob};
use cluster_controller::valkey::slots::SlotSet;

fn nodes(name: &str) -> ClusterNodes {
    cluster_nodes::parse(&common::text(name)).unwrap()
}

fn jobs(name: &str) -> Vec<SlotMigrationJob> {
    slot_migrations::parse(&common::value(&format!("{name}.resp3"))).unwrap()
}

fn slots(text: &str) -> SlotSet {
    text.parse().unwrap()
}

/// The source's and target's own views; the target is the node whose hostname is
/// `valkey-6.example.test`.
fn observed(source_view: &str, target_view: Option<&str>, want: &str) -> Observed {
    let source = nodes(source_view);
    let me = source.myself().unwrap();
    let target_line = source
        .nodes()
        .iter()
        .find(|n| n.hostname.as_deref() == Some("valkey-6.example.test"))
        .unwrap();
    let target_owns = match target_view {
        Some(name) => nodes(name).myself().unwrap().slots.clone(),
        None => target_line.slots.clone(),
    };
    Observed {
        source: me.id.clone(),
        target: target_line.id.clone(),
        slots: slots(want),
        source_owns: me.slots.clone(),
        target_owns,
        source_jobs: Vec::new(),
        target_jobs: Vec::new(),
        max_attempts: 3,
    }
}

#[test]
fn starts_with_the_real_syntax() {
    let o = observed("v9/cluster_nodes_primary", None, "0-99");
    let step = next_step(&o);
    assert!(matches!(step, Step::Start { .. }), "{step:?}");
    let mut expected = redis::cmd("CLUSTER");
    expected
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg("0")
        .arg("99")
        .arg("NODE")
        .arg(o.target.to_string());
    assert_eq!(
        step.command().unwrap().get_packed_command(),
        expected.get_packed_command()
    );
}

#[test]
fn waits_while_the_job_runs_then_is_done() {
    let mut o = observed(
        "v9/cluster_nodes_during_migrateslots",
        Some("v9/cluster_nodes_target_during_migrateslots"),
        "0-99",
    );
    o.source_jobs = jobs("v9/getslotmigrations_source_started");
    o.target_jobs = jobs("v9/getslotmigrations_target_started");
    match next_step(&o) {
        Step::Wait { job, state } => {
            assert_eq!(job, o.source_jobs[0].name);
            assert!(!state.is_empty());
        }
        other => panic!("expected Wait, got {other:?}"),
    }
    // Only the target's job is known (source unreadable): still wait.
    o.source_jobs.clear();
    assert!(matches!(next_step(&o), Step::Wait { .. }));

    let mut o = observed(
        "v9/cluster_nodes_after_migrateslots",
        Some("v9/cluster_nodes_target_after_migrateslots"),
        "0-99",
    );
    assert_eq!(o.target_owns, slots("0-99"));
    o.source_jobs = jobs("v9/getslotmigrations_source_success");
    o.target_jobs = jobs("v9/getslotmigrations_target_success");
    assert_eq!(next_step(&o), Step::Done);
    // Done even without the job log: ownership is what counts.
    o.source_jobs.clear();
    o.target_jobs.clear();
    assert_eq!(next_step(&o), Step::Done);
}

#[test]
fn retries_a_cancelled_job_then_reports() {
    let mut o = observed(
        "v9/cluster_nodes_after_migrateslots",
        None,
        "100-149,170-199",
    );
    o.source_jobs = jobs("v9/getslotmigrations_source_cancelled");
    o.target_jobs = jobs("v9/getslotmigrations_target_cancelled");
    match next_step(&o) {
        Step::Start { ranges, .. } => {
            let got: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            assert_eq!(got, ["100-149", "170-199"]);
        }
        other => panic!("expected a retry, got {other:?}"),
    }
    o.max_attempts = 1;
    assert_eq!(
        next_step(&o),
        Step::Failed {
            attempts: 1,
            message: None
        }
    );
}

#[test]
fn retries_a_failed_job_then_reports_its_message() {
    let mut o = observed("v9/cluster_nodes_failed_primary", None, "200-299");
    o.source_jobs = jobs("v9/getslotmigrations_source_failed");
    // The earlier success (0-99) and cancellation (100-199 ranges) are about other slots.
    assert!(matches!(next_step(&o), Step::Start { .. }));
    o.max_attempts = 1;
    match next_step(&o) {
        Step::Failed { attempts, message } => {
            assert_eq!(attempts, 1);
            assert!(message.unwrap().contains("Connection lost to target"));
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[test]
fn only_moves_what_is_left_and_refuses_foreign_slots() {
    // 0-99 already went to the target; asking for 0-199 moves 100-199 only.
    let o = observed("v9/cluster_nodes_after_migrateslots", None, "0-199");
    match next_step(&o) {
        Step::Start { ranges, .. } => assert_eq!(ranges[0].to_string(), "100-199"),
        other => panic!("{other:?}"),
    }
    // 5461-5470 belong to another primary.
    let o = observed("v9/cluster_nodes_primary", None, "5455-5470");
    assert_eq!(
        next_step(&o),
        Step::NotOnSource {
            slots: slots("5461-5470")
        }
    );
}
