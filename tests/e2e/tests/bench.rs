//! Benchmarks (`make bench`), not tests: they measure and print, and fail only when the operation
//! itself fails. Run on an otherwise idle machine for figures worth comparing:
//! `cargo test -p e2e --test bench -- --ignored --nocapture --test-threads=1`.

use std::time::{Duration, Instant};

use e2e::Result;
use e2e::cluster::ClusterFixture;

/// Formation, split (`e2e::formation`): 1×0, 3×1 and 10×1, `BENCH_RUNS` times each (default 3;
/// `BENCH_FORMATION_SPECS=1x0,3x1` picks sizes). Writes `bench/results/formation.json` and its
/// section of `docs/benchmarks.md`, with every pass of the cluster-controller traced.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_formation() -> Result<()> {
    use e2e::formation::{self, Figures};
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let wanted = std::env::var("BENCH_FORMATION_SPECS").unwrap_or_else(|_| "1x0,3x1,10x1".into());
    let mut figures = Figures {
        benchmark: "formation",
        command: format!(
            "BENCH_RUNS={runs} BENCH_FORMATION_SPECS={wanted} cargo test --workspace --test bench -- --ignored --nocapture bench_formation"
        ),
        machine: e2e::resharding::report::machine(),
        runs: Vec::new(),
    };
    for label in wanted.split(',').map(str::trim) {
        let Some((shards, replicas)) = label
            .split_once('x')
            .and_then(|(s, r)| Some((s.parse::<usize>().ok()?, r.parse::<usize>().ok()?)))
        else {
            return Err(e2e::E2eError::Check(format!(
                "BENCH_FORMATION_SPECS: {label:?} is not SHARDSxREPLICAS"
            )));
        };
        let spec = format!("{{shards: {shards}, replicas: {replicas}}}");
        for run in 1..=runs {
            let formed = formation::measure(&spec, shards * (1 + replicas), run).await?;
            println!(
                "formation {label} run {run}: pods Ready {:.1} s after the apply; ValkeyNodes ready {:.2} s after the pods; the operator's time {:.2} s ({:.2} s in {} passes)",
                formed.pods_ready_s,
                formed.nodes_ready_after_pods_s,
                formed.operator_s,
                formed.in_passes_s(),
                formed.operator_passes().count()
            );
            figures.runs.push(formed);
        }
    }
    println!("{}", formation::markdown(&figures));
    formation::publish(&e2e::repo_root(), &figures)
}

