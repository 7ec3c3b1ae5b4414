//! The charts of each benchmark, drawn from its `bench/results/<name>.json` alone, so that a
//! benchmark's run and a re-rendering of the committed figures draw the same charts. Each chart
//! is `docs/charts/<chart>.svg`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::charts::{self, Bars, Goal, Series};
use crate::fleet::rest::rss_goal_mib;
use crate::{E2eError, Result};

/// The benchmarks whose results have charts, by the name of their results file.
pub const BENCHMARKS: [&str; 6] = [
    "engine-scale",
    "formation",
    "resharding",
    "failover",
    "fleet",
    "backup",
];

/// One chart to write: `docs/charts/<file>.svg`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub file: String,
    pub bars: Bars,
}

impl Chart {
    /// The markdown image of the chart, from `docs/`.
    pub fn link(&self) -> String {
        format!("![{}](charts/{}.svg)", self.bars.title, self.file)
    }
}

fn parse<'a, T: Deserialize<'a>>(name: &str, json: &'a str) -> Result<T> {
    serde_json::from_str(json)
        .map_err(|e| E2eError::Check(format!("bench/results/{name}.json: {e}")))
}

/// The charts of benchmark `name` from its results' text.
pub fn charts_of(name: &str, json: &str) -> Result<Vec<Chart>> {
    match name {
        "resharding" => resharding(&parse(name, json)?),
        "failover" => failover(&parse::<Vec<Failover>>(name, json)?),
        "engine-scale" => engine_scale(&parse(name, json)?),
        "formation" => formation(&parse(name, json)?),
        "fleet" => fleet(&parse(name, json)?),
        "backup" => backup(&parse(name, json)?),
        _ => Ok(Vec::new()),
    }
}

/// Writes the charts of benchmark `name` from `bench/results/<name>.json` under `root`: none
/// when the file is missing (a benchmark not run yet).
pub fn write(root: &Path, name: &str) -> Result<Vec<Chart>> {
    let io = |what: &Path, e: std::io::Error| E2eError::Check(format!("{}: {e}", what.display()));
    let json_path = root.join(format!("bench/results/{name}.json"));
    let json = match std::fs::read_to_string(&json_path) {
        Ok(json) => json,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&json_path, e)),
    };
    let drawn = charts_of(name, &json)?;
    let folder = root.join("docs/charts");
    std::fs::create_dir_all(&folder).map_err(|e| io(&folder, e))?;
    for chart in &drawn {
        let svg = charts::svg(&chart.bars).map_err(E2eError::Check)?;
        let path = chart_path(root, &chart.file);
        std::fs::write(&path, svg).map_err(|e| io(&path, e))?;
    }
    Ok(drawn)
}

pub fn chart_path(root: &Path, file: &str) -> PathBuf {
    root.join(format!("docs/charts/{file}.svg"))
}

/// The charts of every benchmark whose results are there, each shown in its section of
/// `docs/benchmarks.md` (a section written before its benchmark had a chart gets its image).
pub fn write_all(root: &Path) -> Result<Vec<Chart>> {
    let mut all = Vec::new();
    for name in BENCHMARKS {
        let charts = write(root, name)?;
        super::link_charts(root, name, &charts)?;
        all.extend(charts);
    }
    Ok(all)
}

/// Series in the order their names first appear, each with a value (or none) per category.
fn series_of(names: &[String], categories: usize) -> Vec<Series> {
    names
        .iter()
        .map(|name| Series {
            name: name.clone(),
            values: vec![None; categories],
        })
        .collect()
}

fn push_name(names: &mut Vec<String>, name: &str) -> usize {
    match names.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            names.push(name.to_owned());
            names.len() - 1
        }
    }
}

// ---- resharding --------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Resharding {
    versions: Vec<ReshardingVersion>,
}

#[derive(Deserialize)]
struct ReshardingVersion {
    valkey_version: String,
    steps: Vec<ReshardingStep>,
}

#[derive(Deserialize)]
struct ReshardingStep {
    from: u32,
    to: u32,
    ways: Vec<ReshardingWay>,
}

#[derive(Deserialize)]
struct ReshardingWay {
    way: String,
    seconds: f64,
    mb_per_s: f64,
}

