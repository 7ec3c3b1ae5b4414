//! The chart without a cluster: it lints, renders exactly the golden files, is hardened and least
//! privilege as rendered, and refuses a typo in values naming the key. These run with the unit
//! tests (`make unit`); the tests that install the chart run in the end-to-end suite.
//! `UPDATE_GOLDEN=1` rewrites the golden files.

use e2e::helm::{
    chart, chart_dir, dashboard, dashboard_metrics, documents, exporter_metric_names, field,
    golden_variants, grants, helm, helm_fails, render, text,
};
use e2e::{E2eError, Result, check};
use serde_yaml::Value;

const NODE: &str = "node-controller";
const CLUSTER: &str = "cluster-controller";

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_lints_clean() -> Result<()> {
    for extra in [
        vec![],
        vec![
            "--set",
            "nodeController.watchNamespaces={team-a}",
            "--set",
            "clusterController.enabled=false",
            "--set",
            "nodeController.metrics.serviceMonitor.enabled=true",
        ],
    ] {
        let chart = chart();
        let mut args = vec!["lint", "--strict", chart.as_str()];
        args.extend_from_slice(&extra);
        let out = helm(&args).await?;
        check(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            format!("helm lint {extra:?}:\n{out}"),
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_renders_the_golden_files() -> Result<()> {
    let dir = chart_dir().join("tests/golden");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    for (name, extra) in golden_variants() {
        let rendered = render(&extra).await?;
        let path = dir.join(format!("{name}.yaml"));
        if update {
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&path, &rendered))
                .map_err(|e| E2eError::Check(format!("{}: {e}", path.display())))?;
            continue;
        }
        let golden = std::fs::read_to_string(&path).map_err(|e| {
            E2eError::Check(format!(
                "{}: {e} (UPDATE_GOLDEN=1 writes it)",
                path.display()
            ))
        })?;
        if golden != rendered {
            let first = golden
                .lines()
                .zip(rendered.lines())
                .enumerate()
                .find(|(_, (g, r))| g != r)
                .map(|(i, (g, r))| format!("line {}: golden {g:?}, rendered {r:?}", i + 1))
                .unwrap_or_else(|| "one is a prefix of the other".into());
            return Err(E2eError::Check(format!(
                "helm template {name} differs from {} at {first}; if the change is intended, \
                 rerun with UPDATE_GOLDEN=1 and review the diff",
                path.display()
            )));
        }
    }
    Ok(())
}

/// What the golden files pin, asserted on its own, so that rewriting a golden file cannot
/// quietly give a controller more access or drop its hardening.
#[tokio::test(flavor = "multi_thread")]
async fn the_rendered_chart_is_hardened_and_least_privilege() -> Result<()> {
    let docs = documents(&render(&[]).await?)?;
    let kinds: Vec<String> = docs.iter().map(|d| text(d, &["kind"])).collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        check(
            kinds.iter().filter(|k| *k == kind).count() >= 2,
            format!("one {kind} per controller expected; rendered {kinds:?}"),
        )?;
    }
    check(
        !kinds.iter().any(|k| k == "ServiceMonitor"),
        "the ServiceMonitor is off by default",
    )?;

    for deploy in docs.iter().filter(|d| text(d, &["kind"]) == "Deployment") {
        let name = text(deploy, &["metadata", "name"]);
        let pod = field(deploy, &["spec", "template", "spec"]);
        let container = &field(pod, &["containers"])[0];
        let psc = field(pod, &["securityContext"]);
        let csc = field(container, &["securityContext"]);
        check(
            field(psc, &["runAsNonRoot"]).as_bool() == Some(true)
                && text(psc, &["seccompProfile", "type"]) == "RuntimeDefault"
                && field(csc, &["allowPrivilegeEscalation"]).as_bool() == Some(false)
                && field(csc, &["readOnlyRootFilesystem"]).as_bool() == Some(true)
                && field(csc, &["capabilities", "drop"])
                    .as_sequence()
                    .is_some_and(|d| d.iter().any(|c| c.as_str() == Some("ALL"))),
            format!("{name}: not restricted: pod {psc:?}, container {csc:?}"),
        )?;
        check(
            text(container, &["livenessProbe", "httpGet", "path"]) == "/live"
                && text(container, &["readinessProbe", "httpGet", "path"]) == "/ready"
                && field(container, &["ports"])[0]["containerPort"].as_u64() == Some(8080),
            format!("{name}: probes must be /live and /ready on port 8080"),
        )?;
        let args: Vec<&str> = field(container, &["args"])
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        check(
            args.contains(&"--leader-elect")
                && args.contains(&"--leader-election-namespace=valkey-operator-system")
                && args.contains(&format!("--leader-election-id={name}").as_str()),
            format!("{name}: leader election with its own Lease expected, args {args:?}"),
        )?;
    }

    let cluster = grants(&docs, CLUSTER);
    for forbidden in [
        "pods",
        "statefulsets",
        "deployments",
        "persistentvolumeclaims",
        "configmaps",
    ] {
        check(
            !cluster.contains_key(forbidden),
            format!("the cluster-controller must not touch {forbidden}: {cluster:?}"),
        )?;
    }
    let secrets = cluster.get("secrets").cloned().unwrap_or_default();
    // It watches every Secret's metadata (what starts a pass when a Secret its parents read
    // changes) and reads a Secret's content by name; it never deletes or replaces one.
    check(
        secrets == ["get", "list", "watch", "create", "patch"],
        format!(
            "the cluster-controller watches Secrets and reads, creates and applies them by name: {secrets:?}"
        ),
    )?;
    let node = grants(&docs, NODE);
    check(
        !node.contains_key("valkeyclusters"),
        format!("the node-controller has no business with ValkeyClusters: {node:?}"),
    )?;
    check(
        node.get("secrets")
            .is_some_and(|v| v == &["get", "list", "watch"]),
        format!("the node-controller only watches and reads Secrets: {node:?}"),
    )?;
    check(
        node.get("pods").is_some_and(|v| {
            v.iter()
                .all(|v| v == "list" || v == "watch" || v == "patch")
        }),
        format!("the node-controller only reads Pods and patches their role label: {node:?}"),
    )?;
    check(
        !cluster
            .values()
            .chain(node.values())
            .flatten()
            .any(|v| v == "*"),
        "no wildcard verbs",
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typo_in_values_is_rejected_naming_the_key() -> Result<()> {
    let chart = chart();
    let stderr = helm_fails(&[
        "template",
        "x",
        chart.as_str(),
        "--set",
        "nodeController.replcas=2",
    ])
    .await?;
    check(
        stderr.contains("replcas") && stderr.contains("/nodeController"),
        format!("the message must name nodeController.replcas: {stderr}"),
    )?;

    // A value of the wrong shape and a second watched namespace are refused as well.
    let stderr = helm_fails(&[
        "template",
        "x",
        chart.as_str(),
        "--set",
        "clusterController.watchNamespaces={a,b}",
    ])
    .await?;
    check(
        stderr.contains("watchNamespaces"),
        format!("the message must name watchNamespaces: {stderr}"),
    )?;
    Ok(())
}

/// The ValkeyNode admission policy comes with the cluster-controller, names its ServiceAccount as
/// the one writer, matches creates and updates of ValkeyNodes (not their status), and covers the
/// watched namespace only when the controller watches one.
#[tokio::test(flavor = "multi_thread")]
async fn the_valkey_node_policy_lets_only_the_cluster_controller_write() -> Result<()> {
    let policies = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| {
                text(d, &["kind"]).starts_with("ValidatingAdmissionPolicy")
                    && text(d, &["metadata", "name"]).ends_with("-valkeynode-writers")
            })
            .cloned()
            .collect()
    };
    let docs = documents(&render(&[]).await?)?;
    let all = policies(&docs);
    let policy = all
        .iter()
        .find(|d| text(d, &["kind"]) == "ValidatingAdmissionPolicy")
        .ok_or_else(|| E2eError::Check("no ValidatingAdmissionPolicy rendered".into()))?;
    let binding = all
        .iter()
        .find(|d| text(d, &["kind"]) == "ValidatingAdmissionPolicyBinding")
        .ok_or_else(|| E2eError::Check("no binding rendered".into()))?;
    let rule = &field(policy, &["spec", "matchConstraints", "resourceRules"])[0];
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    check(
        strings(&rule["resources"]) == ["valkeynodes"]
            && strings(&rule["operations"]) == ["CREATE", "UPDATE"]
            && text(policy, &["spec", "failurePolicy"]) == "Fail",
        format!("the policy must match creates and updates of valkeynodes only: {rule:?}"),
    )?;
    let writer = field(policy, &["spec", "variables"])
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|v| v["name"].as_str() == Some("writer"))
        .map(|v| text(v, &["expression"]))
        .unwrap_or_default();
    check(
        writer
            == "\"system:serviceaccount:valkey-operator-system:valkey-operator-cluster-controller\"",
        format!("the one writer is the cluster-controller's ServiceAccount: {writer}"),
    )?;
    check(
        text(binding, &["spec", "policyName"]) == text(policy, &["metadata", "name"])
            && strings(field(binding, &["spec", "validationActions"])) == ["Deny"]
            && field(binding, &["spec", "matchResources"]).is_null(),
        format!("watching every namespace, the binding denies everywhere: {binding:?}"),
    )?;

    let one = documents(&render(&["--set", "clusterController.watchNamespaces={team-a}"]).await?)?;
    let scoped = policies(&one);
    let binding = scoped
        .iter()
        .find(|d| text(d, &["kind"]) == "ValidatingAdmissionPolicyBinding")
        .ok_or_else(|| E2eError::Check("no binding rendered for one namespace".into()))?;
    check(
        text(
            binding,
            &[
                "spec",
                "matchResources",
                "namespaceSelector",
                "matchLabels",
                "kubernetes.io/metadata.name",
            ],
        ) == "team-a",
        format!("watching team-a, the binding covers team-a only: {binding:?}"),
    )?;
    let without = documents(&render(&["--set", "clusterController.enabled=false"]).await?)?;
    check(
        policies(&without).is_empty(),
        "no cluster-controller, no policy naming it",
    )?;
    Ok(())
}