async fn scale_out(image: &str, keys: u64) -> Result<()> {
    let start = Instant::now();
    let c = ClusterFixture::start(
        "bench",
        "bench",
        &format!("{{shards: 3, replicas: 1, image: '{image}'}}"),
    )
    .await?;
    c.wait_ready(Duration::from_secs(300)).await?;
    let formed = start.elapsed();
    let written = c.write_keys("bench", keys).await?;
    let t = Instant::now();
    c.patch_spec(serde_json::json!({"shards": 4})).await?;
    c.wait_ready(Duration::from_secs(900)).await?;
    let scaled = t.elapsed();
    c.verify(&written).await?;
    // A quarter of the slots (and about a quarter of the keys) moved to the new shard.
    let moved = keys / 4;
    println!(
        "{image}: 3x1 Ready in {:.1} s; 3 -> 4 shards with {keys} keys in {:.1} s, the new shard's pods included (~{:.0} moved keys/s, 4096 slots)",
        formed.as_secs_f64(),
        scaled.as_secs_f64(),
        moved as f64 / scaled.as_secs_f64()
    );
    println!(
        "{image}: resident memory after the run: node-controller {} KiB, cluster-controller {} KiB",
        c.node_controller.rss_kib().unwrap_or(0),
        c.cluster_controller.rss_kib().unwrap_or(0)
    );
    println!(
        "{image}: reconciles: node-controller {}, cluster-controller {}",
        c.node_controller.reconciles().await.unwrap_or(0.0),
        c.cluster_controller.reconciles().await.unwrap_or(0.0)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_scale_out_valkey_9_atomic_migration() -> Result<()> {
    scale_out("valkey/valkey:9.1", 20_000).await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_scale_out_valkey_8_key_migration() -> Result<()> {
    scale_out("valkey/valkey:8.0", 20_000).await
}

/// Resharding, side by side (`e2e::resharding`): the operator, valkey-cli and the limit, from 3
/// shards to 4 and back, on each version of `BENCH_VERSIONS`; sizes from `BENCH_KEYS`,
/// `BENCH_VALUE_BYTES`, `BENCH_SEED`; the operator and the limit `BENCH_ROUNDS` times each
/// (default 3), reported by the median run. Writes `bench/results/resharding.json` and its section of
/// `docs/benchmarks.md`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_resharding() -> Result<()> {
    use e2e::resharding::{Profile, report, run};
    let profile = Profile::from_env();
    let command = format!(
        "{}BENCH_KEYS={} BENCH_VALUE_BYTES={} BENCH_SEED={} BENCH_ROUNDS={} BENCH_VERSIONS={} cargo test --workspace --test bench -- --ignored --nocapture bench_resharding",
        e2e::operator::binaries_in_command(),
        profile.keys,
        profile.value_bytes,
        profile.seed,
        profile.rounds,
        profile
            .images
            .iter()
            .map(|i| i.rsplit(':').next().unwrap_or(i))
            .collect::<Vec<_>>()
            .join(",")
    );
    // Written after each version, so that a failure on one keeps the figures of those before.
    let mut results = Vec::new();
    for image in &profile.images {
        results.push(run(&profile, image).await?);
        let report = report::build(&profile, &command, results.clone());
        report::write(&e2e::repo_root(), &report)?;
        println!("{}", report::markdown(&report));
    }
    Ok(())
}

/// One failover measurement, as `bench/results/failover.json` holds it.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct FailoverFigures {
    valkey: String,
    fault: String,
    seed: u64,
    /// The longest time between two acknowledged writes of the writer.
    longest_gap_s: f64,
    /// Gaps between two acknowledged writes of at least 0.1 s (`e2e::chaos::writer::PAUSE`)
    /// from the fault on: how many times the writer's writes stopped. Absent from figures
    /// measured before it was counted.
    #[serde(default)]
    pauses: Option<u32>,
    /// Each pause's length, in order.
    #[serde(default)]
    pauses_s: Vec<f64>,
    /// Planned failovers the operator made to spread primaries apart during the run (its
    /// `SpreadingPrimaries` Events); absent from figures measured before it was counted.
    #[serde(default)]
    spread_failovers: Option<usize>,
    /// From the fault's end to the cluster Ready with every shard's replica back.
    ready_after_s: f64,
    plain_acked: usize,
    plain_lost: usize,
    wait_acked: usize,
    wait_lost: usize,
    check_ok: bool,
}

/// The pauses column: how many, and each one's length (`2: 1.89 s, 0.08 s`).
fn pauses(f: &FailoverFigures) -> String {
    match f.pauses {
        None => "–".to_owned(),
        Some(0) => "0".to_owned(),
        Some(n) => {
            let each: Vec<String> = f.pauses_s.iter().map(|s| format!("{s:.2} s")).collect();
            format!("{n}: {}", each.join(", "))
        }
    }
}

/// Failover with a writer running (the chaos harness's: a cluster client writing, plain and
/// `WAIT 1`-acknowledged) on a 3×1 cluster with Valkey's default `cluster-node-timeout` (15 s):
/// a primary's pod deleted, its process killed (the kubelet restarts it in place, with its
/// data), and the primary cut off from every other pod and the host for 30 s. Figures: the
/// longest write gap, and the time from the fault's end to Ready. `CHAOS_SEED` picks the moment
/// each fault strikes. Writes `bench/results/failover.json` and its section of
/// `docs/benchmarks.md`. `BENCH_FAILOVER_FILTER` (e.g. `9.1 primary pod deleted`) runs only the
/// cases whose `<valkey> <fault>` contains it; the others keep their figures from the last run.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_failover() -> Result<()> {
    use e2e::chaos::{self, Fault, Kind, Operation, Scenario};
    let seed = chaos::seed_from_env();
    let filter = std::env::var("BENCH_FAILOVER_FILTER").unwrap_or_default();
    let results = e2e::repo_root().join("bench/results/failover.json");
    let earlier: Vec<FailoverFigures> = std::fs::read_to_string(&results)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let faults = [
        ("primary pod deleted", Fault::DeletePrimaryPod),
        ("primary process killed", Fault::RestartPrimaryInPlace),
        (
            "primary partitioned 30 s",
            Fault::IsolatePrimary { seconds: 30 },
        ),
    ];
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    let mut run = 0u64;
    for valkey in ["9.1", "8.0"] {
        for (i, (what, fault)) in faults.iter().enumerate() {
            // Each case keeps its seed (the base seed plus its place) whichever cases run.
            let run_seed = seed.wrapping_add(run);
            run += 1;
            if !format!("{valkey} {what}").contains(filter.as_str()) {
                // Not run this time: as the last run measured it.
                figures.extend(
                    earlier
                        .iter()
                        .find(|f| f.valkey == valkey && f.fault == *what)
                        .cloned(),
                );
                continue;
            }
            let on_9 = Scenario {
                name: format!("failover-{i}"),
                kind: Kind::Cluster,
                spec: "{shards: 3, replicas: 1}".into(),
                operation: Operation::Idle,
                fault: fault.clone(),
                window: Duration::from_secs(2),
                writers: 1,
            };
            let scenario = if valkey == "8.0" {
                on_9.on_valkey_8()
            } else {
                on_9
            };
            let report = chaos::run(&scenario, run_seed).await?;
            let pauses = report.pauses();
            eprintln!(
                "{valkey} {what}: gaps between acknowledged writes (s after the fault, length): \
                 {:?}",
                report.gaps
            );
            if let Some(failure) = &report.failure {
                failures.push(format!("{valkey}, {what}: {failure}"));
            }
            figures.push(FailoverFigures {
                valkey: valkey.to_owned(),
                fault: (*what).to_owned(),
                seed: run_seed,
                longest_gap_s: report.longest_gap.as_secs_f64(),
                pauses: Some(u32::try_from(pauses.len()).unwrap_or(u32::MAX)),
                pauses_s: pauses.iter().map(Duration::as_secs_f64).collect(),
                spread_failovers: Some(report.spread_failovers),
                ready_after_s: report.ready_after.as_secs_f64(),
                plain_acked: report.plain_acked,
                plain_lost: report.plain_lost,
                wait_acked: report.replicated_acked,
                wait_lost: report.replicated_lost,
                check_ok: report.check_ok,
            });
        }
    }
    let mut body = vec![
        "## Failover with a writer running".to_owned(),
        String::new(),
        format!(
            "A 3×1 cluster, Valkey's default `cluster-node-timeout` (15 s), a cluster client \
             writing throughout (plain and `WAIT 1`-acknowledged), from before the fault until \
             50 writes after Ready. Longest gap: the longest time between two acknowledged \
             writes; pauses: how many gaps of 0.1 s or more from the fault on, and each one's \
             length (– where not counted yet). Planned failovers: the operator's \
             `SpreadingPrimaries` moves in the same time, each a pause of its own (of about \
             50 ms here, too short to tell from the writer's own stalls); the operator holds \
             them until the cluster has been steady for `--spread-after-steady-seconds` (300 s \
             by default), past the end of a run. Ready after: from the \
             fault's end to the cluster Ready with every shard's replica back. Command: \
             `{filtered}CHAOS_SEED={seed} cargo test --workspace --test bench -- --ignored \
             --nocapture bench_failover`{others}; raw figures: \
             [bench/results/failover.json](../bench/results/failover.json).",
            filtered = if filter.is_empty() {
                String::new()
            } else {
                format!("BENCH_FAILOVER_FILTER='{filter}' ")
            },
            others = if filter.is_empty() {
                ""
            } else {
                " (the cases the filter leaves out are as an earlier run measured them)"
            },
        ),
        String::new(),
        "| Valkey | fault | longest write gap (s) | pauses | planned failovers | Ready after (s) | plain acked / lost | WAIT acked / lost | cluster check |".to_owned(),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |".to_owned(),
    ];
    body.extend(figures.iter().map(|f| {
        format!(
            "| {} | {} | {:.1} | {} | {} | {:.1} | {} / {} | {} / {} | {} |",
            f.valkey,
            f.fault,
            f.longest_gap_s,
            pauses(f),
            f.spread_failovers
                .map_or_else(|| "–".to_owned(), |n| n.to_string()),
            f.ready_after_s,
            f.plain_acked,
            f.plain_lost,
            f.wait_acked,
            f.wait_lost,
            if f.check_ok { "ok" } else { "FAILED" }
        )
    }));
    let body = body.join("\n");
    println!("{body}");
    e2e::bench::publish(&e2e::repo_root(), "failover", &figures, &body)?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(e2e::E2eError::Check(failures.join("; ")))
    }
}