/// Seconds and MB/s per way, a group per version and direction.
fn resharding(r: &Resharding) -> Result<Vec<Chart>> {
    let mut categories = Vec::new();
    let mut ways: Vec<String> = Vec::new();
    let mut cells = Vec::new();
    for v in &r.versions {
        for step in &v.steps {
            categories.push(format!(
                "Valkey {}, {} → {}",
                v.valkey_version, step.from, step.to
            ));
            for w in &step.ways {
                cells.push((categories.len() - 1, push_name(&mut ways, &w.way), w));
            }
        }
    }
    let (mut seconds, mut rate) = (
        series_of(&ways, categories.len()),
        series_of(&ways, categories.len()),
    );
    for (category, way, w) in cells {
        seconds[way].values[category] = Some(w.seconds);
        rate[way].values[category] = Some(w.mb_per_s);
    }
    Ok(vec![
        Chart {
            file: "resharding-seconds".into(),
            bars: Bars {
                title: "Resharding: seconds from the request to the final layout (less is better)"
                    .into(),
                unit: "seconds".into(),
                categories: categories.clone(),
                series: seconds,
                goals: Vec::new(),
            },
        },
        Chart {
            file: "resharding-mb-per-s".into(),
            bars: Bars {
                title: "Resharding: MB of keys and values moved per second (more is better)".into(),
                unit: "MB/s".into(),
                categories,
                series: rate,
                goals: Vec::new(),
            },
        },
    ])
}

// ---- failover ----------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Failover {
    valkey: String,
    fault: String,
    longest_gap_s: f64,
    ready_after_s: f64,
}

/// The longest write gap and the time to Ready: a group per fault, a bar per Valkey version.
fn failover(runs: &[Failover]) -> Result<Vec<Chart>> {
    let (mut faults, mut versions) = (Vec::new(), Vec::new());
    let cells: Vec<(usize, usize, &Failover)> = runs
        .iter()
        .map(|r| {
            (
                push_name(&mut faults, &r.fault),
                push_name(&mut versions, &format!("Valkey {}", r.valkey)),
                r,
            )
        })
        .collect();
    let (mut gap, mut ready) = (
        series_of(&versions, faults.len()),
        series_of(&versions, faults.len()),
    );
    for (fault, version, r) in cells {
        gap[version].values[fault] = Some(r.longest_gap_s);
        ready[version].values[fault] = Some(r.ready_after_s);
    }
    Ok(vec![
        Chart {
            file: "failover-write-gap".into(),
            bars: Bars {
                title: "Failover: the writer's longest gap between acknowledged writes".into(),
                unit: "seconds".into(),
                categories: faults.clone(),
                series: gap,
                goals: Vec::new(),
            },
        },
        Chart {
            file: "failover-ready".into(),
            bars: Bars {
                title: "Failover: from the fault's end to the cluster Ready".into(),
                unit: "seconds".into(),
                categories: faults,
                series: ready,
                goals: Vec::new(),
            },
        },
    ])
}

// ---- engine-scale ------------------------------------------------------------------------------

#[derive(Deserialize)]
struct EngineScale {
    profile: String,
    results: Vec<EnginePass>,
}

#[derive(Deserialize)]
struct EnginePass {
    members: u64,
    peak_heap_bytes: f64,
    observation_heap_bytes: f64,
    observe_cpu_seconds: f64,
    decide_cpu_seconds: f64,
}

/// The goals of the issue: a 990-member pass under 64 MiB of peak heap and 1 s of CPU.
const HEAP_GOAL_MIB: f64 = 64.0;
const CPU_GOAL_S: f64 = 1.0;

/// Peak heap and CPU time per member count, with the goals.
fn engine_scale(e: &EngineScale) -> Result<Vec<Chart>> {
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    let categories: Vec<String> = e
        .results
        .iter()
        .map(|r| format!("{} members", r.members))
        .collect();
    let series = |name: &str, value: &dyn Fn(&EnginePass) -> f64| Series {
        name: name.into(),
        values: e.results.iter().map(|r| Some(value(r))).collect(),
    };
    Ok(vec![
        Chart {
            file: "engine-scale-heap".into(),
            bars: Bars {
                title: format!("The engine's pass: heap ({} build)", e.profile),
                unit: "MiB".into(),
                categories: categories.clone(),
                series: vec![
                    series("peak during the pass", &|r| mib(r.peak_heap_bytes)),
                    series(
                        "held by the observation",
                        &|r| mib(r.observation_heap_bytes),
                    ),
                ],
                goals: vec![Goal {
                    name: format!("goal for the peak: {HEAP_GOAL_MIB} MiB"),
                    value: HEAP_GOAL_MIB,
                }],
            },
        },
        Chart {
            file: "engine-scale-cpu".into(),
            bars: Bars {
                title: format!("The engine's pass: CPU time ({} build)", e.profile),
                unit: "CPU seconds".into(),
                categories,
                series: vec![
                    series("observe", &|r| r.observe_cpu_seconds),
                    series("decide", &|r| r.decide_cpu_seconds),
                    series("the pass", &|r| {
                        r.observe_cpu_seconds + r.decide_cpu_seconds
                    }),
                ],
                goals: vec![Goal {
                    name: format!("goal for the pass: {CPU_GOAL_S} s"),
                    value: CPU_GOAL_S,
                }],
            },
        },
    ])
}

