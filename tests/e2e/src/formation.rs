//! Formation, split (`make bench`, `bench_formation`): from the apply to every member's pod Ready
//! (the pods' time: scheduling, process start, probes), then to every ValkeyNode reporting ready
//! (the node-controller's), then to the cluster's status Ready (the cluster-controller's). The
//! cluster-controller's time is traced pass by pass from its own log (`--log-format json`, one
//! `pass` line per pass that did or awaited something: where its time went and when it asked to
//! look again), so a slow formation says whether the time went in passes or between them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use valkey_api::v1alpha1::{ClusterState, ValkeyCluster, ValkeyNode};

use crate::cluster::ClusterFixture;
use crate::record::{Record, Version};
use crate::{E2eError, Result};

/// The cluster-controller's flags for a traced run: its log as JSON lines.
pub const TRACED_FLAGS: &[&str] = &["--log-format", "json"];

/// One pass of the cluster-controller, from its `pass` log line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PassTrace {
    /// When the pass ended, after every pod was Ready (negative: before).
    pub ended_s: f64,
    pub total_ms: u64,
    /// Kubernetes side: Secrets, member objects, Services, status.
    pub kube_ms: u64,
    pub observe_ms: u64,
    pub decide_ms: u64,
    pub act_ms: u64,
    /// Watching a short wait settle within the pass.
    pub settle_ms: u64,
    /// Valkey steps the pass took.
    pub steps: u64,
    pub looks: u64,
    /// The pass's last decision.
    pub decision: String,
    /// When it asked to look again (a watch event may bring the next pass sooner).
    pub requeue_ms: u64,
}

/// One formation, measured.
#[derive(Debug, Clone, Serialize)]
pub struct Formation {
    pub spec: String,
    pub members: usize,
    pub run: usize,
    /// Apply → every member's pod Ready.
    pub pods_ready_s: f64,
    /// Every pod Ready → every ValkeyNode ready (the node-controller's report).
    pub nodes_ready_after_pods_s: f64,
    /// Every pod Ready → the cluster's status Ready: the operator's time.
    pub operator_s: f64,
    /// The cluster-controller's passes that ended between the apply and the status Ready.
    pub passes: Vec<PassTrace>,
}

impl Formation {
    /// The passes that ended after every pod was Ready: the operator's time.
    pub fn operator_passes(&self) -> impl Iterator<Item = &PassTrace> {
        self.passes.iter().filter(|p| p.ended_s >= 0.0)
    }

    /// Of the operator's time, how much went in its passes (the rest went between them).
    pub fn in_passes_s(&self) -> f64 {
        self.operator_passes()
            .map(|p| p.total_ms as f64 / 1000.0)
            .sum()
    }

    /// Of the time in passes, how much went watching a short wait on Valkey end (a handshake, a
    /// replica's first sync, `cluster_state:ok` after Valkey's rejoin delay).
    pub fn settling_s(&self) -> f64 {
        self.operator_passes()
            .map(|p| p.settle_ms as f64 / 1000.0)
            .sum()
    }
}

/// Forms a cluster of `spec` (`members` pods) in a namespace of its own, with the controllers
/// the fixture starts, and measures it. The namespace goes when the fixture drops.
pub async fn measure(spec: &str, members: usize, run: usize) -> Result<Formation> {
    let c = ClusterFixture::prepare_with("bench-form", "form", TRACED_FLAGS).await?;
    let selector = Some("valkey.io/cluster=form");
    let pods = Record::start(c.ns.api::<Pod>(), selector).await?;
    let nodes = Record::start(c.ns.api::<ValkeyNode>(), selector).await?;
    let statuses = Record::start(c.api(), None).await?;
    let clock = Clock::now();
    let applied = Instant::now();
    c.apply(spec).await?;
    c.wait_ready(Duration::from_secs(300)).await?;
    let ready = statuses
        .versions()
        .into_iter()
        .find(|v: &Version<ValkeyCluster>| {
            v.object
                .status
                .as_ref()
                .is_some_and(|s| s.state == Some(ClusterState::Ready))
        });
    if let Some(ready) = &ready {
        statuses
            .caught_up(&ready.object, Duration::from_secs(10))
            .await?;
    }
    let pods_at = first_all(&pods.versions(), members, crate::pod_ready);
    let nodes_at = first_all(&nodes.versions(), members, |n: &ValkeyNode| {
        n.status.as_ref().is_some_and(|s| s.ready)
    });
    let (Some(pods_at), Some(nodes_at), Some(ready)) = (pods_at, nodes_at, ready) else {
        return Err(E2eError::Check(format!(
            "{spec}: the records hold no moment with every pod Ready, every ValkeyNode ready and the cluster Ready"
        )));
    };
    let log = c.cluster_controller.log_text()?;
    let passes = passes(&log, clock.wall(pods_at), clock.wall(ready.at));
    Ok(Formation {
        spec: spec_label(spec),
        members,
        run,
        pods_ready_s: pods_at.saturating_duration_since(applied).as_secs_f64(),
        nodes_ready_after_pods_s: seconds_between(pods_at, nodes_at),
        operator_s: seconds_between(pods_at, ready.at),
        passes,
    })
}

