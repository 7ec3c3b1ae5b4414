//! Chaos: operations crossed with faults, each with a writer counting plain and WAIT-acknowledged
//! writes (see `e2e::chaos`). Faults that reach beyond a scenario's own pods (a zone, a node, the
//! API server) disturb every test that runs beside them, so this target runs after the parallel
//! suite, one test at a time.
//!
//! - `make test` runs the fixed-seed scenarios below (`quick_*`);
//! - `make chaos` runs the whole matrix (`full_matrix`, ignored otherwise) with a random seed it
//!   prints, or `CHAOS_SEED`; `CHAOS_FILTER` keeps the scenarios whose name contains it (or one of
//!   its comma-separated parts, with every part written `+part` and none written `-part`). Each scenario's row is kept in `docs/chaos.json` and
//!   `docs/chaos.md` as it finishes (`e2e::chaos::results`), so the matrix may be run in parts.
//!
//! Every scenario runs on Valkey 9.1 and again on 8.0 (its name ends in `.on-8.0`). Scenarios on a
//! ValkeyReplication have names that start with `replication.` (`CHAOS_FILTER=replication`).

use std::time::Duration;

use e2e::Result;
use e2e::chaos::{self, Fault, Kind, Operation, Scenario};
use e2e::faults::NodeStop;

const SPEC_3X1: &str = "{shards: 3, replicas: 1}";
const SPEC_4X1: &str = "{shards: 4, replicas: 1}";
const SPEC_3X2: &str = "{shards: 3, replicas: 2}";
const SPEC_8: &str = "{shards: 3, replicas: 1, image: 'valkey/valkey:8.0'}";
const SPEC_EPHEMERAL: &str = "{shards: 3, replicas: 1, persistence: {enabled: false}}";
const SPEC_SLOW_TIMEOUT: &str = "{shards: 3, replicas: 1, config: {cluster-node-timeout: '30000'}}";
/// Replicas Valkey soon counts too stale to promote: a lost primary link is noticed after 10 s
/// (`repl-timeout`), and a replica whose link has been down for longer than cluster-node-timeout
/// (15 s) + `repl-ping-replica-period` (10 s) × 1 no longer stands for election. With Valkey's
/// defaults (factor 10) a replica cut for minutes is still promotable, and Valkey itself would
/// promote it and lose what it missed.
const SPEC_STALE_REPLICAS: &str =
    "{shards: 3, replicas: 1, config: {cluster-replica-validity-factor: '1', repl-timeout: '10'}}";
/// External access on: every member announces its load balancer's address (or its node's
/// address and node port) to clients, so the scenario's writers, seeded with pod IPs, are sent
/// to the external addresses by CLUSTER SLOTS and MOVED and write through the load balancers
/// (or NodePorts) and kube-proxy, as clients outside would.
const SPEC_EXTERNAL_3X1: &str = "{shards: 3, replicas: 1, externalAccess: {}}";
const SPEC_EXTERNAL_4X1: &str = "{shards: 4, replicas: 1, externalAccess: {}}";
const SPEC_NODE_PORT_3X1: &str = "{shards: 3, replicas: 1, externalAccess: {type: NodePort}}";
/// A replication's primary and one or two replicas.
const REPLICATION_1: &str = "{replicas: 1}";
const REPLICATION_2: &str = "{replicas: 2}";
/// With Sentinel (issue 31): Sentinel elects, the operator follows.
const SENTINEL_1: &str = "{replicas: 1, sentinel: {enabled: true, downAfterMilliseconds: 3000}}";
const SENTINEL_2: &str = "{replicas: 2, sentinel: {enabled: true, downAfterMilliseconds: 3000}}";
/// Without persistence: a primary restarted in place comes back empty while Sentinel may still
/// count it up; its replicas must not sync the emptiness from it.
const SENTINEL_2_EPHEMERAL: &str = "{replicas: 2, persistence: {enabled: false}, \
     sentinel: {enabled: true, downAfterMilliseconds: 3000}}";
/// How many random points the operator is killed at, per operation, in the full matrix.
const KILL_POINTS: u64 = 10;

/// Operations of the matrix: (name, starting spec, operation, how long it runs about).
type Operations = Vec<(&'static str, &'static str, Operation, Duration)>;

