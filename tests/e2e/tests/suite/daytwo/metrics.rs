//! Item 2: metrics for every Valkey server. With `spec.metrics` on, each member's pod runs the
//! Redis exporter beside Valkey; the test scrapes each at its pod IP, as Prometheus would, and
//! finds the server up and its replication state, with nothing of the password in the pod, its
//! logs or the scrape. Where the Prometheus operator's PodMonitor kind exists, a PodMonitor
//! `<name>-valkey` selects the members' `metrics` port, and goes when turned off.

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::cluster::ClusterFixture;
use e2e::helm::{dashboard, dashboard_metrics};
use e2e::metrics::{
    METRICS_PORT, http_get, install_pod_monitor_kind, metric_names, samples, value_of,
};
use e2e::replication::ReplicationFixture;
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, ResourceExt};
use valkey_api::v1alpha1::{Role, ValkeyNode};

const FORM: Duration = Duration::from_secs(240);
/// From a Ready cluster to every exporter answering: the exporter's container starts with the
/// pod, so this is mostly the first scrapes.
const SCRAPED: Duration = Duration::from_secs(60);

/// What one member's exporter serves, once it shows the state its role implies: `redis_up 1`, and
/// for a primary one connected replica, for a replica its link to the primary up.
/// The role is read again on every look: the operator may have moved a primary since `node` was
/// read (a planned failover that spreads primaries over zones, right after forming).
async fn scrape_member(
    api: &Api<ValkeyNode>,
    node: &ValkeyNode,
    replicas: usize,
) -> Result<String> {
    let name = node.name_any();
    let status = node.status.clone().unwrap_or_default();
    let ip = status
        .pod_ip
        .ok_or_else(|| E2eError::Check(format!("{name} has no pod IP")))?;
    wait_until(SCRAPED, &format!("{name}'s exporter at {ip}"), || {
        let (ip, name) = (ip.clone(), name.clone());
        async move {
            let role = api.get(&name).await?.status.and_then(|s| s.role);
            let body = match http_get(&ip, METRICS_PORT, "/metrics").await {
                Ok(body) => body,
                Err(e) => return Ok(Poll::NotYet(e)),
            };
            let s = samples(&body);
            let up = value_of(&s, "redis_up") == Some("1");
            let info = value_of(&s, "redis_instance_info").is_some();
            let role_line = s
                .keys()
                .find(|k| k.starts_with("redis_instance_info{"))
                .cloned()
                .unwrap_or_default();
            let settled = match role {
                Some(Role::Primary) => {
                    role_line.contains("role=\"master\"")
                        && value_of(&s, "redis_connected_slaves") == Some(&replicas.to_string())
                }
                Some(Role::Replica) => {
                    role_line.contains("role=\"slave\"")
                        && value_of(&s, "redis_master_link_up") == Some("1")
                }
                Some(Role::Sentinel) | None => false,
            };
            Ok(if up && info && settled {
                Poll::Ready(body)
            } else {
                Poll::NotYet(format!(
                    "{role:?}: redis_up {:?}, connected_slaves {:?}, master_link_up {:?}, {role_line}",
                    value_of(&s, "redis_up"),
                    value_of(&s, "redis_connected_slaves"),
                    value_of(&s, "redis_master_link_up"),
                ))
            })
        }
    })
    .await
}

/// The password the exporter logs in with (the node's credentials), read as the test's admin.
async fn exporter_password(ns: &e2e::TestNamespace, node: &ValkeyNode) -> Result<String> {
    let credentials = node
        .spec
        .credentials
        .clone()
        .ok_or_else(|| E2eError::Check(format!("{} has no credentials", node.name_any())))?;
    let secret = ns.api::<Secret>().get(&credentials.secret_name).await?;
    let bytes = secret
        .data
        .and_then(|d| d.get(&credentials.password_key).map(|v| v.0.clone()))
        .ok_or_else(|| E2eError::Check("the credentials Secret has no password".into()))?;
    String::from_utf8(bytes).map_err(|e| E2eError::Check(e.to_string()))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_member_serves_redis_up_and_its_replication_state() -> Result<()> {
    let c = ClusterFixture::start(
        "d2-metrics",
        "metered",
        "{shards: 2, replicas: 1, metrics: {enabled: true}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    // The members' roles as their ValkeyNodes report them: the node-controller writes a role it
    // reads from its server, which may come a moment after the cluster is Ready (a replica just
    // attached still reads as a primary on its node until its next probe).
    let nodes = wait_until(
        Duration::from_secs(60),
        "the ValkeyNodes report two primaries",
        || async {
            let nodes = c.nodes().await?;
            let primaries = nodes
                .iter()
                .filter(|n| n.status.as_ref().and_then(|s| s.role) == Some(Role::Primary))
                .count();
            Ok(if nodes.len() == 4 && primaries == 2 {
                Poll::Ready(nodes)
            } else {
                Poll::NotYet(format!("{} members, {primaries} primaries", nodes.len()))
            })
        },
    )
    .await?;
    check(nodes.len() == 4, format!("{} members, not 4", nodes.len()))?;

    let mut served = BTreeSet::new();
    let mut roles = Vec::new();
    for node in &nodes {
        let body = scrape_member(&c.ns.api(), node, 1).await?;
        served.extend(metric_names(&body));
        roles.push(node.status.as_ref().and_then(|s| s.role));
        let password = exporter_password(&c.ns, node).await?;
        check(
            !body.contains(&password),
            format!("{}: the password in a scrape", node.name_any()),
        )?;
    }
    eprintln!("metrics: every member scraped; roles {roles:?}");
    check(
        roles.iter().filter(|r| **r == Some(Role::Primary)).count() == 2,
        format!("two primaries expected: {roles:?}"),
    )?;

    // Every member's pod: Valkey and the exporter, the password only by reference.
    let pods =
        c.ns.api::<Pod>()
            .list(&ListParams::default().labels("valkey.io/cluster=metered"))
            .await?;
    check(pods.items.len() == 4, format!("{} pods", pods.items.len()))?;
    let password = exporter_password(&c.ns, &nodes[0]).await?;
    for pod in &pods.items {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        check(
            containers == ["valkey", "exporter"],
            format!("{}: containers {containers:?}", pod.name_any()),
        )?;
        let text = serde_json::to_string(pod).unwrap_or_default();
        check(
            !text.contains(&password),
            format!("{}: the password in the pod", pod.name_any()),
        )?;
        if let Some(log) = e2e::localkube_container_log(pod, "exporter") {
            check(
                !log.contains(&password),
                format!("{}: the password in the exporter's log", pod.name_any()),
            )?;
        }
    }

    // The chart's dashboard graphs only what these exporters serve.
    let used = dashboard_metrics(&dashboard()?);
    let missing: Vec<&String> = used.difference(&served).collect();
    check(
        missing.is_empty(),
        format!("the dashboard names metrics no member serves: {missing:?}"),
    )
}

fn pod_monitors(ns: &e2e::TestNamespace) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PodMonitor"),
        "podmonitors",
    );
    Api::namespaced_with(ns.client.clone(), &ns.name, &resource)
}