/// `{shards: 3, replicas: 1}` → `3x1`.
fn spec_label(spec: &str) -> String {
    let number = |key: &str| {
        spec.split(key)
            .nth(1)
            .and_then(|rest| {
                rest.trim_start_matches([':', ' '])
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "?".into())
    };
    format!("{}x{}", number("shards"), number("replicas"))
}

/// `b - a` in seconds, negative when `b` came first.
fn seconds_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64()
    } else {
        -(a - b).as_secs_f64()
    }
}

/// The first moment the record held `members` objects, every one of them `ready`.
pub fn first_all<K: kube::Resource + Clone>(
    versions: &[Version<K>],
    members: usize,
    ready: impl Fn(&K) -> bool,
) -> Option<Instant> {
    let mut state: BTreeMap<String, bool> = BTreeMap::new();
    versions.iter().find_map(|v| {
        state.insert(v.name(), !v.deleted && ready(&v.object));
        (state.len() == members && state.values().all(|r| *r)).then_some(v.at)
    })
}

/// The test process's monotonic clock tied to the wall clock once, so that moments the records
/// saw can be compared with the controller's log timestamps.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn wall(&self, at: Instant) -> SystemTime {
        if at >= self.instant {
            self.wall + (at - self.instant)
        } else {
            self.wall - (self.instant - at)
        }
    }
}

/// The `pass` lines of a JSON log that ended by `until`, their end relative to `origin`.
pub fn passes(log: &str, origin: SystemTime, until: SystemTime) -> Vec<PassTrace> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| entry["fields"]["message"] == "pass")
        .filter_map(|entry| {
            let at = parse_timestamp(entry["timestamp"].as_str()?)?;
            if at > until {
                return None;
            }
            let f = &entry["fields"];
            let n = |key: &str| {
                f[key]
                    .as_u64()
                    .or_else(|| f[key].as_str().and_then(|s| s.parse().ok()))
                    .unwrap_or(0)
            };
            let ended_s = match at.duration_since(origin) {
                Ok(after) => after.as_secs_f64(),
                Err(before) => -before.duration().as_secs_f64(),
            };
            Some(PassTrace {
                ended_s,
                total_ms: n("total_ms"),
                kube_ms: n("kube_ms"),
                observe_ms: n("observe_ms"),
                decide_ms: n("decide_ms"),
                act_ms: n("act_ms"),
                settle_ms: n("settle_ms"),
                steps: n("steps"),
                looks: n("looks"),
                decision: f["decision"].as_str().unwrap_or_default().to_owned(),
                requeue_ms: n("requeue_ms"),
            })
        })
        .collect()
}

/// An RFC 3339 timestamp as the controllers' JSON log writes it (`2026-12-02T14:40:01.123456Z`).
fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    let micros = u64::try_from(at.timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// The middle value (the lower of the two middle ones for an even count); `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len().saturating_sub(1) / 2).copied()
}

/// The goal for a 3×1 cluster's operator time.
pub const GOAL_3X1_OPERATOR_S: f64 = 2.0;

