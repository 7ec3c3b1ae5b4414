//! What the test cluster must do for the operator's end-to-end tests: nodes in zones, Valkey pods
//! with persistent volumes, Services with endpoints, garbage collection, restarts, scheduling,
//! ServiceAccount permissions and image errors. Each test has its own namespace.

use std::time::Duration;

use e2e::{
    E2eError, Poll, Result, TestNamespace, check, describe_pod, pod_ip, valkey, valkey_cmd,
    wait_until,
};

use crate::{POD_READY, skip};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;

pub const WITH_VOLUME_READY: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn nodes_are_ready_in_three_zones() -> Result<()> {
    let localkube = e2e::is_localkube();
    let table = wait_until(
        Duration::from_secs(60),
        "3 Ready nodes in 3 zones",
        || async {
            let out = e2e::kubectl(&[
                "get",
                "nodes",
                "-L",
                "topology.kubernetes.io/zone",
                "--no-headers",
            ])
            .await?;
            let rows: Vec<Vec<String>> = out
                .lines()
                .map(|l| l.split_whitespace().map(String::from).collect())
                .collect();
            let ready: Vec<&Vec<String>> = rows
                .iter()
                .filter(|r| r.get(1).is_some_and(|s| s == "Ready"))
                .collect();
            let mut zones: Vec<&str> = ready
                .iter()
                .filter_map(|r| r.get(5).map(String::as_str))
                .collect();
            zones.sort();
            zones.dedup();
            Ok(if ready.len() >= 3 && zones.len() >= 3 {
                Poll::Ready(out)
            } else {
                Poll::NotYet(out)
            })
        },
    )
    .await;
    match table {
        Ok(out) if localkube => {
            for (node, zone) in [
                ("localkube-a", "zone-a"),
                ("localkube-b", "zone-b"),
                ("localkube-c", "zone-c"),
            ] {
                check(
                    out.lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.first() == Some(&node)
                            && f.get(1) == Some(&"Ready")
                            && f.last() == Some(&zone)
                    }),
                    format!("{node} is not Ready in {zone}:\n{out}"),
                )?;
            }
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(E2eError::Timeout { .. }) if !localkube => {
            skip("this cluster does not have 3 Ready nodes in 3 zones")
        }
        Err(e) => Err(e),
    }
}

pub fn valkey_statefulset(name: &str, image: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
spec:
  serviceName: {name}
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: valkey
        image: {image}
        command: ["valkey-server"]
        args: ["--protected-mode", "no", "--appendonly", "yes", "--dir", "/data"]
        ports:
        - {{name: client, containerPort: 6379}}
        readinessProbe:
          exec:
            command: ["valkey-cli", "ping"]
          periodSeconds: 2
        volumeMounts:
        - {{name: data, mountPath: /data}}
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: 1Gi
"#
    )
}

/// A 1-replica StatefulSet of `image` answers PING, and a key written to it survives the pod's
/// deletion (same claim, same volume). Returns `INFO server` of the second pod.
async fn valkey_keeps_data_across_pod_deletion(ns: &TestNamespace, image: &str) -> Result<String> {
    ns.apply(&valkey_statefulset("kv", image)).await?;
    let pod = ns.wait_pod_ready("kv-0", WITH_VOLUME_READY).await?;
    let ip = pod_ip(&pod)
        .ok_or_else(|| E2eError::Check(format!("no pod IP: {}", describe_pod(&pod))))?;
    let mut conn = valkey(&ip, 6379).await?;
    check(
        valkey_cmd(&mut conn, &["PING"]).await? == "PONG",
        "PING did not answer PONG",
    )?;
    valkey_cmd(&mut conn, &["SET", "e2e:key", "kept"]).await?;
    // Written to disk now, whatever the fsync policy.
    valkey_cmd(&mut conn, &["SAVE"]).await?;
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let volume_before = pvcs
        .get("data-kv-0")
        .await?
        .spec
        .and_then(|s| s.volume_name);
    check(volume_before.is_some(), "claim data-kv-0 is not bound")?;

    let old_uid = pod.metadata.uid.clone();
    ns.kubectl(&["delete", "pod", "kv-0", "--wait=false"])
        .await?;
    let pods = ns.api::<Pod>();
    let pod = wait_until(WITH_VOLUME_READY, "a new kv-0 Ready", || {
        let (pods, old_uid) = (pods.clone(), old_uid.clone());
        async move {
            Ok(match pods.get_opt("kv-0").await? {
                Some(p) if p.metadata.uid != old_uid && e2e::pod_ready(&p) => Poll::Ready(p),
                Some(p) => Poll::NotYet(describe_pod(&p)),
                None => Poll::NotYet("kv-0 not recreated yet".into()),
            })
        }
    })
    .await?;
    let volume_after = pvcs
        .get("data-kv-0")
        .await?
        .spec
        .and_then(|s| s.volume_name);
    check(
        volume_before == volume_after,
        format!("volume changed: {volume_before:?} -> {volume_after:?}"),
    )?;
    let ip = pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let mut conn = valkey(&ip, 6379).await?;
    let value = valkey_cmd(&mut conn, &["GET", "e2e:key"]).await?;
    check(
        value == "kept",
        format!("after the pod was deleted, GET e2e:key = {value:?}"),
    )?;
    valkey_cmd(&mut conn, &["INFO", "server"]).await
}