// ---- formation ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Formation {
    runs: Vec<FormationRun>,
}

#[derive(Deserialize)]
struct FormationRun {
    spec: String,
    pods_ready_s: f64,
    operator_s: f64,
}

/// The issue's goal for the operator's own time in forming a 3×1 cluster.
const OPERATOR_GOAL_S: f64 = 2.0;

/// The middle value (the mean of the two middle ones for an even count); `None` for none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => values.get(n / 2).copied(),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// Per spec, the median of its runs' pods' time (apply to every pod Ready) and operator's time
/// (from there to the cluster Ready).
fn formation(f: &Formation) -> Result<Vec<Chart>> {
    let mut specs = Vec::new();
    for r in &f.runs {
        push_name(&mut specs, &r.spec);
    }
    let medians = |value: fn(&FormationRun) -> f64| -> Vec<Option<f64>> {
        specs
            .iter()
            .map(|spec| {
                median(
                    f.runs
                        .iter()
                        .filter(|r| &r.spec == spec)
                        .map(value)
                        .collect(),
                )
            })
            .collect()
    };
    Ok(vec![Chart {
        file: "formation".into(),
        bars: Bars {
            title: "Formation: each spec's median run".into(),
            unit: "seconds".into(),
            categories: specs.clone(),
            series: vec![
                Series {
                    name: "pods' time: apply to every pod Ready".into(),
                    values: medians(|r| r.pods_ready_s),
                },
                Series {
                    name: "operator's time: then to the cluster Ready".into(),
                    values: medians(|r| r.operator_s),
                },
            ],
            goals: vec![Goal {
                name: format!("goal for the operator's time (3x1): {OPERATOR_GOAL_S} s"),
                value: OPERATOR_GOAL_S,
            }],
        },
    }])
}

// ---- fleet -------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Fleet {
    real: Option<RealFleet>,
    simulated: Option<SimulatedFleet>,
}

#[derive(Deserialize)]
struct RealFleet {
    valkey_nodes: u64,
    at_rest: Vec<AtRest>,
}

#[derive(Deserialize)]
struct SimulatedFleet {
    valkey_nodes: u64,
    at_rest: AtRest,
}

#[derive(Deserialize)]
struct AtRest {
    controller: String,
    peak_rss_mib: f64,
    steady_rss_mib: f64,
    requests_per_minute: PerMinute,
}

#[derive(Deserialize)]
struct PerMinute {
    reads: f64,
    writes: f64,
}

/// Memory and API requests at rest, a group per controller and part of the fleet ("node-controller,
/// 300 real ValkeyNodes").
fn fleet(f: &Fleet) -> Result<Vec<Chart>> {
    let real = f.real.iter().flat_map(|r| {
        r.at_rest.iter().map(move |c| {
            (
                format!("{}, {} real ValkeyNodes", c.controller, r.valkey_nodes),
                c,
            )
        })
    });
    let simulated = f.simulated.iter().map(|s| {
        let c = &s.at_rest;
        (format!("{}, {} simulated", c.controller, s.valkey_nodes), c)
    });
    let rows: Vec<(String, &AtRest)> = real.chain(simulated).collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let categories: Vec<String> = rows.iter().map(|(name, _)| name.clone()).collect();
    let series = |name: &str, value: &dyn Fn(&AtRest) -> f64| Series {
        name: name.into(),
        values: rows.iter().map(|(_, c)| Some(value(c))).collect(),
    };
    Ok(vec![
        Chart {
            file: "fleet-rss".into(),
            bars: Bars {
                title: "Fleet: each controller's memory (release build)".into(),
                unit: "MiB resident".into(),
                categories: categories.clone(),
                series: vec![
                    series("peak", &|c| c.peak_rss_mib),
                    series("steady at rest", &|c| c.steady_rss_mib),
                ],
                // One line for every bar: the goal over 300 ValkeyNodes (the larger fleets'
                // goals are in the fleet section's tables).
                goals: vec![Goal {
                    name: format!("goal at 300 ValkeyNodes: {} MiB", rss_goal_mib(300)),
                    value: rss_goal_mib(300),
                }],
            },
        },
        Chart {
            file: "fleet-requests".into(),
            bars: Bars {
                title: "Fleet: each controller's API requests at rest (goal: 0 writes)".into(),
                unit: "requests a minute".into(),
                categories,
                series: vec![
                    series("reads", &|c| c.requests_per_minute.reads),
                    series("writes", &|c| c.requests_per_minute.writes),
                ],
                goals: Vec::new(),
            },
        },
    ])
}