/// Everything one run of the benchmark measured, as `bench/results/formation.json` holds it.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub benchmark: &'static str,
    pub command: String,
    pub machine: crate::resharding::report::Machine,
    pub runs: Vec<Formation>,
}

/// The report's markdown: medians per spec, then the trace of one 3×1 formation.
pub fn markdown(figures: &Figures) -> String {
    let mut out = vec![
        "## Formation, split".to_owned(),
        String::new(),
        format!(
            "From the apply to every member's pod Ready (the pods' time), then to every ValkeyNode \
             ready (the node-controller's report), then to the cluster's status Ready: the \
             operator's time is from every pod Ready to the status Ready. Medians of the runs; \
             machine: {}, {} cores. Command: `{}`. Raw figures and every pass of every run: \
             [bench/results/formation.json](../bench/results/formation.json).",
            figures.machine.cpu, figures.machine.cores, figures.command
        ),
        String::new(),
        "| spec | runs | pods Ready (s) | ValkeyNodes ready after the pods (s) | operator's time (s) | of it in passes (s) | of that, watching Valkey settle (s) | passes |".to_owned(),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |".to_owned(),
    ];
    let mut specs: Vec<&str> = figures.runs.iter().map(|r| r.spec.as_str()).collect();
    specs.dedup();
    for spec in &specs {
        let runs: Vec<&Formation> = figures.runs.iter().filter(|r| r.spec == *spec).collect();
        let m = |f: &dyn Fn(&Formation) -> f64| {
            median(runs.iter().map(|r| f(r)).collect()).unwrap_or(f64::NAN)
        };
        out.push(format!(
            "| {spec} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} |",
            runs.len(),
            m(&|r| r.pods_ready_s),
            m(&|r| r.nodes_ready_after_pods_s),
            m(&|r| r.operator_s),
            m(&|r| r.in_passes_s()),
            m(&|r| r.settling_s()),
            m(&|r| r.operator_passes().count() as f64),
        ));
    }
    let mut three = figures.runs.iter().filter(|r| r.spec == "3x1");
    if let Some(operator) = median(three.clone().map(|r| r.operator_s).collect()) {
        out.push(String::new());
        out.push(format!(
            "The goal, under {GOAL_3X1_OPERATOR_S} s of operator's time for 3×1: {:.2} s, {}.",
            operator,
            if operator < GOAL_3X1_OPERATOR_S {
                "met".to_owned()
            } else {
                format!("not met ({:.1}× the goal)", operator / GOAL_3X1_OPERATOR_S)
            }
        ));
    }
    out.push(String::new());
    out.push(format!(
        "Where the operator's time goes: its own steps (introductions, slots, replicas) take a \
         fraction of a second once the pods are Ready; most of the rest is Valkey's. A primary \
         keeps `cluster_state:fail` for its rejoin delay, `cluster-node-timeout` bounded to \
         0.5–5 s, after it last counted itself in a minority, which at formation is until \
         slots are first assigned (Valkey's `clusterUpdateState`; the operator's default \
         `cluster-node-timeout` is 5000 ms, so 5 s), and clients get `CLUSTERDOWN` until then. \
         Ready waits for it, so the {GOAL_3X1_OPERATOR_S} s goal cannot be met by the operator \
         alone: it would take a shorter `cluster-node-timeout`, which also makes failure \
         detection jumpier. The passes' `settle` column is that wait, watched."
    ));
    if let Some(run) = three.next_back() {
        out.push(String::new());
        out.push(format!(
            "### The passes of one 3×1 formation (run {})",
            run.run
        ));
        out.push(String::new());
        out.push(
            "Each row is one pass of the cluster-controller that did or awaited something, by when \
             it ended (0 is the moment every pod was Ready). `kube`: its Kubernetes side (Secrets, \
             member objects, Services, status); `observe`, `decide`, `act`: its Valkey side, over \
             its looks; `settle`: watching a short wait end within the pass; `requeue`: when it \
             asked to look again (a watch event may bring the next pass sooner)."
                .to_owned(),
        );
        out.push(String::new());
        out.push("| ended (s) | total (ms) | kube | observe | decide | act | settle | looks | steps | last decision | requeue (ms) |".to_owned());
        out.push(
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
                .to_owned(),
        );
        for p in &run.passes {
            out.push(format!(
                "| {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.ended_s,
                p.total_ms,
                p.kube_ms,
                p.observe_ms,
                p.decide_ms,
                p.act_ms,
                p.settle_ms,
                p.looks,
                p.steps,
                p.decision,
                p.requeue_ms
            ));
        }
    }
    out.join("\n")
}

