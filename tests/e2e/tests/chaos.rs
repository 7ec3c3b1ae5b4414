//! Chaos: operations crossed with faults, each with a writer counting plain and WAIT-acknowledged
//! writes (see `e2e::chaos`). Faults that reach beyond a scenario's own pods (a zone, a node, the
//! API server) disturb every test that runs beside them, so this target runs after the parallel
//! suite, one test at a time.
//!
//! - `make test` runs the fixed-seed scenarios below (`quick_*`);
//! - `make chaos` runs the whole matrix (`full_matrix`, ignored otherwise) with a random seed it
//!   prints, or `CHAOS_SEED`; `CHAOS_FILTER` keeps the scenarios whose name contains it.

use std::time::Duration;

use e2e::Result;
use e2e::chaos::{self, Fault, Operation, Scenario};
use e2e::faults::NodeStop;

const SPEC_3X1: &str = "{shards: 3, replicas: 1}";
const SPEC_4X1: &str = "{shards: 4, replicas: 1}";
const SPEC_3X2: &str = "{shards: 3, replicas: 2}";
const SPEC_8: &str = "{shards: 3, replicas: 1, image: 'valkey/valkey:8.0'}";
const SPEC_EPHEMERAL: &str = "{shards: 3, replicas: 1, persistence: {enabled: false}}";

/// The operations of the matrix: (name, starting spec, operation, how long it runs about).
fn operations() -> Vec<(&'static str, &'static str, Operation, Duration)> {
    vec![
        ("idle", SPEC_3X1, Operation::Idle, Duration::from_secs(5)),
        (
            "scale-out",
            SPEC_3X1,
            Operation::Shards(4),
            Duration::from_secs(30),
        ),
        (
            "scale-in",
            SPEC_4X1,
            Operation::Shards(3),
            Duration::from_secs(30),
        ),
        (
            "replicas-up",
            SPEC_3X1,
            Operation::Replicas(2),
            Duration::from_secs(20),
        ),
        (
            "replicas-down",
            SPEC_3X2,
            Operation::Replicas(1),
            Duration::from_secs(20),
        ),
        (
            "roll",
            SPEC_3X1,
            Operation::Image("valkey/valkey:9.1.2"),
            Duration::from_secs(60),
        ),
        (
            "upgrade-8-to-9",
            SPEC_8,
            Operation::Image("valkey/valkey:9.1"),
            Duration::from_secs(60),
        ),
    ]
}

/// The faults of the matrix: (name, fault).
fn faults() -> Vec<(&'static str, Fault)> {
    vec![
        ("none", Fault::None),
        ("kill-operator", Fault::KillClusterController),
        ("delete-primary", Fault::DeletePrimaryPod),
        ("partial-partition", Fault::PartialPartition { seconds: 30 }),
        ("isolate-primary", Fault::IsolatePrimary { seconds: 30 }),
        ("pause-primary", Fault::PausePrimary { seconds: 20 }),
        ("restart-in-place", Fault::RestartPrimaryInPlace),
        ("zone-partition", Fault::PartitionZone { seconds: 30 }),
        (
            "node-partitioned",
            Fault::StopNode {
                how: NodeStop::Partition,
                seconds: 60,
            },
        ),
        (
            "node-crashed",
            Fault::StopNode {
                how: NodeStop::Crash,
                seconds: 60,
            },
        ),
        ("apiserver-restart", Fault::RestartApiServer),
    ]
}

fn matrix() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (op_name, spec, operation, window) in operations() {
        for (fault_name, fault) in faults() {
            all.push(Scenario {
                name: format!("{op_name}.{fault_name}"),
                spec,
                operation: operation.clone(),
                fault,
                window,
            });
        }
    }
    // Without persistence a restart in place comes back empty with the same node ID.
    all.push(Scenario {
        name: "idle.restart-in-place-ephemeral".to_owned(),
        spec: SPEC_EPHEMERAL,
        operation: Operation::Idle,
        fault: Fault::RestartPrimaryInPlace,
        window: Duration::from_secs(5),
    });
    all
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "the whole matrix takes hours: make chaos"]
async fn full_matrix() -> Result<()> {
    let seed = chaos::seed_from_env();
    eprintln!("chaos: seed {seed} (CHAOS_SEED={seed} repeats this run)");
    let filter = std::env::var("CHAOS_FILTER").unwrap_or_default();
    let scenarios: Vec<Scenario> = matrix()
        .into_iter()
        .filter(|s| s.name.contains(&filter))
        .collect();
    eprintln!("chaos: {} scenarios", scenarios.len());
    let reports = chaos::run_all(&scenarios, seed).await;
    chaos::verdict(&reports)
}

/// One scenario of the matrix, by name, with a fixed seed.
async fn quick(name: &str, seed: u64) -> Result<()> {
    let scenario = matrix()
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| e2e::E2eError::Check(format!("no scenario {name}")))?;
    let report = chaos::run(&scenario, seed).await?;
    chaos::verdict(&[report])
}

#[tokio::test(flavor = "multi_thread")]
async fn quick_scale_out_with_the_operator_killed() -> Result<()> {
    quick("scale-out.kill-operator", 11).await
}

#[tokio::test(flavor = "multi_thread")]
async fn quick_scale_out_across_an_api_server_restart() -> Result<()> {
    quick("scale-out.apiserver-restart", 12).await
}

#[tokio::test(flavor = "multi_thread")]
async fn quick_roll_with_a_primary_pod_deleted() -> Result<()> {
    quick("roll.delete-primary", 13).await
}