/// The pause a failover costs clients, side by side with another operator (`e2e::side_by_side`;
/// bench/README.md, "Side by side"): `SIDE_RUNS` (3) graceful deletes of the pod that serves slot
/// 0 as primary, with a writer running. Without `SIDE_NAMESPACE`, on a cluster of this operator
/// made for the run (`SIDE_SPEC`, a 3×1 by default); with it, on whatever Valkey cluster that
/// namespace's pods form (`SIDE_SELECTOR` narrows them, `SIDE_PASSWORD` is the `default`
/// user's), labelled `SIDE_OPERATOR`. Each operator's figures replace its earlier ones in
/// `bench/results/failover-side-by-side.json`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_failover_side_by_side() -> Result<()> {
    use e2e::side_by_side::{self, Figures, Target};
    let runs: usize = std::env::var("SIDE_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let client = e2e::client().await?;
    let mut ours = None;
    let (operator, target) = match std::env::var("SIDE_NAMESPACE") {
        Ok(namespace) => (
            std::env::var("SIDE_OPERATOR").unwrap_or_else(|_| namespace.clone()),
            Target {
                namespace,
                selector: std::env::var("SIDE_SELECTOR").ok(),
                password: std::env::var("SIDE_PASSWORD").ok(),
            },
        ),
        Err(_) => {
            let spec =
                std::env::var("SIDE_SPEC").unwrap_or_else(|_| "{shards: 3, replicas: 1}".into());
            let c = ClusterFixture::start("side", "side", &spec).await?;
            c.wait_ready(Duration::from_secs(300)).await?;
            let target = Target {
                namespace: c.ns.name.clone(),
                selector: None,
                password: c.password().await?,
            };
            ours = Some(c);
            let label = std::env::var("SIDE_OPERATOR").unwrap_or_else(|_| "this operator".into());
            (label, target)
        }
    };
    let mut all = Vec::new();
    for run in 1..=runs {
        let figures = side_by_side::run(&client, &target).await?;
        eprintln!("{operator}, run {run}: {figures:?}");
        all.push(figures);
    }
    drop(ours);
    let figures = Figures::of(&operator, all);
    eprintln!(
        "{operator}: median longest gap {:.2} s, median healed {:.1} s",
        figures.median_longest_gap_seconds, figures.median_healed_seconds
    );
    let path = e2e::repo_root().join("bench/results/failover-side-by-side.json");
    let mut every: Vec<Figures> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    every.retain(|f| f.operator != operator);
    every.push(figures);
    let text = serde_json::to_string_pretty(&every)
        .map_err(|e| e2e::E2eError::Check(format!("failover-side-by-side.json: {e}")))?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| e2e::E2eError::Check(format!("{}: {e}", path.display())))?;
    Ok(())
}

