//! The pod features common charts rely on a kubelet for, each a test that passes on any cluster:
//! a pod checks what it sees and exits 0 (its output says what was wrong otherwise), or a probe's
//! verdict shows in the pod's status.

use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, check, describe_pod, wait_until};
use k8s_openapi::api::core::v1::Pod;

use crate::{POD_READY, VALKEY_IMAGE, passes};

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_mounts_inside_a_read_only_config_map_volume() -> Result<()> {
    let ns = TestNamespace::create("nested").await?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: conf}}
data: {{valkey.conf: "port 6379\n"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: users}}
stringData: {{users.acl: "user default on nopass ~* +@all\n"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: nested}}
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    command: [sh, -c]
    args:
    - |
      set -e
      grep -q 'port 6379' /config/valkey.conf
      grep -q 'user default' /config/users/users.acl
      if touch /config/new 2>/dev/null; then echo "/config is writable"; exit 1; fi
      if touch /config/users/new 2>/dev/null; then echo "/config/users is writable"; exit 1; fi
      echo nested-ok
    volumeMounts:
    - {{name: conf, mountPath: /config, readOnly: true}}
    - {{name: users, mountPath: /config/users, readOnly: true}}
  volumes:
  - {{name: conf, configMap: {{name: conf}}}}
  - {{name: users, secret: {{secretName: users}}}}
"#
    );
    let log = passes(&ns, &manifest, "nested", "check").await?;
    check(log.contains("nested-ok"), format!("output: {log}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn sub_paths_mount_one_key_and_one_directory() -> Result<()> {
    let ns = TestNamespace::create("subpath").await?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: app}}
data: {{app.conf: "a=1", other.conf: "b=2"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: subpath}}
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    command: [sh, -c]
    args:
    - |
      set -e
      test "$(cat /etc/app/app.conf)" = a=1
      if [ -e /etc/app/other.conf ]; then echo "the whole ConfigMap is mounted"; exit 1; fi
      echo hello > /work/sub/file
      test "$(cat /all/sub/file)" = hello
      echo subpath-ok
    volumeMounts:
    - {{name: app, mountPath: /etc/app/app.conf, subPath: app.conf}}
    - {{name: scratch, mountPath: /work/sub, subPath: sub}}
    - {{name: scratch, mountPath: /all}}
  volumes:
  - {{name: app, configMap: {{name: app}}}}
  - {{name: scratch, emptyDir: {{}}}}
"#
    );
    let log = passes(&ns, &manifest, "subpath", "check").await?;
    check(log.contains("subpath-ok"), format!("output: {log}"))
}

/// One container's readiness script passes (a file it wrote and an env var), the other's liveness
/// script exits 3: the first becomes ready, the second is restarted for it.
#[tokio::test(flavor = "multi_thread")]
async fn exec_probes_run_shell_scripts_and_follow_their_exit_code() -> Result<()> {
    let ns = TestNamespace::create("scripts").await?;
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: scripts}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ready
    image: {VALKEY_IMAGE}
    command: [sh, -c, 'echo yes > /tmp/state; exec sleep 3600']
    env: [{{name: MODE, value: "on"}}]
    readinessProbe:
      exec: {{command: [sh, -c, 'test "$(cat /tmp/state)" = yes && test "$MODE" = on']}}
      periodSeconds: 1
    livenessProbe:
      exec: {{command: [sh, -c, 'test -e /tmp/state']}}
      periodSeconds: 1
  - name: failing
    image: {VALKEY_IMAGE}
    command: [sh, -c, 'exec sleep 3600']
    livenessProbe:
      exec: {{command: [sh, -c, 'if [ -e /tmp/never ]; then exit 0; fi; exit 3']}}
      periodSeconds: 1
      failureThreshold: 1
"#
    ))
    .await?;
    let pods = ns.api::<Pod>();
    let pod = wait_until(
        POD_READY,
        "container ready Ready, container failing restarted",
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get("scripts").await?;
                let statuses = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default();
                let of = |n: &str| statuses.iter().find(|c| c.name == n).cloned();
                let ready = of("ready").is_some_and(|c| c.ready);
                let restarted = of("failing").is_some_and(|c| c.restart_count >= 1);
                Ok(if ready && restarted {
                    Poll::Ready(p)
                } else {
                    Poll::NotYet(describe_pod(&p))
                })
            }
        },
    )
    .await?;
    let statuses = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    let ready = statuses.iter().find(|c| c.name == "ready");
    check(
        ready.is_some_and(|c| c.restart_count == 0),
        format!("the passing liveness script restarted its container: {ready:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn init_containers_run_in_order_before_the_app() -> Result<()> {
    let ns = TestNamespace::create("init").await?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: init}}
spec:
  restartPolicy: Never
  initContainers:
  - name: first
    image: {VALKEY_IMAGE}
    command: [sh, -c, 'echo one >> /shared/order']
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  - name: second
    image: {VALKEY_IMAGE}
    command: [sh, -c, 'test "$(cat /shared/order)" = one && echo two >> /shared/order']
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    command: [sh, -c, 'cat /shared/order; test "$(cat /shared/order | tr "\n" " ")" = "one two " && echo init-ok']
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  volumes:
  - {{name: shared, emptyDir: {{}}}}
"#
    );
    let log = passes(&ns, &manifest, "init", "check").await?;
    check(log.contains("init-ok"), format!("output: {log}"))?;
    let pod = ns.pod("init").await?;
    let inits = pod
        .status
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default();
    let completed = inits
        .iter()
        .filter(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        })
        .count();
    check(
        completed == 2,
        format!("init containers not both Completed: {inits:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_projected_volume_holds_a_token_a_config_map_a_secret_and_labels() -> Result<()> {
    let ns = TestNamespace::create("projected").await?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: proj}}