// ---- backup ------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Backup {
    ways: Vec<BackupWay>,
}

#[derive(Deserialize)]
struct BackupWay {
    operation: String,
    way: String,
    seconds: f64,
    bytes: u64,
    mb_per_s: f64,
}

/// Seconds and MB/s of each way of each operation, a bar each: the operator's in one colour,
/// the references' in another. MB/s only for the ways that move snapshots.
fn backup(b: &Backup) -> Result<Vec<Chart>> {
    let chart = |ways: Vec<&BackupWay>, value: fn(&BackupWay) -> f64| {
        let categories: Vec<String> = ways
            .iter()
            .map(|w| format!("{}: {}", w.operation, w.way))
            .collect();
        let of = |operator: bool| Series {
            name: if operator {
                "the operator".into()
            } else {
                "by hand (valkey-cli, valkey-server) or an empty cluster".into()
            },
            values: ways
                .iter()
                .map(|w| (operator == w.way.starts_with("operator")).then(|| value(w)))
                .collect(),
        };
        (categories, vec![of(true), of(false)])
    };
    let (categories, series) = chart(b.ways.iter().collect(), |w| w.seconds);
    let (rate_categories, rate_series) =
        chart(b.ways.iter().filter(|w| w.bytes > 0).collect(), |w| {
            w.mb_per_s
        });
    Ok(vec![
        Chart {
            file: "backup-seconds".into(),
            bars: Bars {
                title: "Backup and restore: seconds (less is better)".into(),
                unit: "seconds".into(),
                categories,
                series,
                goals: Vec::new(),
            },
        },
        Chart {
            file: "backup-mb-per-s".into(),
            bars: Bars {
                title: "Backup and restore: MB of snapshots per second (more is better)".into(),
                unit: "MB/s".into(),
                categories: rate_categories,
                series: rate_series,
                goals: Vec::new(),
            },
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resharding_groups_by_version_and_direction_and_a_way_a_version_lacks_has_no_bar() {
        let json = r#"{"versions": [
            {"valkey_version": "9.1.2", "steps": [{"from": 3, "to": 4, "ways": [
                {"way": "operator", "seconds": 14.5, "mb_per_s": 22.9},
                {"way": "valkey-cli-atomic", "seconds": 16.5, "mb_per_s": 20.3}]}]},
            {"valkey_version": "8.0.1", "steps": [{"from": 4, "to": 3, "ways": [
                {"way": "operator", "seconds": 57.2, "mb_per_s": 4.7}]}]}]}"#;
        let charts = charts_of("resharding", json).expect("charts");
        assert_eq!(charts.len(), 2);
        let seconds = &charts[0].bars;
        assert_eq!(
            seconds.categories,
            ["Valkey 9.1.2, 3 → 4", "Valkey 8.0.1, 4 → 3"]
        );
        assert_eq!(seconds.series[0].values, [Some(14.5), Some(57.2)]);
        assert_eq!(seconds.series[1].name, "valkey-cli-atomic");
        assert_eq!(seconds.series[1].values, [Some(16.5), None]);
        assert_eq!(charts[1].bars.series[0].values, [Some(22.9), Some(4.7)]);
    }

    #[test]
    fn failover_groups_by_fault_with_a_bar_per_version() {
        let json = r#"[
            {"valkey": "9.1", "fault": "pod deleted", "longest_gap_s": 0.7, "ready_after_s": 6.8},
            {"valkey": "9.1", "fault": "killed", "longest_gap_s": 3.7, "ready_after_s": 0.0},
            {"valkey": "8.0", "fault": "pod deleted", "longest_gap_s": 4.7, "ready_after_s": 9.9}]"#;
        let charts = charts_of("failover", json).expect("charts");
        let gap = &charts[0].bars;
        assert_eq!(gap.categories, ["pod deleted", "killed"]);
        assert_eq!(gap.series[0].name, "Valkey 9.1");
        assert_eq!(gap.series[1].values, [Some(4.7), None]);
        assert_eq!(charts[1].bars.series[0].values, [Some(6.8), Some(0.0)]);
    }

    #[test]
    fn engine_scale_is_in_mib_and_cpu_seconds_with_the_goals() {
        let json = r#"{"profile": "release", "results": [{"members": 990,
            "peak_heap_bytes": 67108864, "observation_heap_bytes": 1048576,
            "observe_cpu_seconds": 0.5, "decide_cpu_seconds": 0.75}]}"#;
        let charts = charts_of("engine-scale", json).expect("charts");
        assert_eq!(charts[0].bars.series[0].values, [Some(64.0)]);
        assert_eq!(charts[0].bars.goals[0].value, 64.0);
        assert_eq!(charts[1].bars.series[2].values, [Some(1.25)]);
        assert_eq!(charts[1].bars.goals[0].value, 1.0);
    }

    #[test]
    fn formation_charts_each_specs_median_in_the_order_of_the_runs() {
        let json = r#"{"runs": [
            {"spec": "1x0", "run": 1, "pods_ready_s": 3.0, "operator_s": 1.0},
            {"spec": "3x1", "run": 1, "pods_ready_s": 9.0, "operator_s": 5.0},
            {"spec": "1x0", "run": 2, "pods_ready_s": 5.0, "operator_s": 2.0},
            {"spec": "3x1", "run": 2, "pods_ready_s": 7.0, "operator_s": 4.0},
            {"spec": "3x1", "run": 3, "pods_ready_s": 8.0, "operator_s": 9.0}],
            "other": "ignored"}"#;
        let charts = charts_of("formation", json).expect("charts");
        let bars = &charts[0].bars;
        assert_eq!(bars.categories, ["1x0", "3x1"]);
        assert_eq!(bars.series[0].values, [Some(4.0), Some(8.0)]);
        assert_eq!(bars.series[1].values, [Some(1.5), Some(5.0)]);
    }

    #[test]
    fn fleet_charts_memory_and_requests_per_controller_and_part() {
        let at_rest = |controller: &str, peak: f64, writes: f64| {
            format!(
                r#"{{"controller": "{controller}", "peak_rss_mib": {peak}, "steady_rss_mib": 20.0,
                "requests_per_minute": {{"reads": 180.0, "writes": {writes}}}}}"#
            )
        };
        let json = format!(
            r#"{{"real": {{"valkey_nodes": 300, "at_rest": [{}, {}]}},
                "simulated": {{"valkey_nodes": 3000, "at_rest": {}}}}}"#,
            at_rest("node-controller", 27.0, 0.0),
            at_rest("cluster-controller", 21.0, 40.0),
            at_rest("node-controller", 82.0, 3.0)
        );
        let charts = charts_of("fleet", &json).expect("charts");
        let rss = &charts[0].bars;
        assert_eq!(
            rss.categories,
            [
                "node-controller, 300 real ValkeyNodes",
                "cluster-controller, 300 real ValkeyNodes",
                "node-controller, 3000 simulated"
            ]
        );
        assert_eq!(rss.series[0].values, [Some(27.0), Some(21.0), Some(82.0)]);
        assert_eq!(rss.goals[0].value, 30.0);
        assert_eq!(
            charts[1].bars.series[1].values,
            [Some(0.0), Some(40.0), Some(3.0)]
        );
        let only_real = r#"{"real": {"valkey_nodes": 3, "at_rest": []}, "simulated": null}"#;
        assert!(charts_of("fleet", only_real).expect("no rows").is_empty());
    }

    #[test]
    fn backup_charts_a_bar_per_way_and_rates_only_where_snapshots_moved() {
        let json = r#"{"ways": [
            {"operation": "backup", "way": "operator", "seconds": 4.0, "bytes": 100, "mb_per_s": 25.0},
            {"operation": "backup", "way": "valkey-cli --rdb", "seconds": 2.0, "bytes": 100, "mb_per_s": 50.0},
            {"operation": "restore", "way": "an empty cluster formed", "seconds": 9.0, "bytes": 0, "mb_per_s": 0.0}]}"#;
        let charts = charts_of("backup", json).expect("charts");
        let seconds = &charts[0].bars;
        assert_eq!(
            seconds.categories,
            [
                "backup: operator",
                "backup: valkey-cli --rdb",
                "restore: an empty cluster formed"
            ]
        );
        assert_eq!(seconds.series[0].values, [Some(4.0), None, None]);
        assert_eq!(seconds.series[1].values, [None, Some(2.0), Some(9.0)]);
        assert_eq!(charts[1].bars.categories.len(), 2);
        assert_eq!(charts[1].bars.series[1].values, [None, Some(50.0)]);
    }

    #[test]
    fn results_not_there_give_no_chart_and_results_of_another_shape_an_error() {
        let root = std::env::temp_dir().join(format!("bench-charts-{}", std::process::id()));
        assert!(write(&root, "formation").expect("no results").is_empty());
        assert!(!root.join("docs/charts").exists());
        assert!(charts_of("formation", r#"{"runs": [{"spec": "3x1"}]}"#).is_err());
    }
}