/// Writes the figures and the report's section.
pub fn publish(root: &Path, figures: &Figures) -> Result<()> {
    crate::bench::publish(root, "formation", figures, &markdown(figures))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"timestamp":"2026-12-02T14:40:00.500000Z","level":"INFO","fields":{"message":"pass","steps":0,"looks":1,"total_ms":12,"kube_ms":10,"observe_ms":2,"decide_ms":0,"act_ms":0,"settle_ms":0,"requeue_ms":2000,"decision":"WaitingForNodes"},"target":"cluster_controller::cluster::reconcile"}
not json at all
{"timestamp":"2026-12-02T14:40:01.250000Z","level":"INFO","fields":{"message":"the step failed"},"target":"x"}
{"timestamp":"2026-12-02T14:40:01.750000Z","level":"INFO","fields":{"message":"pass","steps":4,"looks":6,"total_ms":730,"kube_ms":40,"observe_ms":80,"decide_ms":1,"act_ms":210,"settle_ms":400,"requeue_ms":500,"decision":"ReplicaSyncing"},"target":"cluster_controller::cluster::reconcile"}
{"timestamp":"2026-12-02T14:40:09.000000Z","level":"INFO","fields":{"message":"pass","steps":0,"looks":1,"total_ms":5,"kube_ms":3,"observe_ms":2,"decide_ms":0,"act_ms":0,"settle_ms":0,"requeue_ms":15000,"decision":"Steady"},"target":"cluster_controller::cluster::reconcile"}"#;

    fn at(text: &str) -> SystemTime {
        parse_timestamp(text).unwrap()
    }

    #[test]
    fn passes_are_read_from_the_log_relative_to_the_pods_ready_moment() {
        let passes = passes(LOG, at("2026-12-02T14:40:01Z"), at("2026-12-02T14:40:02Z"));
        assert_eq!(passes.len(), 2, "{passes:?}");
        assert_eq!(passes[0].ended_s, -0.5);
        assert_eq!(passes[0].decision, "WaitingForNodes");
        assert_eq!(passes[1].ended_s, 0.75);
        assert_eq!(passes[1].steps, 4);
        assert_eq!(passes[1].settle_ms, 400);
        assert_eq!(passes[1].requeue_ms, 500);
    }

    #[test]
    fn the_operators_time_counts_only_passes_after_the_pods() {
        let formation = Formation {
            spec: "3x1".into(),
            members: 6,
            run: 1,
            pods_ready_s: 10.0,
            nodes_ready_after_pods_s: 0.3,
            operator_s: 1.0,
            passes: passes(LOG, at("2026-12-02T14:40:01Z"), at("2026-12-02T14:40:02Z")),
        };
        assert_eq!(formation.operator_passes().count(), 1);
        assert!((formation.in_passes_s() - 0.73).abs() < 1e-9);
        let figures = Figures {
            benchmark: "formation",
            command: "make bench".into(),
            machine: crate::resharding::report::machine(),
            runs: vec![formation],
        };
        let md = markdown(&figures);
        assert!(
            md.contains("| 3x1 | 1 | 10.0 | 0.30 | 1.00 | 0.73 | 0.40 | 1 |"),
            "{md}"
        );
        assert!(md.contains("1.00 s, met"), "{md}");
        assert!(
            md.contains("| 0.75 | 730 | 40 | 80 | 1 | 210 | 400 | 6 | 4 | ReplicaSyncing | 500 |"),
            "{md}"
        );
    }

    #[test]
    fn labels_and_medians() {
        assert_eq!(spec_label("{shards: 10, replicas: 1}"), "10x1");
        assert_eq!(spec_label("{shards: 1, replicas: 0}"), "1x0");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
    }
}