data: {{a: from-configmap}}
---
apiVersion: v1
kind: Secret
metadata: {{name: proj}}
stringData: {{s: from-secret}}
---
apiVersion: v1
kind: Pod
metadata:
  name: projected
  labels: {{app: projected}}
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    command: [sh, -c]
    args:
    - |
      set -e
      test "$(cat /proj/cm/a)" = from-configmap
      test "$(cat /proj/sec/s)" = from-secret
      grep -q 'app="projected"' /proj/labels
      test "$(awk -F. '{{print NF}}' /proj/token)" -eq 3
      p=$(cut -d. -f2 /proj/token | tr '_-' '/+')
      while [ $(( ${{#p}} % 4 )) -ne 0 ]; do p="$p="; done
      echo "$p" | base64 -d | grep -q '"test-audience"'
      echo projected-ok
    volumeMounts:
    - {{name: all, mountPath: /proj, readOnly: true}}
  volumes:
  - name: all
    projected:
      sources:
      - serviceAccountToken: {{path: token, expirationSeconds: 3600, audience: test-audience}}
      - configMap: {{name: proj, items: [{{key: a, path: cm/a}}]}}
      - secret: {{name: proj, items: [{{key: s, path: sec/s}}]}}
      - downwardAPI: {{items: [{{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}]}}
"#
    );
    let log = passes(&ns, &manifest, "projected", "check").await?;
    check(log.contains("projected-ok"), format!("output: {log}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_downward_api_fills_env_and_files() -> Result<()> {
    let ns = TestNamespace::create("downward").await?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: downward
  annotations: {{team: valkey}}
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    command: [sh, -c]
    args:
    - |
      echo "name=$POD_NAME ns=$POD_NAMESPACE ip=$POD_IP node=$NODE host=$HOST_IP sa=$SA uid=$POD_UID"
      set -e
      test "$POD_NAME" = downward
      test -n "$POD_NAMESPACE" && test -n "$POD_UID" && test -n "$NODE"
      test "$SA" = default
      grep -q "^$POD_IP[[:space:]]" /etc/hosts
      test -n "$HOST_IP"
      grep -q 'team="valkey"' /info/annotations
      test "$(cat /info/name)" = downward
      echo downward-ok
    env:
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: POD_NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: POD_UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
    - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: SA, valueFrom: {{fieldRef: {{fieldPath: spec.serviceAccountName}}}}}}
    volumeMounts:
    - {{name: info, mountPath: /info}}
  volumes:
  - name: info
    downwardAPI:
      items:
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
"#
    );
    let log = passes(&ns, &manifest, "downward", "check").await?;
    check(log.contains("downward-ok"), format!("output: {log}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn var_references_expand_in_env_command_and_args() -> Result<()> {
    let ns = TestNamespace::create("expand").await?;
    // `$(NAME)` is the kubelet's, `$NAME` the shell's; `$$(NAME)` stays literal.
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: expand}}
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: {VALKEY_IMAGE}
    env:
    - {{name: FIRST, value: one}}
    - {{name: BOTH, value: "$(FIRST)-two"}}
    - {{name: ESCAPED, value: "$$(FIRST)"}}
    - {{name: MISSING, value: "$(NOT_DEFINED)"}}
    command:
    - sh
    - -c
    - |
      echo "arg=$1 both=$BOTH escaped=$ESCAPED missing=$MISSING in-command=$(FIRST)"
      set -e
      test "$1" = one-two
      test "$BOTH" = one-two
      test "$ESCAPED" = '$$(FIRST)'
      test "$MISSING" = '$$(NOT_DEFINED)'
      test '$(FIRST)' = one
      echo expand-ok
    - --
    args: ["$(BOTH)"]
"#
    );
    let log = passes(&ns, &manifest, "expand", "check").await?;
    check(log.contains("expand-ok"), format!("output: {log}"))
}

/// A StatefulSet as a chart writes it for `valkey/valkey`: no password, protected mode on (as the
/// image ships), an exec `valkey-cli ping` readiness probe. The probe runs inside the pod, over
/// its loopback, where protected mode lets it in; from outside the pod the server refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_valkey_statefulset_with_an_exec_ping_probe_becomes_ready() -> Result<()> {
    let ns = TestNamespace::create("plainvk").await?;
    ns.apply(&format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: plain}}
spec:
  serviceName: plain
  replicas: 1
  selector: {{matchLabels: {{app: plain}}}}
  template:
    metadata: {{labels: {{app: plain}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: valkey
        image: {VALKEY_IMAGE}
        ports: [{{name: client, containerPort: 6379}}]
        readinessProbe:
          exec: {{command: [valkey-cli, ping]}}
          periodSeconds: 2
"#
    ))
    .await?;
    let pod = ns.wait_pod_ready("plain-0", POD_READY).await?;
    if !e2e::is_localkube() {
        return Ok(());
    }
    // From the host the same server refuses: its protected mode is really on.
    let ip = e2e::pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    // The server refuses at once, before any command: read what it says.
    let greeting = async {
        let mut stream = tokio::net::TcpStream::connect((ip.as_str(), 6379)).await?;
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let said = tokio::time::timeout(Duration::from_secs(10), greeting).await;
    check(
        matches!(&said, Ok(Ok(text)) if text.starts_with("-DENIED")),
        format!("a connection from the host should be DENIED by protected mode, got {said:?}"),
    )
}
