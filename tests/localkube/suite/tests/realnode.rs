//! The real node (tests/localkube/realnode/README.md): the upstream kubelet with containerd and
//! runc, running the images built here from localkube's registry, on the process nodes' pod
//! network. What it shows that the process kubelet cannot: the runtime's view of a node, image
//! pulls, user and read-only root enforced by runc, a memory limit enforced by the kernel and
//! reported by the runtime, probes run through the CRI, `kubectl exec` and `logs`.
//!
//! With `LOCALKUBE_REAL_NODE=1` (make test starts localkube with the node) a missing node fails
//! each test with what the machine lacks; elsewhere the tests say they are skipped and why.

use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, check, describe_pod, wait_until};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;

use e2e::realnode::{
    LABEL, NODE, POD_PLACEMENT as ON_REAL_NODE, container_pid, container_status, memory_limit,
    mount_read_only, proc_status as status_field, root_mount,
};

use crate::{POD_READY, migrate, ping, ready_valkey};

const NODE_IP: &str = "10.213.64.1";
const VALKEY: &str = "valkey/valkey:9.1";

async fn real_node() -> Result<Option<Node>> {
    e2e::realnode::node().await
}

/// A Valkey pod on the real node, restricted as the operator's pods are (user 999, read-only
/// root, no capability, RuntimeDefault seccomp), pulled from the registry every time.
fn valkey_pod(name: &str, extra: &str, args: &[&str], container_extra: &str) -> String {
    let args: Vec<String> = ["--protected-mode", "no", "--save", "", "--appendonly", "no"]
        .iter()
        .chain(args)
        .map(|a| format!("\"{a}\""))
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: {name}}}}}
spec:
  terminationGracePeriodSeconds: 2
{ON_REAL_NODE}{extra}  securityContext:
    runAsNonRoot: true
    runAsUser: 999
    runAsGroup: 999
    fsGroup: 999
    seccompProfile: {{type: RuntimeDefault}}
  containers:
  - name: valkey
    image: {VALKEY}
    imagePullPolicy: Always
    command: [valkey-server]
    args: [{args}]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {{drop: [ALL]}}
    readinessProbe:
      exec: {{command: [valkey-cli, ping]}}
      periodSeconds: 1
    volumeMounts: [{{name: data, mountPath: /data}}]
{container_extra}  volumes: [{{name: data, emptyDir: {{}}}}]
"#,
        args = args.join(", ")
    )
}

/// The manifest digest of an OCI archive built by realnode/oci.sh.
async fn archive_digest(name: &str) -> Result<String> {
    e2e::realnode::archive_digest(&e2e::localkube_dir().join(format!("oci/{name}.oci.tar"))).await
}

#[tokio::test]
async fn the_real_node_is_ready_with_containerd_and_its_kubelet_version() -> Result<()> {
    let Some(node) = real_node().await? else {
        return Ok(());
    };
    let status = node.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    check(ready, format!("{NODE} is Ready: {:?}", status.conditions))?;
    let info = status.node_info.clone().unwrap_or_default();
    check(
        info.container_runtime_version.starts_with("containerd://"),
        format!("runtime {}", info.container_runtime_version),
    )?;
    let server = e2e::client().await?.apiserver_version().await?;
    check(
        info.kubelet_version == server.git_version,
        format!(
            "kubelet {} is the control plane's {}",
            info.kubelet_version, server.git_version
        ),
    )?;
    // What a user sees.
    let wide = e2e::kubectl(&["get", "nodes", "-o", "wide"]).await?;
    let line = wide
        .lines()
        .find(|l| l.starts_with(NODE))
        .ok_or_else(|| E2eError::Check(format!("{NODE} not in:\n{wide}")))?;
    check(
        line.contains(" Ready ")
            && line.contains(&info.kubelet_version)
            && line.contains("containerd://")
            && line.contains(NODE_IP),
        format!(
            "kubectl get nodes -o wide shows {NODE} Ready, its kubelet version, containerd and its address:\n{wide}"
        ),
    )?;
    // A node like the process nodes: the same labels, its own zone, and the taint.
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        ("kubernetes.io/hostname", NODE),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("topology.kubernetes.io/zone", "zone-real"),
        ("topology.kubernetes.io/region", "local"),
        ("node.kubernetes.io/instance-type", "localkube"),
        (LABEL, "true"),
    ] {
        check(
            labels.get(key).map(String::as_str) == Some(value),
            format!("label {key}={value}: {labels:?}"),
        )?;
    }
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    check(
        taints
            .iter()
            .any(|t| t.key == LABEL && t.effect == "NoSchedule"),
        format!("taint {LABEL}:NoSchedule: {taints:?}"),
    )?;
    Ok(())
}

