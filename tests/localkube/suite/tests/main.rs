//! localkube's own tests, one target (they share one pool of test threads): what the cluster does
//! for the operator's end-to-end tests (`cluster`), what charts rely on a kubelet for
//! (`conformance`), the pod network at scale (`network`), fault injection (`faults`), what the
//! image table's images serve (`images`), volumes that grow (`storage`), Services routed by
//! kube-proxy, LoadBalancer addresses and cluster DNS (`services`), and the real node
//! (`realnode`: the upstream kubelet with containerd, running the images built here).
//!
//! They run against the cluster KUBECONFIG names, like the e2e suite (`make localkube-test`); the
//! network and fault tests need localkube itself and say so elsewhere.

mod cluster;
mod conformance;
mod faults;
mod images;
mod network;
mod realnode;
mod services;
mod storage;

use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, describe_pod, wait_until};
use k8s_openapi::api::core::v1::Pod;

pub const POD_READY: Duration = Duration::from_secs(120);

pub fn skip(why: &str) -> Result<()> {
    eprintln!("SKIPPED: {why}");
    Ok(())
}

/// A pod's phase once it has finished (Succeeded or Failed), with its container's output when the
/// cluster is localkube (elsewhere, `kubectl logs`).
pub async fn finished(ns: &TestNamespace, pod: &str, container: &str) -> Result<(String, String)> {
    let pods = ns.api::<Pod>();
    let p = wait_until(POD_READY, &format!("pod {pod} to finish"), || {
        let pods = pods.clone();
        async move {
            let p = pods.get(pod).await?;
            Ok(match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded" | "Failed") => Poll::Ready(p),
                _ => Poll::NotYet(describe_pod(&p)),
            })
        }
    })
    .await?;
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let log = match e2e::localkube_container_log(&p, container) {
        Some(log) => log,
        None => ns
            .kubectl(&["logs", pod, "-c", container])
            .await
            .unwrap_or_default(),
    };
    Ok((phase, log))
}

/// Applies `manifest` (one pod named `pod` that runs checks and exits), waits for it to finish,
/// and fails with its output unless it Succeeded.
pub async fn passes(
    ns: &TestNamespace,
    manifest: &str,
    pod: &str,
    container: &str,
) -> Result<String> {
    ns.apply(manifest).await?;
    let (phase, log) = finished(ns, pod, container).await?;
    if phase == "Succeeded" {
        Ok(log)
    } else {
        Err(E2eError::Check(format!(
            "pod {pod} {phase}; its output:\n{log}"
        )))
    }
}

/// The `valkey/valkey:9.1` image, as on any cluster (localkube maps it to its image table).
pub const VALKEY_IMAGE: &str = "valkey/valkey:9.1";

/// A pod of one Valkey server (no protected mode, so the host may talk to it) with a readiness
/// probe every second; on the fault-test node when `fault_node` names it.
pub fn valkey_pod(name: &str, fault_node: Option<&str>, extra_args: &[&str]) -> String {
    let placement = match fault_node {
        Some(node) => format!(
            "  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  tolerations: [{{key: localkube.io/fault-tests, operator: Exists}}]\n"
        ),
        None => String::new(),
    };
    let args: Vec<String> = ["--protected-mode", "no"]
        .iter()
        .chain(extra_args)
        .map(|a| format!("\"{a}\""))
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  terminationGracePeriodSeconds: 2
{placement}  containers:
  - name: valkey
    image: {VALKEY_IMAGE}
    command: [valkey-server]
    args: [{args}]
    readinessProbe:
      exec: {{command: [valkey-cli, ping]}}
      periodSeconds: 1
"#,
        args = args.join(", ")
    )
}

/// Applies a `valkey_pod` and waits until it is Ready; its IP.
pub async fn ready_valkey(
    ns: &TestNamespace,
    name: &str,
    fault_node: Option<&str>,
    extra_args: &[&str],
) -> Result<(Pod, String)> {
    ns.apply(&valkey_pod(name, fault_node, extra_args)).await?;
    let pod = ns.wait_pod_ready(name, POD_READY).await?;
    let ip = e2e::pod_ip(&pod)
        .ok_or_else(|| E2eError::Check(format!("no pod IP: {}", describe_pod(&pod))))?;
    Ok((pod, ip))
}

/// PING from the host, within `within`: Ok(()) on PONG.
pub async fn ping(ip: &str, within: Duration) -> Result<()> {
    let attempt = async {
        let mut conn = e2e::valkey(ip, 6379).await?;
        e2e::valkey_cmd(&mut conn, &["PING"]).await
    };
    match tokio::time::timeout(within, attempt).await {
        Ok(Ok(reply)) if reply == "PONG" => Ok(()),
        Ok(Ok(other)) => Err(E2eError::Check(format!("PING {ip}: {other}"))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(E2eError::Check(format!(
            "PING {ip}: no answer within {within:?}"
        ))),
    }
}

/// Makes the server at `from` open a connection to the server at `to` (MIGRATE of a key, copied):
/// "OK" when `to` is reachable from `from`'s pod.
pub async fn migrate(from: &str, to: &str, timeout_ms: u64) -> Result<String> {
    let addr = format!("{from}:6379");
    let err = |source| E2eError::Valkey {
        addr: addr.clone(),
        source,
    };
    // The server may wait `timeout_ms` for its own connection, and on a loaded machine longer
    // (seen: over 6.5 s for a 1.5 s timeout): the client waits well beyond, so that only the
    // server's own answer (IOERR, or OK) is ever read as what the network did.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_millis(timeout_ms + 30_000)));
    let mut conn = redis::Client::open(format!("redis://{addr}/"))
        .map_err(err)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(err)?;
    e2e::valkey_cmd(&mut conn, &["SET", "reach:probe", from]).await?;
    let timeout = timeout_ms.to_string();
    let reply = e2e::valkey_cmd(
        &mut conn,
        &[
            "MIGRATE",
            to,
            "6379",
            "reach:probe",
            "0",
            &timeout,
            "COPY",
            "REPLACE",
        ],
    )
    .await;
    Ok(match reply {
        Ok(r) => r,
        Err(e) => e.to_string(),
    })
}

/// The network namespace localkube's kubelet gives a pod (`lk-` and the first ten letters and
/// digits of its UID).
pub fn netns_of(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let short: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(10)
        .collect();
    format!("lk-{short}")
}

/// Runs a command on the host; its stdout.
pub async fn host(program: &str, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|source| E2eError::Spawn {
            program: program.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(E2eError::Check(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
