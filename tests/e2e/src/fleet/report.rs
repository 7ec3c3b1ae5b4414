//! The fleet benchmark's figures: raw in `bench/results/fleet.json`, and as tables in the
//! `fleet` section of `docs/benchmarks.md`.

use std::path::Path;

use serde::Serialize;

use super::Profile;
use super::api_load::Requests;
use super::real::{ControllerRequests, RealFleet};
use super::rest::ControllerAtRest;
use super::simulated::SimulatedFleet;
use crate::Result;
use crate::resharding::report::{Machine, machine};

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub command: String,
    /// The directory of the controller binaries run (`.../debug` or `.../release`).
    pub binaries: String,
    pub machine: Machine,
    pub profile: Profile,
    pub real: Option<RealFleet>,
    pub simulated: Option<SimulatedFleet>,
}

pub fn build(
    profile: &Profile,
    real: Option<RealFleet>,
    simulated: Option<SimulatedFleet>,
) -> Report {
    Report {
        command: profile.command(),
        binaries: binaries(),
        machine: machine(),
        profile: profile.clone(),
        real,
        simulated,
    }
}

fn binaries() -> String {
    let binary = crate::operator::binary("node-controller");
    binary.parent().unwrap_or(&binary).display().to_string()
}

/// `release` or `debug`, from the binaries' directory.
fn build_profile(binaries: &str) -> &'static str {
    if binaries.ends_with("release") {
        "release"
    } else {
        "debug"
    }
}

fn mib(v: f64) -> String {
    format!("{v:.1}")
}

/// The requests that moved most, `VERB resource n` each, for a table cell.
fn busiest(r: &Requests, per_minute: bool) -> String {
    let mut lines: Vec<(&String, &f64)> = r.by_verb_and_resource.iter().collect();
    lines.sort_by(|a, b| b.1.total_cmp(a.1));
    let shown: Vec<String> = lines
        .iter()
        .take(4)
        .map(|(k, v)| {
            if per_minute {
                format!("{k} {v:.1}")
            } else {
                format!("{k} {v:.0}")
            }
        })
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

/// The peak against the goal for the fleet's size, e.g. `< 150: met (13.2 MiB to spare)`.
fn goal(c: &ControllerAtRest) -> String {
    let goal = c.rss_goal_mib;
    if c.rss_goal_met {
        format!(
            "< {goal:.0}: met ({:.1} MiB to spare)",
            -c.peak_over_goal_mib
        )
    } else {
        format!(
            "< {goal:.0}: not met ({:.1} MiB over)",
            c.peak_over_goal_mib
        )
    }
}

fn rest_rows(out: &mut Vec<String>, at_rest: &[&ControllerAtRest]) {
    out.push("| controller | peak RSS (MiB) | steady RSS (MiB) | of it anonymous + file | peak against the goal (MiB) | CPU s/min | reads/min | writes/min | busiest at rest (per min) |".into());
    out.push("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |".into());
    for c in at_rest {
        out.push(format!(
            "| {} | {} | {} | {} + {} | {} | {:.2} | {:.1} | {:.1} | {} |",
            c.controller,
            mib(c.peak_rss_mib),
            mib(c.steady_rss_mib),
            mib(c.steady_anonymous_mib),
            mib(c.steady_file_mib),
            goal(c),
            c.cpu_seconds_per_minute,
            c.requests_per_minute.reads,
            c.requests_per_minute.writes,
            busiest(&c.requests_per_minute, true)
        ));
    }
}

fn request_rows(out: &mut Vec<String>, requests: &[ControllerRequests]) {
    out.push(
        "| controller | reads | writes | reads above rest | writes above rest | busiest |".into(),
    );
    out.push("| --- | ---: | ---: | ---: | ---: | --- |".into());
    for r in requests {
        out.push(format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            r.controller,
            r.requests.reads,
            r.requests.writes,
            r.reads_above_rest,
            r.writes_above_rest,
            busiest(&r.requests, false)
        ));
    }
}