fn version_of(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .map(str::trim)
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_9_1_statefulset_keeps_its_data() -> Result<()> {
    let ns = TestNamespace::create("kv91").await?;
    let info = valkey_keeps_data_across_pod_deletion(&ns, "valkey/valkey:9.1").await?;
    let version = version_of(&info).unwrap_or_default();
    check(
        version.starts_with("9.1."),
        format!("expected valkey 9.1.x, INFO says {version:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_8_0_statefulset_runs_the_8_0_server() -> Result<()> {
    if e2e::is_localkube() && !e2e::localkube_dir().join("images/valkey-8.0/bin").is_dir() {
        return skip("the image table has no valkey-8.0 (make localkube-valkey-images)");
    }
    let ns = TestNamespace::create("kv80").await?;
    let info = valkey_keeps_data_across_pod_deletion(&ns, "valkey/valkey:8.0").await?;
    let version = version_of(&info).unwrap_or_default();
    check(
        version.starts_with("8.0."),
        format!("expected valkey 8.0.x, INFO says {version:?}"),
    )
}

fn valkey_deployment(name: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: valkey
        image: valkey/valkey:9.1
        command: ["valkey-server", "--protected-mode", "no"]
        ports:
        - {{name: client, containerPort: 6379}}
        readinessProbe:
          tcpSocket:
            port: client
          periodSeconds: 2
"#
    )
}

/// The one Ready pod with label app=`app`.
async fn ready_pod_of(ns: &TestNamespace, app: &str) -> Result<Pod> {
    let pods = ns.api::<Pod>();
    let selector = format!("app={app}");
    wait_until(POD_READY, &format!("a Ready pod of {app}"), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(match list.items.iter().find(|p| e2e::pod_ready(p)) {
                Some(p) => Poll::Ready(p.clone()),
                None => Poll::NotYet(
                    list.items
                        .iter()
                        .map(describe_pod)
                        .collect::<Vec<_>>()
                        .join(" | "),
                ),
            })
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn service_gets_an_endpoint_slice_with_the_ready_pod() -> Result<()> {
    let ns = TestNamespace::create("svc").await?;
    ns.apply(&valkey_deployment("web")).await?;
    ns.apply(
        r#"
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - {name: client, port: 6379, targetPort: client}
"#,
    )
    .await?;
    let pod = ready_pod_of(&ns, "web").await?;
    let ip = pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let slices = ns.api::<EndpointSlice>();
    wait_until(
        Duration::from_secs(60),
        "an EndpointSlice of web with the pod IP",
        || {
            let (slices, ip) = (slices.clone(), ip.clone());
            async move {
                let list = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                    .await?;
                let found = list
                    .items
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .any(|e| {
                        e.addresses.contains(&ip)
                            && e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                    });
                Ok(if found {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!(
                        "{:?}",
                        list.items.iter().map(|s| &s.endpoints).collect::<Vec<_>>()
                    ))
                })
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_deployment_cascades_to_its_pods() -> Result<()> {
    let ns = TestNamespace::create("gc").await?;
    ns.apply(&valkey_deployment("gc")).await?;
    ready_pod_of(&ns, "gc").await?;
    ns.kubectl(&[
        "delete",
        "deployment",
        "gc",
        "--cascade=background",
        "--wait=false",
    ])
    .await?;
    let (pods, sets) = (ns.api::<Pod>(), ns.api::<ReplicaSet>());
    wait_until(
        Duration::from_secs(120),
        "the ReplicaSet and pod of gc to be collected",
        || {
            let (pods, sets) = (pods.clone(), sets.clone());
            async move {
                let lp = ListParams::default().labels("app=gc");
                let (p, r) = (pods.list(&lp).await?, sets.list(&lp).await?);
                Ok(if p.items.is_empty() && r.items.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!(
                        "{} pods, {} replicasets left",
                        p.items.len(),
                        r.items.len()
                    ))
                })
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduling_follows_node_selectors_and_affinity() -> Result<()> {
    let zone_b_nodes = e2e::kubectl(&[
        "get",
        "nodes",
        "-l",
        "topology.kubernetes.io/zone=zone-b",
        "-o",
        "name",
    ])
    .await?;
    let ns = TestNamespace::create("sched").await?;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: nowhere
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: e2e.valkey-operator.io/never, operator: Exists}
  containers:
  - name: valkey
    image: valkey/valkey:9.1
"#,
    )
    .await?;
    let pods = ns.api::<Pod>();
    wait_until(Duration::from_secs(60), "nowhere Unschedulable", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("nowhere").await?;
            let cond = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled").cloned());
            let unschedulable = cond.as_ref().is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref().is_some_and(|m| m.contains("affinity"))
            });
            let pending = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
            Ok(
                if unschedulable
                    && pending
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
                {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(describe_pod(&p))
                },
            )
        }
    })
    .await?;

    if zone_b_nodes.trim().is_empty() {
        return skip("no node is in zone-b on this cluster; only the unschedulable case ran");
    }
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: in-zone-b
spec:
  nodeSelector:
    topology.kubernetes.io/zone: zone-b
  containers:
  - name: valkey
    image: valkey/valkey:9.1
    command: ["valkey-server", "--protected-mode", "no"]
"#,
    )
    .await?;
    let pod = ns.wait_pod_ready("in-zone-b", POD_READY).await?;
    let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
    check(
        zone_b_nodes
            .lines()
            .any(|l| l.trim() == format!("node/{node}")),
        format!(
            "in-zone-b runs on {node}, not on a zone-b node ({})",
            zone_b_nodes.trim()
        ),
    )?;
    if e2e::is_localkube() {
        check(
            node == "localkube-b",
            format!("expected localkube-b, got {node}"),
        )?;
    }
    Ok(())
}

/// Puts the in-cluster probe program into the local image table (atomically, so parallel tests
/// never see half a file).
fn install_probe_image() -> Result<()> {
    let bin = e2e::localkube_dir().join("images/e2e-probe/bin");
    std::fs::create_dir_all(&bin)
        .map_err(|e| E2eError::Check(format!("{}: {e}", bin.display())))?;
    let tmp = bin.join(format!(".incluster-probe.{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_incluster-probe"), &tmp)
        .and_then(|_| std::fs::rename(&tmp, bin.join("incluster-probe")))
        .map_err(|e| E2eError::Check(format!("installing the probe image: {e}")))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_account_token_gets_exactly_its_role() -> Result<()> {
    if !e2e::is_localkube() {
        return skip(
            "the probe program is placed in localkube's image table; no such image elsewhere",
        );
    }
    install_probe_image()?;
    let ns = TestNamespace::create("rbac").await?;
    ns.apply(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata:
  name: reader
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: configmap-reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: configmap-reader
subjects:
- kind: ServiceAccount
  name: reader
---
apiVersion: v1
kind: Pod
metadata:
  name: probe
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers:
  - name: probe
    image: valkey-operator.test/e2e-probe:latest
    command: ["incluster-probe"]
"#,
    )
    .await?;
    let pods = ns.api::<Pod>();
    let pod = wait_until(POD_READY, "the probe pod to finish", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("probe").await?;
            Ok(match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded" | "Failed") => Poll::Ready(p),
                _ => Poll::NotYet(describe_pod(&p)),
            })
        }
    })
    .await?;
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let log = e2e::localkube_container_log(&pod, "probe").unwrap_or_default();
    check(
        phase == "Succeeded",
        format!("probe pod {phase}; its output:\n{log}"),
    )?;
    check(
        log.contains("secrets: forbidden (403)"),
        format!("unexpected probe output:\n{log}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_without_a_program_waits_with_a_pull_error() -> Result<()> {
    let ns = TestNamespace::create("pull").await?;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: nothing
spec:
  containers:
  - name: app
    image: valkey-operator.test/no-such-program:0.0.1
"#,
    )
    .await?;
    let pods = ns.api::<Pod>();
    wait_until(
        POD_READY,
        "nothing waiting with ErrImagePull or ImagePullBackOff",
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get("nothing").await?;
                let reason = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .and_then(|c| c.state.as_ref())
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone());
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                Ok(
                    if matches!(reason.as_deref(), Some("ErrImagePull" | "ImagePullBackOff"))
                        && phase.as_deref() == Some("Pending")
                    {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(describe_pod(&p))
                    },
                )
            }
        },
    )
    .await
}