#[tokio::test]
async fn a_pod_pulled_from_the_registry_runs_as_non_root_with_a_read_only_root() -> Result<()> {
    if real_node().await?.is_none() {
        return Ok(());
    }
    let ns = TestNamespace::create("real-ro").await?;
    ns.apply(&valkey_pod("ro", "", &[], "")).await?;
    let pod = ns.wait_pod_ready("ro", POD_READY).await?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    check(
        node.as_deref() == Some(NODE),
        format!("on {NODE}: {node:?}"),
    )?;

    // The image is the one built here, pulled from the registry by its digest.
    let image_id = container_status(&pod, "valkey")
        .map(|c| c.image_id)
        .unwrap_or_default();
    let digest = archive_digest("valkey-9.1").await?;
    check(
        image_id == format!("docker.io/valkey/valkey@{digest}"),
        format!("image {image_id} is the archive's {digest}"),
    )?;
    let ip = e2e::pod_ip(&pod).unwrap_or_default();
    ping(&ip, Duration::from_secs(10)).await?;

    // What runc made of the security context, seen from the host.
    let pid = container_pid(&pod, "valkey")?;
    let uid = status_field(pid, "Uid")?;
    let gid = status_field(pid, "Gid")?;
    check(
        uid == "999 999 999 999" && gid == "999 999 999 999",
        format!("uid {uid}, gid {gid}"),
    )?;
    check(
        status_field(pid, "CapEff")? == "0000000000000000",
        "no effective capability",
    )?;
    check(status_field(pid, "Seccomp")? == "2", "a seccomp filter")?;
    check(status_field(pid, "NoNewPrivs")? == "1", "no new privileges")?;
    let root = root_mount(pid)?;
    check(
        mount_read_only(&root),
        format!("the root file system is read-only: {root}"),
    )?;

    // The kubelet's API, through the API server.
    let pong = ns
        .kubectl(&["exec", "ro", "--", "valkey-cli", "ping"])
        .await?;
    check(pong.trim() == "PONG", format!("kubectl exec: {pong}"))?;
    let logs = ns.kubectl(&["logs", "ro"]).await?;
    check(
        logs.contains("Ready to accept connections"),
        format!("kubectl logs: {logs}"),
    )?;
    Ok(())
}

#[tokio::test]
async fn a_memory_limit_is_enforced_and_the_pod_says_oomkilled() -> Result<()> {
    if real_node().await?.is_none() {
        return Ok(());
    }
    let ns = TestNamespace::create("real-oom").await?;
    let limits = "    resources: {limits: {memory: 48Mi}, requests: {memory: 48Mi}}\n";
    ns.apply(&valkey_pod(
        "oom",
        "  restartPolicy: Never\n",
        &["--enable-debug-command", "yes"],
        limits,
    ))
    .await?;
    let pod = ns.wait_pod_ready("oom", POD_READY).await?;
    let pid = container_pid(&pod, "valkey")?;
    let limit = memory_limit(pid)?;
    check(
        limit == 48 * 1024 * 1024,
        format!("the container's memory cgroup has the limit: {limit}"),
    )?;

    // About 500 MB of keys: the kernel kills the server on the way.
    let ip = e2e::pod_ip(&pod).unwrap_or_default();
    let mut conn = e2e::valkey(&ip, 6379).await?;
    let populate = tokio::time::timeout(
        Duration::from_secs(60),
        e2e::valkey_cmd(&mut conn, &["DEBUG", "POPULATE", "5000000", "key", "100"]),
    )
    .await;
    check(
        !matches!(populate, Ok(Ok(_))),
        "DEBUG POPULATE did not complete within the limit",
    )?;
    let pods = ns.api::<Pod>();
    // restartPolicy Never: the pod ends Failed, its container's state says why.
    let (t, p) = wait_until(POD_READY, "the server to be OOM-killed", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("oom").await?;
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            let state = container_status(&p, "valkey").and_then(|c| c.state);
            Ok(match state.and_then(|s| s.terminated) {
                Some(t) if phase.as_deref() == Some("Failed") => Poll::Ready((t, p)),
                _ => Poll::NotYet(describe_pod(&p)),
            })
        }
    })
    .await?;
    check(
        t.reason.as_deref() == Some("OOMKilled") && t.exit_code == 137,
        format!(
            "terminated as OOMKilled with 137: {:?} {} ({})",
            t.reason,
            t.exit_code,
            describe_pod(&p)
        ),
    )?;
    Ok(())
}