/// The operations on a cluster.
fn operations() -> Operations {
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

/// The operations on a cluster with external access through load balancers (`external.`).
fn external_operations() -> Operations {
    vec![
        (
            "idle",
            SPEC_EXTERNAL_3X1,
            Operation::Idle,
            Duration::from_secs(5),
        ),
        (
            "scale-out",
            SPEC_EXTERNAL_3X1,
            Operation::Shards(4),
            Duration::from_secs(30),
        ),
        (
            "scale-in",
            SPEC_EXTERNAL_4X1,
            Operation::Shards(3),
            Duration::from_secs(30),
        ),
        (
            "roll",
            SPEC_EXTERNAL_3X1,
            Operation::Image("valkey/valkey:9.1.2"),
            Duration::from_secs(60),
        ),
    ]
}

/// The operations on a cluster behind NodePorts (`external-nodeport.`), which need Valkey 9: no
/// run on 8.0.
fn node_port_operations() -> Operations {
    vec![
        (
            "idle",
            SPEC_NODE_PORT_3X1,
            Operation::Idle,
            Duration::from_secs(5),
        ),
        (
            "scale-out",
            SPEC_NODE_PORT_3X1,
            Operation::Shards(4),
            Duration::from_secs(30),
        ),
        (
            "roll",
            SPEC_NODE_PORT_3X1,
            Operation::Image("valkey/valkey:9.1.2"),
            Duration::from_secs(60),
        ),
    ]
}

/// The operations on a replication. Their lengths as measured on localkube: a replica added in
/// about 8 s, a roll of three members in about 25 s, a switchover in about 2 s.
fn replication_operations() -> Operations {
    vec![
        (
            "idle",
            REPLICATION_2,
            Operation::Idle,
            Duration::from_secs(5),
        ),
        (
            "replicas-up",
            REPLICATION_1,
            Operation::Replicas(2),
            Duration::from_secs(10),
        ),
        (
            "replicas-down",
            REPLICATION_2,
            Operation::Replicas(1),
            Duration::from_secs(10),
        ),
        (
            "roll",
            REPLICATION_2,
            Operation::Image("valkey/valkey:9.1.2"),
            Duration::from_secs(25),
        ),
        // To member 1: the first primary is member 0.
        (
            "switchover",
            REPLICATION_2,
            Operation::Primary(1),
            Duration::from_secs(5),
        ),
    ]
}

/// A replication with Sentinel: what a user does to one. Its writer finds the primary through
/// the Sentinels, as Sentinel clients do, and its check asks every Sentinel for the primary.
fn sentinel_operations() -> Operations {
    vec![
        ("idle", SENTINEL_2, Operation::Idle, Duration::from_secs(5)),
        (
            "idle-without-persistence",
            SENTINEL_2_EPHEMERAL,
            Operation::Idle,
            Duration::from_secs(5),
        ),
        (
            "replicas-up",
            SENTINEL_1,
            Operation::Replicas(2),
            Duration::from_secs(10),
        ),
        (
            "roll",
            SENTINEL_2,
            Operation::Image("valkey/valkey:9.1.2"),
            Duration::from_secs(25),
        ),
        (
            "switchover",
            SENTINEL_2,
            Operation::Primary(1),
            Duration::from_secs(5),
        ),
    ]
}

/// The faults of a replication with Sentinel: the list (the primary's pod deleted, its
/// process killed and restarted in place, the primary isolated or paused, one Sentinel lost) and
/// the operator's own.
fn sentinel_faults() -> Vec<(&'static str, Fault)> {
    vec![
        ("none", Fault::None),
        ("kill-operator", Fault::KillClusterController),
        ("delete-primary", Fault::DeletePrimaryPod),
        ("isolate-primary", Fault::IsolatePrimary { seconds: 30 }),
        ("pause-primary", Fault::PausePrimary { seconds: 20 }),
        ("restart-in-place", Fault::RestartPrimaryInPlace),
        ("delete-sentinel", Fault::DeleteSentinelPod),
    ]
}

/// The faults of the matrix: (name, fault). A replication has those of
/// [`Fault::applies_to`] only: no partial partition, zone, stale replica, second shard or node.
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
        ("delete-secret", Fault::DeletePasswordSecret),
        (
            "operator-held-restart-in-place",
            Fault::OperatorHeldDown {
                seconds: 30,
                during: Box::new(Fault::RestartPrimaryInPlace),
            },
        ),
    ]
}

