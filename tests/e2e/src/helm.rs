//! helm, and the chart as it renders: shared by the static chart checks (no cluster) and the
//! tests that install the chart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_yaml::Value;

use crate::{E2eError, Result, kubeconfig_path, localkube_dir, repo_root};

pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/valkey-operator")
}

pub fn chart() -> String {
    chart_dir().display().to_string()
}

/// helm to use: `$HELM`, else the local control plane's, else `helm` on PATH.
pub fn helm_program() -> PathBuf {
    if let Some(h) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let local = localkube_dir().join("bin/helm");
    if local.exists() {
        return local;
    }
    PathBuf::from("helm")
}

/// What a command printed and whether it succeeded.
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

pub async fn run(program: &Path, args: &[&str]) -> Result<Output> {
    let mut command = tokio::process::Command::new(program);
    // `helm lint` and `helm template` need no cluster: run them without one too.
    if let Ok(kubeconfig) = kubeconfig_path() {
        command.env("KUBECONFIG", kubeconfig);
    }
    let out = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| E2eError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    Ok(Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs helm; its stdout, or an error with its stderr.
pub async fn helm(args: &[&str]) -> Result<String> {
    let out = run(&helm_program(), args).await?;
    if out.success {
        Ok(out.stdout)
    } else {
        Err(E2eError::Check(format!(
            "`helm {}` failed: {}",
            args.join(" "),
            out.stderr.trim()
        )))
    }
}

/// `helm <args>` must fail; its stderr.
pub async fn helm_fails(args: &[&str]) -> Result<String> {
    let out = run(&helm_program(), args).await?;
    if out.success {
        return Err(E2eError::Check(format!(
            "`helm {}` succeeded; it should have failed",
            args.join(" ")
        )));
    }
    Ok(out.stderr)
}

/// Each golden file and the `helm template` arguments that render it.
pub fn golden_variants() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("default", vec![]),
        (
            "one-namespace",
            vec![
                "--set",
                "nodeController.watchNamespaces={team-a}",
                "--set",
                "clusterController.watchNamespaces={team-a}",
                "--set",
                "clusterController.replicas=2",
                "--set",
                "nodeController.metrics.serviceMonitor.enabled=true",
                "--set",
                "clusterController.metrics.serviceMonitor.enabled=true",
            ],
        ),
    ]
}

pub async fn render(extra: &[&str]) -> Result<String> {
    let chart = chart();
    let mut args = vec![
        "template",
        "valkey-operator",
        chart.as_str(),
        "-n",
        "valkey-operator-system",
    ];
    args.extend_from_slice(extra);
    helm(&args).await
}

pub fn documents(yaml: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = <Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| E2eError::Check(format!("rendered YAML does not parse: {e}")))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

pub fn field<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(value, |v, key| v.get(*key).unwrap_or(&Value::Null))
}

pub fn text(value: &Value, path: &[&str]) -> String {
    field(value, path).as_str().unwrap_or_default().to_owned()
}

/// resource → verbs, over the rules of the (Cluster)Role of `component`.
pub fn grants(docs: &[Value], component: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for doc in docs.iter().filter(|d| {
        matches!(text(d, &["kind"]).as_str(), "Role" | "ClusterRole")
            && text(d, &["metadata", "name"]).ends_with(&format!("-{component}"))
    }) {
        for rule in field(doc, &["rules"]).as_sequence().into_iter().flatten() {
            let verbs: Vec<String> = field(rule, &["verbs"])
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            for r in field(rule, &["resources"])
                .as_sequence()
                .into_iter()
                .flatten()
            {
                if let Some(r) = r.as_str() {
                    out.entry(r.to_owned()).or_default().extend(verbs.clone());
                }
            }
        }
    }
    out
}

/// The chart's Grafana dashboard, as the file the ConfigMap carries.
pub fn dashboard() -> Result<serde_json::Value> {
    let path = chart_dir().join("dashboards/valkey.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| E2eError::Check(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| E2eError::Check(format!("{} is not JSON: {e}", path.display())))
}

/// Every exporter metric (`redis_*`) the queries of a dashboard name: its panels' targets and its
/// variables.
pub fn dashboard_metrics(dashboard: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let mut queries = Vec::new();
    collect_queries(dashboard, &mut queries);
    queries
        .iter()
        .flat_map(|q| q.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')))
        .filter(|token| token.starts_with("redis_"))
        .map(str::to_owned)
        .collect()
}

fn collect_queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(q)) => {
                        out.push(q.clone())
                    }
                    _ => collect_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                collect_queries(v, out);
            }
        }
        _ => {}
    }
}

/// The metric names the Redis exporter 1.45 serves for Valkey, as captured in the chart's tests.
pub fn exporter_metric_names() -> Result<std::collections::BTreeSet<String>> {
    let path = chart_dir().join("tests/redis-exporter-1.45-metrics.txt");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| E2eError::Check(format!("{}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}