#[tokio::test]
async fn probes_are_run_by_the_kubelet_through_the_runtime() -> Result<()> {
    if real_node().await?.is_none() {
        return Ok(());
    }
    let ns = TestNamespace::create("real-probe").await?;
    // exec (readiness) and tcpSocket (liveness) on the server; httpGet on the exporter beside it,
    // which must read the server (redis_up 1).
    let extra = r#"    livenessProbe:
      tcpSocket: {port: 6379}
      periodSeconds: 2
  - name: exporter
    image: oliver006/redis_exporter:v1.45.0
    imagePullPolicy: Always
    args: [--redis.addr=redis://localhost:6379]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
    ports: [{name: metrics, containerPort: 9121}]
    readinessProbe:
      httpGet: {path: /health, port: metrics}
      periodSeconds: 1
"#;
    ns.apply(&valkey_pod("probed", "", &[], extra)).await?;
    let pod = ns.wait_pod_ready("probed", POD_READY).await?;
    let ip = e2e::pod_ip(&pod).unwrap_or_default();
    let metrics = e2e::metrics::http_get(&ip, 9121, "/metrics")
        .await
        .map_err(E2eError::Check)?;
    check(
        metrics.lines().any(|l| l == "redis_up 1"),
        "the exporter reads the server: redis_up 1",
    )?;

    // A liveness probe that fails restarts the container; the kubelet says why.
    let failing = r#"    livenessProbe:
      exec: {command: [valkey-cli, -p, "1", ping]}
      periodSeconds: 1
      failureThreshold: 1
"#;
    ns.apply(&valkey_pod("unhealthy", "", &[], failing)).await?;
    let pods = ns.api::<Pod>();
    wait_until(POD_READY, "a restart by the liveness probe", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("unhealthy").await?;
            let restarts = container_status(&p, "valkey").map_or(0, |c| c.restart_count);
            Ok(if restarts >= 1 {
                Poll::Ready(())
            } else {
                Poll::NotYet(describe_pod(&p))
            })
        }
    })
    .await?;
    let events = ns
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=unhealthy,reason=Unhealthy",
            "-o",
            "jsonpath={range .items[*]}{.source.component}/{.source.host}: {.message}{\"\\n\"}{end}",
        ])
        .await?;
    check(
        events
            .lines()
            .any(|l| l.starts_with(&format!("kubelet/{NODE}: Liveness probe failed"))),
        format!("the kubelet of {NODE} reported the failed liveness probe: {events}"),
    )?;
    Ok(())
}

#[tokio::test]
async fn real_node_pods_share_the_process_nodes_pod_network() -> Result<()> {
    if real_node().await?.is_none() {
        return Ok(());
    }
    let ns = TestNamespace::create("real-net").await?;
    ns.apply(&valkey_pod("real", "", &[], "")).await?;
    let (_, process_ip) = ready_valkey(&ns, "process", None, &[]).await?;
    let real = ns.wait_pod_ready("real", POD_READY).await?;
    let real_ip = e2e::pod_ip(&real).unwrap_or_default();
    check(
        real_ip.starts_with("10.213.64."),
        format!("the real node's pod has an address of its range: {real_ip}"),
    )?;
    let there = migrate(&real_ip, &process_ip, 3000).await?;
    check(there == "OK", format!("real -> process pod: {there}"))?;
    let back = migrate(&process_ip, &real_ip, 3000).await?;
    check(back == "OK", format!("process -> real pod: {back}"))?;
    // No pod of the suite lands on the real node without tolerating it.
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?;
    for p in pods.items {
        let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let tolerates = p
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key.as_deref() == Some(LABEL)));
        check(
            on.as_deref() != Some(NODE) || tolerates,
            format!("only pods that tolerate the taint run on {NODE}"),
        )?;
    }
    Ok(())
}