/// The scenarios the faults issue names, each a case the operator once got wrong.
fn named() -> Vec<Scenario> {
    let idle = |name: &str, spec: &'static str, fault: Fault| Scenario {
        name: format!("named.{name}"),
        kind: Kind::Cluster,
        spec: spec.to_owned(),
        operation: Operation::Idle,
        fault,
        window: Duration::from_secs(3),
        writers: 1,
    };
    vec![
        // The operator's pod and one replica lose their primary; everyone else still sees it.
        idle(
            "partial-partition",
            SPEC_3X1,
            Fault::PartialPartition { seconds: 60 },
        ),
        // The same for a whole zone.
        idle(
            "partial-zone-partition",
            SPEC_3X1,
            Fault::PartialZonePartition { seconds: 60 },
        ),
        // No persistence: a primary's server restarts in place, empty, with its node ID.
        idle(
            "empty-restart-in-place",
            SPEC_EPHEMERAL,
            Fault::RestartPrimaryInPlace,
        ),
        // The same with six clients writing at full speed: the emptied primary must take none
        // of their writes before the operator has judged it (they would be lost in the handover).
        Scenario {
            writers: 6,
            ..idle(
                "empty-restart-under-load",
                SPEC_EPHEMERAL,
                Fault::RestartPrimaryInPlace,
            )
        },
        // The same with the operator held down meanwhile: the emptied primary stays closed, its
        // replica keeps the data, and the handover comes when the operator goes on.
        idle(
            "operator-held-empty-restart",
            SPEC_EPHEMERAL,
            Fault::OperatorHeldDown {
                seconds: 30,
                during: Box::new(Fault::RestartPrimaryInPlace),
            },
        ),
        // The user's cluster-node-timeout of 30 s: the operator waits for Valkey's own judgement.
        idle(
            "slow-timeout-partial-partition",
            SPEC_SLOW_TIMEOUT,
            Fault::PartialPartition { seconds: 90 },
        ),
        idle(
            "slow-timeout-isolated-primary",
            SPEC_SLOW_TIMEOUT,
            Fault::IsolatePrimary { seconds: 90 },
        ),
        // A replica too stale for Valkey to promote is not promoted by the operator either: its
        // link is down from 10-20 s on, so when its primary counts as failed (pause + 15 s) its
        // data is 40 s old or more, past Valkey's 25 s; the shard waits for its primary. When the
        // fault ends the replica catches up and Valkey may elect it then, as for any paused primary.
        idle(
            "stale-replica",
            SPEC_STALE_REPLICAS,
            Fault::StaleReplicaThenPausedPrimary {
                stale_seconds: 75,
                paused_seconds: 30,
            },
        ),
        // No persistence: a primary's replica restarts empty and full-syncs (slowed), while the
        // primary's node is drained. The primary stays until its replica holds the data.
        idle(
            "drain-during-full-sync",
            SPEC_EPHEMERAL,
            Fault::DrainDuringFullSync,
        ),
        // One member out for 10 minutes while another shard's primary restarts: that shard is
        // repaired meanwhile.
        idle(
            "member-out-10-minutes",
            SPEC_3X1,
            Fault::MemberOutWhileAnotherPrimaryRestarts { seconds: 600 },
        ),
        // The same, short enough for every test run.
        idle(
            "member-out-90-seconds",
            SPEC_3X1,
            Fault::MemberOutWhileAnotherPrimaryRestarts { seconds: 90 },
        ),
    ]
}

/// Every operation of `kind` crossed with every fault that applies to it, named
/// `<prefix><operation>.<fault>`: no prefix for a cluster, `replication.` for a replication,
/// `external.` and `external-nodeport.` for a cluster with external access.
fn cross(prefix: &str, kind: Kind, operations: Operations) -> Vec<Scenario> {
    cross_with(prefix, kind, operations, &faults())
}