/// A one-server ValkeyReplication with metrics: its PodMonitor selects its pod's `metrics` port,
/// where the exporter serves; turning the PodMonitor off deletes it and restarts nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_monitor_selects_the_members_metrics_port_where_the_kind_exists() -> Result<()> {
    install_pod_monitor_kind().await?;
    let r = ReplicationFixture::start(
        "d2-podmonitor",
        "watched",
        "{replicas: 0, metrics: {enabled: true}}",
    )
    .await?;
    r.wait_ready(FORM).await?;
    let api = pod_monitors(&r.ns);
    let monitor = wait_until(Duration::from_secs(60), "PodMonitor watched-valkey", || {
        let api = api.clone();
        async move {
            Ok(match api.get_opt("watched-valkey").await? {
                Some(m) => Poll::Ready(m),
                None => Poll::NotYet("absent".into()),
            })
        }
    })
    .await?;
    let spec = &monitor.data["spec"];
    let selector = spec["selector"]["matchLabels"].clone();
    check(
        selector
            == serde_json::json!({"app.kubernetes.io/name": "valkey", "valkey.io/replication": "watched"}),
        format!("selector {selector}"),
    )?;
    let endpoint = &spec["podMetricsEndpoints"][0];
    check(
        endpoint["port"] == "metrics" && endpoint["path"] == "/metrics",
        format!("endpoint {endpoint}"),
    )?;
    let owner = monitor.owner_references().first().cloned();
    check(
        owner
            .as_ref()
            .is_some_and(|o| o.kind == "ValkeyReplication" && o.name == "watched"),
        format!("owner {owner:?}"),
    )?;

    // What it selects: the one member's pod, whose `metrics` port serves the server.
    let labels: Vec<String> = selector
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let pods =
        r.ns.api::<Pod>()
            .list(&ListParams::default().labels(&labels.join(",")))
            .await?;
    check(
        pods.items.len() == 1,
        format!("{} pods selected", pods.items.len()),
    )?;
    let pod = &pods.items[0];
    let port = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "exporter"))
        .and_then(|c| c.ports.clone())
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .map(|p| p.container_port);
    check(
        port == Some(i32::from(METRICS_PORT)),
        format!("metrics port {port:?}"),
    )?;
    let node = r.node("watched-0").await?;
    scrape_member(&r.ns.api(), &node, 0).await?;

    // Turned off: deleted; the pod stays as it was.
    let uid = pod.uid();
    let generation = node.metadata.generation;
    r.patch_spec(serde_json::json!({"metrics": {"podMonitor": false}}))
        .await?;
    wait_until(Duration::from_secs(60), "PodMonitor deleted", || {
        let api = api.clone();
        async move {
            Ok(match api.get_opt("watched-valkey").await? {
                None => Poll::Ready(()),
                Some(_) => Poll::NotYet("still there".into()),
            })
        }
    })
    .await?;
    let after = r.node("watched-0").await?;
    check(
        after.metadata.generation == generation,
        format!(
            "the ValkeyNode changed: generation {generation:?} -> {:?}",
            after.metadata.generation
        ),
    )?;
    let pod_now = r.ns.api::<Pod>().get(&pod.name_any()).await?;
    check(
        pod_now.uid() == uid,
        "the pod was replaced for a PodMonitor change",
    )?;
    Ok(())
}

/// Over TLS the exporter reads its server in TLS too (on the pod's loopback), and serves it.
#[tokio::test(flavor = "multi_thread")]
async fn over_tls_the_exporter_reads_its_server() -> Result<()> {
    let r = ReplicationFixture::start(
        "d2-metrics-tls",
        "sealed",
        "{replicas: 0, tls: {enabled: true}, metrics: {enabled: true}}",
    )
    .await?;
    r.wait_ready(FORM).await?;
    let node = r.node("sealed-0").await?;
    let body = scrape_member(&r.ns.api(), &node, 0).await?;
    let s = samples(&body);
    check(
        value_of(&s, "redis_exporter_last_scrape_error") == Some("0"),
        format!(
            "the exporter reports a scrape error: {:?}",
            s.keys()
                .find(|k| k.starts_with("redis_exporter_last_scrape_error"))
        ),
    )
}