/// The fleet (`e2e::fleet`): `FLEET_CLUSTERS` ValkeyClusters of three members (real servers)
/// under one node-controller and one cluster-controller process, then `FLEET_SIMULATED`
/// ValkeyNodes on a simulated node under the node-controller alone: time to Ready, memory, CPU
/// and API requests at rest, the requests to create one more cluster, and the time for a spec
/// change to reach every workload. Writes `bench/results/fleet.json` and its section of
/// `docs/benchmarks.md` after each part, so that a failure of the second keeps the first's.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_fleet() -> Result<()> {
    use e2e::fleet::{Profile, real, report, simulated};
    let profile = Profile::from_env();
    let publish = |report: &report::Report| -> Result<()> {
        report::write(&e2e::repo_root(), report)?;
        println!("{}", report::markdown(report));
        Ok(())
    };
    let real = match profile.clusters {
        0 => None,
        _ => Some(real::run(&profile).await?),
    };
    publish(&report::build(&profile, real.clone(), None))?;
    let simulated = match profile.simulated {
        0 => None,
        _ => Some(simulated::run(&profile).await?),
    };
    publish(&report::build(&profile, real, simulated))
}

/// Backup and restore (`e2e::backup_bench`): a ValkeyBackup of a filled 3×1 cluster beside
/// `valkey-cli --rdb` of each shard, and a cluster restored from it beside a valkey-server of the
/// host loading each shard's snapshot (and an empty cluster formed), as ratios of one run; every
/// key read back. Sizes from `BENCH_BACKUP_KEYS` (default 1,000,000; 100,000 for a quick run),
/// `BENCH_BACKUP_VALUE_BYTES`, `BENCH_BACKUP_SHARDS`, `BENCH_SEED`. Writes
/// `bench/results/backup.json` and its section of `docs/benchmarks.md`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_backup() -> Result<()> {
    use e2e::backup_bench::{Profile, markdown, run, write};
    let report = run(&Profile::from_env()).await?;
    println!("{}", markdown(&report));
    write(&e2e::repo_root(), &report)
}