fn real_section(out: &mut Vec<String>, r: &RealFleet) {
    out.push(String::new());
    out.push(format!(
        "### Real fleet: {} clusters `{}`, {} ValkeyNodes",
        r.clusters, r.spec, r.valkey_nodes
    ));
    out.push(String::new());
    let pods = match (r.pods_ready_seconds, r.ready_over_pods_ready) {
        (Some(pods), Some(ratio)) => format!(
            " (the last pod Ready {pods:.0} s after it: {ratio:.2}× the pods' time, goal at most 1.2×)"
        ),
        _ => String::new(),
    };
    out.push(format!(
        "Every cluster Ready {:.1} s after the apply{pods}. Settled {:.1} s later ({}), then {:.0} s at rest:",
        r.ready_seconds,
        r.settled.seconds,
        if r.settled.went_quiet {
            "no write but Lease renewals for the quiet span"
        } else {
            "never quiet: the controllers kept writing"
        },
        r.rest_seconds
    ));
    out.push(String::new());
    rest_rows(out, &r.at_rest.iter().collect::<Vec<_>>());
    out.push(String::new());
    out.push("Requests from the apply to every cluster Ready:".into());
    out.push(String::new());
    request_rows(out, &r.formation_requests);
    out.push(String::new());
    out.push(format!(
        "One more cluster `{}` created at rest, Ready in {:.1} s; its requests (above rest: less \
         the rest rate over as long):",
        r.create.spec, r.create.ready_seconds
    ));
    out.push(String::new());
    request_rows(out, &r.create.requests);
}

fn simulated_section(out: &mut Vec<String>, s: &SimulatedFleet) {
    out.push(String::new());
    out.push(format!(
        "### Simulated fleet: {} ValkeyNodes, the node-controller alone",
        s.valkey_nodes
    ));
    out.push(String::new());
    out.push(format!(
        "Pods on a simulated node (`{}`, pod IP {}: nothing answers there). Every pod Running \
         and Ready and every ValkeyNode naming its pod and IP {:.1} s after the first create. \
         ValkeyNodes ready: {} (the Valkey check fails: `{}`: {}). Settled {:.1} s later ({}), \
         then {:.0} s at rest:",
        s.node.node,
        s.node.pod_ip,
        s.pods_running_seconds,
        s.not_ready.valkey_nodes_ready,
        s.not_ready.reason,
        s.not_ready.message,
        s.settled.seconds,
        if s.settled.went_quiet {
            "no write but Lease renewals for the quiet span"
        } else {
            "never quiet: the node-controller kept writing"
        },
        s.rest_seconds
    ));
    out.push(String::new());
    rest_rows(out, &[&s.at_rest]);
    out.push(String::new());
    let changed = &s.changed_at_rest;
    out.push(if changed.objects == 0 {
        "No ValkeyNode changed at rest.".to_owned()
    } else {
        format!(
            "ValkeyNodes changed at rest: {} (a write of what the server holds changes none); \
             for instance: {}.",
            changed.objects,
            changed.sample.join("; ")
        )
    });
    out.push(String::new());
    out.push(format!(
        "The node-controller's requests from the first create to every pod running: {:.0} reads, \
         {:.0} writes ({}).",
        s.formation_requests.reads,
        s.formation_requests.writes,
        busiest(&s.formation_requests, false)
    ));
    out.push(String::new());
    out.push(match &s.spec_change {
        Some(change) => format!(
            "A pod annotation added to every ValkeyNode (sent in {:.1} s): in every StatefulSet \
             {:.1} s after the first patch, every pod replaced and Running {:.1} s after it.",
            change.patch_seconds, change.workloads_seconds, change.pods_seconds
        ),
        None => "No spec change this run (`FLEET_SPEC_CHANGE=0`).".into(),
    });
}

/// The markdown section.
pub fn markdown(report: &Report) -> String {
    let m = &report.machine;
    let mut out = vec![
        "## Fleet".into(),
        String::new(),
        format!(
            "One node-controller and one cluster-controller process for the whole fleet, {} \
             builds. Machine: {}, {} cores, {:.0} GiB. Command: `{}`. Raw figures: \
             [bench/results/fleet.json](../bench/results/fleet.json); what each figure means: \
             [bench/README.md](../bench/README.md#fleet).",
            build_profile(&report.binaries),
            m.cpu,
            m.cores,
            m.memory_kib as f64 / 1024.0 / 1024.0,
            report.command
        ),
    ];
    if let Some(r) = &report.real {
        real_section(&mut out, r);
    }
    if let Some(s) = &report.simulated {
        simulated_section(&mut out, s);
    }
    out.join("\n") + "\n"
}

/// Writes the JSON and puts the section into `docs/benchmarks.md`.
pub fn write(root: &Path, report: &Report) -> Result<()> {
    crate::bench::publish(root, "fleet", report, &markdown(report))
}