fn cross_with(
    prefix: &str,
    kind: Kind,
    operations: Operations,
    faults: &[(&'static str, Fault)],
) -> Vec<Scenario> {
    let mut all = Vec::new();
    for (op_name, spec, operation, window) in operations {
        for (fault_name, fault) in faults.iter().cloned() {
            if !fault.applies_to(kind) {
                continue;
            }
            // The operator killed at KILL_POINTS random points of each operation.
            let points = if fault == Fault::KillClusterController {
                KILL_POINTS
            } else {
                1
            };
            for point in 1..=points {
                let suffix = if points > 1 {
                    format!("-{point}")
                } else {
                    String::new()
                };
                all.push(Scenario {
                    name: format!("{prefix}{op_name}.{fault_name}{suffix}"),
                    kind,
                    spec: spec.to_owned(),
                    operation: operation.clone(),
                    fault: fault.clone(),
                    window,
                    writers: 1,
                });
            }
        }
    }
    all
}

fn matrix() -> Vec<Scenario> {
    let mut all = cross("", Kind::Cluster, operations());
    all.extend(named());
    all.extend(cross(
        "replication.",
        Kind::Replication,
        replication_operations(),
    ));
    all.extend(cross_with(
        "replication-sentinel.",
        Kind::Replication,
        sentinel_operations(),
        &sentinel_faults(),
    ));
    all.extend(cross("external.", Kind::Cluster, external_operations()));
    // Every scenario again on Valkey 8.0, but the upgrade from 8.0, which is on both already.
    let on_8: Vec<Scenario> = all
        .iter()
        .filter(|s| !s.name.starts_with("upgrade-8-to-9."))
        .map(Scenario::on_valkey_8)
        .collect();
    all.extend(on_8);
    all.extend(cross(
        "external-nodeport.",
        Kind::Cluster,
        node_port_operations(),
    ));
    all
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "the whole matrix takes hours: make chaos"]
async fn full_matrix() -> Result<()> {
    let seed = chaos::seed_from_env();
    eprintln!("chaos: seed {seed} (CHAOS_SEED={seed} repeats this run)");
    let filter = std::env::var("CHAOS_FILTER").unwrap_or_default();
    let all = matrix();
    let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
    let scenarios: Vec<Scenario> = all
        .into_iter()
        .filter(|s| chaos::matches_filter(&s.name, &filter))
        .collect();
    eprintln!("chaos: {} scenarios", scenarios.len());
    let recorder = chaos::results::Recorder::new(e2e::repo_root(), names);
    let reports = chaos::run_all(&scenarios, seed, Some(&recorder)).await;
    chaos::verdict(&reports)
}

/// Scenarios of the matrix, by name, with a fixed seed: those that reach only their own pods
/// side by side, the others one after another.
async fn quick(names: &[&str], seed: u64) -> Result<()> {
    let all = matrix();
    let mut scenarios = Vec::new();
    for name in names {
        let scenario = all
            .iter()
            .find(|s| s.name == *name)
            .ok_or_else(|| e2e::E2eError::Check(format!("no scenario {name}")))?;
        scenarios.push(scenario.clone());
    }
    let reports = chaos::run_all(&scenarios, seed, None).await;
    chaos::verdict(&reports)
}

/// Faults confined to the scenario's own pods and processes, side by side.
///
/// `named.stale-replica` is not among them (it runs in `make chaos`): its plain-acknowledged writes
/// may be lost to Valkey's own election at the end of the fault (see
/// [`Fault::valkey_alone_may_lose_writes`]), so in a quick run it would show little of its own.
#[tokio::test(flavor = "multi_thread")]
async fn quick_faults_of_one_cluster() -> Result<()> {
    quick(
        &[
            "scale-out.kill-operator-1",
            "roll.delete-primary",
            "named.partial-partition",
            "named.empty-restart-under-load",
            "named.operator-held-empty-restart",
            "idle.delete-secret",
            "named.member-out-90-seconds",
            "named.partial-partition.on-8.0",
            "external.roll.delete-primary",
        ],
        11,
    )
    .await
}

/// A replication's faults, confined to its own pods and processes, side by side: the primary's
/// pod deleted during a roll, the primary paused on Valkey 8.0, the operator killed while a
/// replica is added.
#[tokio::test(flavor = "multi_thread")]
async fn quick_faults_of_one_replication() -> Result<()> {
    quick(
        &[
            "replication.roll.delete-primary",
            "replication.idle.pause-primary.on-8.0",
            "replication.replicas-up.kill-operator-1",
        ],
        13,
    )
    .await
}

/// Faults that reach every pod of a zone, or the API server, one at a time.
#[tokio::test(flavor = "multi_thread")]
async fn quick_faults_of_the_whole_cluster() -> Result<()> {
    quick(
        &[
            "scale-out.apiserver-restart",
            "named.partial-zone-partition",
            "named.drain-during-full-sync",
        ],
        12,
    )
    .await
}