/// The dashboard ConfigMap: on by default with the sidecar's label, valid JSON with the
/// namespace, cluster and pod variables, graphing only metrics the exporter serves (and the ones
/// a platform team looks at first); off, moved and labelled by values.
#[tokio::test(flavor = "multi_thread")]
async fn the_grafana_dashboard_is_valid_and_graphs_only_what_the_exporter_serves() -> Result<()> {
    let dashboard_of = |docs: &[Value]| -> Option<Value> {
        docs.iter()
            .find(|d| {
                text(d, &["kind"]) == "ConfigMap"
                    && text(d, &["metadata", "name"]).ends_with("-grafana-dashboard")
            })
            .cloned()
    };
    let docs = documents(&render(&[]).await?)?;
    let config_map =
        dashboard_of(&docs).ok_or_else(|| E2eError::Check("no dashboard ConfigMap".into()))?;
    check(
        text(&config_map, &["metadata", "labels", "grafana_dashboard"]) == "1"
            && text(&config_map, &["metadata", "namespace"]) == "valkey-operator-system",
        format!("the sidecar's label, in the release's namespace: {config_map:?}"),
    )?;
    let json: serde_json::Value =
        serde_json::from_str(&text(&config_map, &["data", "valkey.json"]))
            .map_err(|e| E2eError::Check(format!("the dashboard is not JSON: {e}")))?;
    check(
        json == dashboard()?,
        "the ConfigMap carries the chart's file",
    )?;
    let variables: Vec<&str> = json["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for wanted in ["namespace", "cluster", "pod"] {
        check(
            variables.contains(&wanted),
            format!("no {wanted} variable: {variables:?}"),
        )?;
    }
    let used = dashboard_metrics(&json);
    let served = exporter_metric_names()?;
    let unknown: Vec<&String> = used.difference(&served).collect();
    check(
        unknown.is_empty(),
        format!("the dashboard names metrics the exporter does not serve: {unknown:?}"),
    )?;
    for metric in [
        "redis_up",
        "redis_memory_used_bytes",
        "redis_memory_max_bytes",
        "redis_commands_processed_total",
        "redis_connected_clients",
        "redis_keyspace_hits_total",
        "redis_keyspace_misses_total",
        "redis_master_repl_offset",
        "redis_connected_slave_offset_bytes",
        "redis_connected_slaves",
        "redis_master_link_up",
        "redis_db_keys",
        "redis_evicted_keys_total",
        "redis_expired_keys_total",
    ] {
        check(
            used.contains(metric),
            format!("the dashboard does not graph {metric}"),
        )?;
    }

    let off = documents(&render(&["--set", "grafanaDashboard.enabled=false"]).await?)?;
    check(
        dashboard_of(&off).is_none(),
        "grafanaDashboard.enabled=false",
    )?;
    let moved = documents(
        &render(&[
            "--set",
            "grafanaDashboard.namespace=monitoring",
            "--set",
            "grafanaDashboard.annotations.grafana_folder=Valkey",
        ])
        .await?,
    )?;
    let moved = dashboard_of(&moved).ok_or_else(|| E2eError::Check("no moved dashboard".into()))?;
    check(
        text(&moved, &["metadata", "namespace"]) == "monitoring"
            && text(&moved, &["metadata", "annotations", "grafana_folder"]) == "Valkey",
        format!("namespace and annotations from values: {moved:?}"),
    )?;
    let stderr = helm_fails(&[
        "template",
        "x",
        chart().as_str(),
        "--set",
        "grafanaDashboard.enabeld=true",
    ])
    .await?;
    check(
        stderr.contains("enabeld") && stderr.contains("grafanaDashboard"),
        format!("a typo under grafanaDashboard names the key: {stderr}"),
    )
}
