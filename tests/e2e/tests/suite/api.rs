//! The API on a real API server: the generated CRDs install, print the seed's columns, reject
//! invalid objects with a message naming the field, and keep valid objects as written.

use std::time::Duration;

use e2e::operator::install_crds;
use e2e::{E2eError, Result, TestNamespace, check, kubectl_stdin};
use kube::api::{Patch, PatchParams, PostParams};
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

const NODE: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: NAME}
spec:
  image: valkey/valkey:9.1
"#;

const CLUSTER: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {name: NAME}
spec: {}
"#;

/// Applies `yaml` with one change at `path` (a dotted path under spec) set to `value` (YAML).
fn with(base: &str, name: &str, spec_patch: &str) -> String {
    let mut doc: serde_yaml::Value =
        serde_yaml::from_str(&base.replace("NAME", name)).unwrap_or_default();
    let patch: serde_yaml::Value = serde_yaml::from_str(spec_patch).unwrap_or_default();
    if let (Some(spec), serde_yaml::Value::Mapping(p)) = (doc.get_mut("spec"), patch)
        && let serde_yaml::Value::Mapping(spec) = spec
    {
        for (k, v) in p {
            spec.insert(k, v);
        }
    }
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// `base` named `name`, with `config` as its spec.config, as JSON: every value stays a string
/// (YAML would read `yes` and `no` as booleans).
fn with_config(base: &str, name: &str, config: serde_json::Value) -> String {
    let mut doc: serde_json::Value =
        serde_yaml::from_str(&base.replace("NAME", name)).unwrap_or(serde_json::Value::Null);
    doc["spec"]["config"] = config;
    doc.to_string()
}

/// Creating `manifest` must fail, and the API's message must contain `field`.
async fn rejected(ns: &TestNamespace, what: &str, manifest: &str, field: &str) -> Result<()> {
    match kubectl_stdin(&["create", "-n", &ns.name, "-f", "-"], manifest).await {
        Ok(out) => Err(E2eError::Check(format!("{what}: accepted ({out})"))),
        Err(E2eError::Kubectl { stderr, .. }) => check(
            stderr.contains(field),
            format!("{what}: the message does not name {field}: {stderr}"),
        ),
        Err(e) => Err(e),
    }
}

/// Creating `manifest` must fail by a rule whose message names `key` (not by a type error that
/// names it only as a field path).
async fn refused_naming(ns: &TestNamespace, what: &str, manifest: &str, key: &str) -> Result<()> {
    rejected(ns, what, manifest, key).await?;
    match kubectl_stdin(
        &["create", "--dry-run=server", "-n", &ns.name, "-f", "-"],
        manifest,
    )
    .await
    {
        Err(E2eError::Kubectl { stderr, .. }) => check(
            !stderr.contains("must be of type"),
            format!("{what}: refused for its type, not by a rule: {stderr}"),
        ),
        other => Err(E2eError::Check(format!("{what}: {other:?}"))),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crds_are_established_and_print_the_seed_columns() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-columns").await?;
    ns.apply(&with(NODE, "cluster-sample-0-0", "{}")).await?;
    ns.apply(&with(CLUSTER, "cluster-sample", "{}")).await?;

    let nodes = ns.kubectl(&["get", "valkeynode"]).await?;
    let header: Vec<&str> = nodes
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    check(
        header == ["NAME", "READY", "ROLE", "POD", "AGE"],
        format!("valkeynode columns: {nodes}"),
    )?;
    // The short name and the category reach the same objects.
    let short = ns.kubectl(&["get", "vkn", "-o", "name"]).await?;
    check(
        short.trim() == "valkeynode.valkey.io/cluster-sample-0-0",
        format!("vkn: {short}"),
    )?;
    let category = ns.kubectl(&["get", "valkey", "-o", "name"]).await?;
    check(
        category.lines().count() == 2,
        format!("category valkey: {category}"),
    )?;

    // Status is the controllers' to write; here the test writes it to see the columns print it.
    let status = serde_json::json!({"status": {"state": "Ready", "reason": "ClusterHealthy", "readyShards": 3, "shards": 3,
        "progress": {"operation": "ScalingOut", "unit": "slots", "done": 6553, "total": 6553, "summary": "6553/6553 slots moved"}}});
    ns.api::<ValkeyCluster>()
        .patch_status(
            "cluster-sample",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    let wide = ns.kubectl(&["get", "valkeycluster", "-o", "wide"]).await?;
    let mut lines = wide.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    check(
        header == ["NAME", "STATE", "REASON", "READYSHARDS", "PROGRESS", "AGE"],
        format!("valkeycluster -o wide: {wide}"),
    )?;
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    check(
        row.get(..7)
            == Some(
                &[
                    "cluster-sample",
                    "Ready",
                    "ClusterHealthy",
                    "3",
                    "6553/6553",
                    "slots",
                    "moved",
                ][..],
            ),
        format!("valkeycluster row: {wide}"),
    )?;
    let narrow = ns.kubectl(&["get", "vkc"]).await?;
    check(
        narrow.lines().next().is_some_and(|h| !h.contains("REASON")),
        format!("REASON only in -o wide: {narrow}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_objects_are_rejected_naming_the_field() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-invalid").await?;
    let long = "x".repeat(41);
    let longer = "y".repeat(46);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "zero shards",
            with(CLUSTER, "c1", "{shards: 0}"),
            "spec.shards",
        ),
        (
            "too many shards",
            with(CLUSTER, "c2", "{shards: 100}"),
            "spec.shards",
        ),
        (
            "negative replicas",
            with(CLUSTER, "c3", "{replicas: -1}"),
            "spec.replicas",
        ),
        (
            "too many replicas",
            with(CLUSTER, "c4", "{replicas: 10}"),
            "spec.replicas",
        ),
        (
            "unknown workloadType",
            with(CLUSTER, "c5", "{workloadType: Pod}"),
            "spec.workloadType",
        ),
        (
            "unknown placement",
            with(CLUSTER, "c6", "{placement: Sometimes}"),
            "spec.placement",
        ),
        (
            "empty image",
            with(CLUSTER, "c7", "{image: ''}"),
            "spec.image",
        ),
        (
            "malformed image",
            with(CLUSTER, "c8", "{image: 'Valkey Server:latest'}"),
            "spec.image",
        ),
        (
            "image with a line break",
            with(CLUSTER, "c9", "{image: \"valkey/valkey:9.1\\nfoo\"}"),
            "spec.image",
        ),
        (
            "config value with a line break",
            with(CLUSTER, "c10", "{config: {maxmemory: \"1mb\\nport 7000\"}}"),
            "spec.config",
        ),
        (
            "config value with a control character",
            with(CLUSTER, "c11", "{config: {maxmemory: \"1mb\\u0007\"}}"),
            "spec.config",
        ),
        (
            "config key cluster-enabled",
            with(CLUSTER, "c12", "{config: {cluster-enabled: 'no'}}"),
            "spec.config",
        ),
        (
            "config key port",
            with(CLUSTER, "c13", "{config: {port: '7000'}}"),
            "spec.config",
        ),
        (
            "config key dir",
            with(CLUSTER, "c14", "{config: {dir: /tmp}}"),
            "spec.config",
        ),
        (
            "config key include",
            with(CLUSTER, "c15", "{config: {include: /etc/passwd}}"),
            "spec.config",
        ),
        (
            "config key cluster-config-file",
            with(CLUSTER, "c16", "{config: {cluster-config-file: x.conf}}"),
            "spec.config",
        ),
        (
            "config key not a directive",
            with(CLUSTER, "c17", "{config: {'Max Memory': 1mb}}"),
            "spec.config",
        ),
        (
            "persistence size zero",
            with(CLUSTER, "c18", "{persistence: {size: '0'}}"),
            "spec.persistence.size",
        ),
        (
            "persistence size not a quantity",
            with(CLUSTER, "c19", "{persistence: {size: lots}}"),
            "spec.persistence.size",
        ),
        (
            "bad password secret name",
            with(CLUSTER, "c20", "{auth: {passwordSecret: {name: Bad_Name}}}"),
            "spec.auth.passwordSecret.name",
        ),
        (
            "tolerations not a list",
            with(CLUSTER, "c21", "{tolerations: everything}"),
            "spec.tolerations",
        ),
        (
            "imagePullPolicy unknown",
            with(CLUSTER, "c22", "{imagePullPolicy: Sometimes}"),
            "spec.imagePullPolicy",
        ),
        (
            "cluster name too long for its nodes",
            with(CLUSTER, &long, "{}"),
            "metadata.name must be at most 40 characters",
        ),
        (
            "node name too long for valkey-<name>-data",
            with(NODE, &longer, "{}"),
            "metadata.name must be at most 45 characters",
        ),
        (
            "node without image",
            with(NODE, "n1", "{image: null}"),
            "spec.image",
        ),
        (
            "node config with a line break",
            with(NODE, "n2", "{config: {save: \"1 1\\nport 1\"}}"),
            "spec.config",
        ),
        (
            "node allowedRevision not a revision",
            with(NODE, "n3", "{allowedRevision: 'ABC!'}"),
            "spec.allowedRevision",
        ),
        (
            "node credentials without secret",
            with(NODE, "n4", "{credentials: {username: x}}"),
            "spec.credentials.secretName",
        ),
    ];
    check(cases.len() >= 20, "at least 20 cases")?;
    let mut failures = Vec::new();
    for (what, manifest, field) in &cases {
        if let Err(e) = rejected(&ns, what, manifest, field).await {
            failures.push(e.to_string());
        }
    }
    check(failures.is_empty(), failures.join("\n"))
}

#[tokio::test(flavor = "multi_thread")]
async fn updates_that_would_break_things_are_rejected() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-updates").await?;
    ns.apply(&with(CLUSTER, "grow", "{persistence: {size: 2Gi}}"))
        .await?;
    ns.apply(&with(
        NODE,
        "fixed",
        "{workloadType: StatefulSet, persistence: {size: 2Gi}}",
    ))
    .await?;
    let clusters = ns.api::<ValkeyCluster>();
    let nodes = ns.api::<ValkeyNode>();
    let expect_invalid = |what: &'static str, field: &'static str| {
        move |result: std::result::Result<serde_json::Value, kube::Error>| match result {
            Err(kube::Error::Api(status)) if status.code == 422 => check(
                status.message.contains(field),
                format!(
                    "{what}: the message does not name {field}: {}",
                    status.message
                ),
            ),
            other => Err(E2eError::Check(format!(
                "{what}: expected a 422, got {other:?}"
            ))),
        }
    };
    let patch = |v: serde_json::Value| Patch::Merge(v);
    let pp = PatchParams::default();
    let as_value = |r: std::result::Result<ValkeyCluster, kube::Error>| {
        r.map(|o| serde_json::to_value(o).unwrap_or_default())
    };
    let as_value_node = |r: std::result::Result<ValkeyNode, kube::Error>| {
        r.map(|o| serde_json::to_value(o).unwrap_or_default())
    };

    expect_invalid("shrinking a cluster's volume", "spec.persistence.size")(as_value(
        clusters
            .patch(
                "grow",
                &pp,
                &patch(serde_json::json!({"spec": {"persistence": {"size": "1Gi"}}})),
            )
            .await,
    ))?;
    expect_invalid("changing a cluster's workloadType", "spec.workloadType")(as_value(
        clusters
            .patch(
                "grow",
                &pp,
                &patch(serde_json::json!({"spec": {"workloadType": "Deployment"}})),
            )
            .await,
    ))?;
    expect_invalid("changing a node's workloadType", "spec.workloadType")(as_value_node(
        nodes
            .patch(
                "fixed",
                &pp,
                &patch(serde_json::json!({"spec": {"workloadType": "Deployment"}})),
            )
            .await,
    ))?;
    expect_invalid("shrinking a node's volume", "spec.persistence.size")(as_value_node(
        nodes
            .patch(
                "fixed",
                &pp,
                &patch(serde_json::json!({"spec": {"persistence": {"size": "500Mi"}}})),
            )
            .await,
    ))?;
    // Growing is fine.
    clusters
        .patch(
            "grow",
            &pp,
            &patch(serde_json::json!({"spec": {"persistence": {"size": "3Gi"}}})),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn valid_objects_round_trip_unchanged() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-roundtrip").await?;

    // Fully written objects (every default spelled out) come back exactly as sent.
    let cluster: ValkeyCluster = serde_yaml::from_str(
        r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {name: full}
spec:
  shards: 5
  replicas: 2
  image: valkey/valkey:8.0
  imagePullPolicy: Always
  resources: {requests: {cpu: 250m, memory: 512Mi}, limits: {memory: 1Gi}}
  tolerations: [{key: dedicated, operator: Equal, value: valkey, effect: NoSchedule}]
  nodeSelector: {disktype: ssd}
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-b]}]}]}}}
  placement: Required
  workloadType: Deployment
  persistence: {enabled: true, size: 10Gi, storageClassName: local}
  config: {maxmemory: 256mb, maxmemory-policy: allkeys-lru, save: "3600 1 300 100", notify-keyspace-events: "Ex#\"'{{ }}"}
  auth: {enabled: true, passwordSecret: {name: my-secret, key: pw}}
  podLabels: {team: data}
  podAnnotations: {note: "ünïcödé ✓"}
"#,
    )
    .map_err(|e| E2eError::Check(e.to_string()))?;
    let created = ns
        .api::<ValkeyCluster>()
        .create(&PostParams::default(), &cluster)
        .await?;
    let fetched = ns.api::<ValkeyCluster>().get("full").await?;
    check(
        created.spec == cluster.spec,
        format!("create changed the spec: {:?}", created.spec),
    )?;
    check(
        fetched.spec == cluster.spec,
        format!("get differs: {:?}", fetched.spec),
    )?;

    // A minimal object gets exactly the documented defaults.
    ns.apply(&with(CLUSTER, "minimal", "{}")).await?;
    let fetched = ns.api::<ValkeyCluster>().get("minimal").await?;
    let defaults: valkey_api::v1alpha1::ValkeyClusterSpec =
        serde_json::from_str("{}").map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        fetched.spec == defaults,
        format!(
            "server defaults differ from the types' defaults: {:?}",
            fetched.spec
        ),
    )?;

    let node: ValkeyNode = serde_yaml::from_str(
        r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: full-0-0}
spec:
  workloadType: StatefulSet
  image: valkey/valkey:9.1
  imagePullPolicy: IfNotPresent
  persistence: {enabled: false, size: 1Gi}
  config: {cluster-enabled: "yes"}
  credentials: {secretName: acl, username: healthcheck, passwordKey: health}
  allowedRevision: '0123456789'
"#,
    )
    .map_err(|e| E2eError::Check(e.to_string()))?;
    ns.api::<ValkeyNode>()
        .create(&PostParams::default(), &node)
        .await?;
    let fetched = tokio::time::timeout(
        Duration::from_secs(10),
        ns.api::<ValkeyNode>().get("full-0-0"),
    )
    .await
    .map_err(|_| E2eError::Check("get timed out".into()))??;
    check(
        fetched.spec == node.spec,
        format!("node differs: {:?}", fetched.spec),
    )
}

/// Config that would let Valkey run foreign code, undo the operator's safety, or take over what
/// the operator owns (addresses, authentication, TLS) is refused with a message naming the key;
/// tunables next to them, and the safe values of checked keys, are accepted.
#[tokio::test(flavor = "multi_thread")]
async fn config_the_operator_cannot_allow_is_refused_naming_the_key() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-config").await?;
    let refused: &[(&str, &str)] = &[
        ("loadmodule", "/tmp/evil.so"),
        ("enable-module-command", "yes"),
        ("enable-debug-command", "local"),
        ("enable-protected-configs", "yes"),
        ("cluster-allow-replica-migration", "yes"),
        ("cluster-node-timeout", "soon"),
        ("cluster-announce-ip", "10.0.0.9"),
        ("cluster-announce-tls-port", "7000"),
        ("cluster-announce-client-ipv4", "10.0.0.9"),
        ("replica-announce-ip", "10.0.0.9"),
        ("slave-announce-port", "7000"),
        ("aclfile", "/tmp/users.acl"),
        ("requirepass", "x"),
        ("masterauth", "x"),
        ("masteruser", "x"),
        ("primaryauth", "x"),
        ("primaryuser", "x"),
        ("acl-pubsub-default", "allchannels"),
        ("tls-port", "6380"),
        ("tls-cluster", "yes"),
        ("tls-replication", "yes"),
        ("tls-auth-clients", "no"),
        ("tls-cert-file", "/tmp/x.crt"),
        ("tls-key-file", "/tmp/x.key"),
        ("tls-ca-cert-file", "/tmp/ca.crt"),
        ("tls-auto-reload-interval", "0"),
        ("tls-client-key-file-pass", "x"),
        ("unixsocketperm", "777"),
        ("rename-command", "CONFIG x"),
        ("port", "7000"),
        ("cluster-port", "17000"),
    ];
    let mut failures = Vec::new();
    for (i, (key, value)) in refused.iter().enumerate() {
        let manifest = with_config(
            CLUSTER,
            &format!("refused-{i}"),
            serde_json::json!({ *key: value }),
        );
        // The message names the key itself, not only the field.
        if let Err(e) = refused_naming(&ns, &format!("config key {key}"), &manifest, key).await {
            failures.push(e.to_string());
        }
    }
    // appendonly is checked against persistence: off with persistence would lose writes on a
    // restart; without persistence it is the user's business.
    if let Err(e) = refused_naming(
        &ns,
        "appendonly no with persistence",
        &with_config(CLUSTER, "aof-off", serde_json::json!({"appendonly": "no"})),
        "appendonly",
    )
    .await
    {
        failures.push(e.to_string());
    }
    // A ValkeyNode, whoever writes it, never loads foreign code either.
    for key in [
        "loadmodule",
        "enable-module-command",
        "enable-debug-command",
        "enable-protected-configs",
    ] {
        let manifest = with_config(
            NODE,
            &format!("node-{key}"),
            serde_json::json!({ key: "yes" }),
        );
        if let Err(e) = refused_naming(&ns, &format!("node config key {key}"), &manifest, key).await
        {
            failures.push(e.to_string());
        }
    }
    check(failures.is_empty(), failures.join("\n"))?;

    // The safe values and the tunables are accepted.
    for (name, config) in [
        (
            "safe-values",
            serde_json::json!({"cluster-allow-replica-migration": "no", "appendonly": "yes", "cluster-node-timeout": "30000", "maxmemory": "100mb"}),
        ),
        (
            "tls-tunables",
            serde_json::json!({"tls-protocols": "TLSv1.3", "tls-ciphersuites": "TLS_AES_256_GCM_SHA384", "tls-session-caching": "no"}),
        ),
    ] {
        ns.apply(&with_config(CLUSTER, name, config)).await?;
    }
    let mut cache: serde_json::Value = serde_json::from_str(&with_config(
        CLUSTER,
        "cache-without-aof",
        serde_json::json!({"appendonly": "no"}),
    ))
    .unwrap_or_default();
    cache["spec"]["persistence"] = serde_json::json!({"enabled": false});
    ns.apply(&cache.to_string()).await?;
    Ok(())
}

/// `spec.auth.users`, `spec.tls` and `spec.networkPolicy`: what cannot work is refused naming the
/// field; a full valid object is kept as written.
#[tokio::test(flavor = "multi_thread")]
async fn users_tls_and_network_policy_are_checked() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("api-security").await?;
    let user = |name: &str, rules: &str| {
        format!(
            "{{auth: {{users: [{{name: {name}, passwordSecret: {{name: app-pw}}, rules: '{rules}'}}]}}}}"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a reserved user name",
            with(CLUSTER, "u1", &user("replication", "+@read")),
            "the names default, operator, healthcheck and replication are reserved",
        ),
        (
            "the default user as a named user",
            with(CLUSTER, "u2", &user("default", "+@read")),
            "reserved",
        ),
        (
            "a user without a password",
            with(CLUSTER, "u3", &user("app", "nopass ~* +@all")),
            "must not set passwords (nopass",
        ),
        (
            "a password in the rules",
            with(CLUSTER, "u4", &user("app", "~* >hunter2 +@all")),
            "must not set passwords",
        ),
        (
            "a hash in the rules",
            with(CLUSTER, "u5", &user("app", "#abc ~*")),
            "must not set passwords",
        ),
        (
            "resetpass in the rules",
            with(CLUSTER, "u6", &user("app", "~* resetpass")),
            "must not set passwords",
        ),
        (
            "a user without a password Secret",
            with(CLUSTER, "u7", "{auth: {users: [{name: app}]}}"),
            "spec.auth.users[0].passwordSecret",
        ),
        (
            "a user name with a space",
            with(CLUSTER, "u8", &user("'my app'", "~*")),
            "spec.auth.users[0].name",
        ),
        (
            "two users of one name",
            with(
                CLUSTER,
                "u9",
                "{auth: {users: [{name: app, passwordSecret: {name: a}}, {name: app, passwordSecret: {name: b}}]}}",
            ),
            "Duplicate value",
        ),
        (
            "a plain port without TLS",
            with(CLUSTER, "t1", "{tls: {plaintext: true}}"),
            "tls.plaintext keeps a plain port beside TLS and needs tls.enabled",
        ),
        (
            "a certificate without TLS",
            with(CLUSTER, "t2", "{tls: {certificateSecret: my-cert}}"),
            "tls.certificateSecret needs tls.enabled",
        ),
        (
            "a network peer with a range and labels",
            with(
                CLUSTER,
                "n1",
                "{networkPolicy: {clients: [{cidr: 10.0.0.0/8, podLabels: {app: web}}]}}",
            ),
            "either an IP range (cidr) or labels",
        ),
        (
            "an empty network peer",
            with(CLUSTER, "n2", "{networkPolicy: {clients: [{}]}}"),
            "needs cidr, namespaceLabels or podLabels",
        ),
        (
            "a network peer with a bad range",
            with(
                CLUSTER,
                "n3",
                "{networkPolicy: {clients: [{cidr: 10.0.0.0/40}]}}",
            ),
            "cidr must be an IP range in CIDR notation",
        ),
    ];
    let mut failures = Vec::new();
    for (what, manifest, field) in &cases {
        if let Err(e) = rejected(&ns, what, manifest, field).await {
            failures.push(e.to_string());
        }
    }
    check(failures.is_empty(), failures.join("\n"))?;

    // A full valid object is kept as written.
    let cluster: ValkeyCluster = serde_yaml::from_str(
        r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {name: secure}
spec:
  auth:
    enabled: false
    users:
      - {name: app, passwordSecret: {name: app-pw, key: password}, rules: "~app:* &* +@read +@write"}
      - {name: reporting, passwordSecret: {name: reporting-pw, key: pw}, rules: "~* -@all +@read"}
  tls: {enabled: true, certificateSecret: secure-cert, plaintext: true}
  networkPolicy:
    enabled: true
    clients:
      - {namespaceLabels: {team: web}, podLabels: {app: frontend}}
      - {podLabels: {app: worker}}
      - {cidr: 10.20.0.0/16}
"#,
    )
    .map_err(|e| E2eError::Check(e.to_string()))?;
    let created = ns
        .api::<ValkeyCluster>()
        .create(&PostParams::default(), &cluster)
        .await?;
    check(
        created.spec == cluster.spec,
        format!("create changed the spec: {:?}", created.spec),
    )?;

    // TLS is chosen when a cluster is created: turning it off (or on) later is refused.
    let refused = ns
        .api::<ValkeyCluster>()
        .patch(
            "secure",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"tls": {"enabled": false, "plaintext": false, "certificateSecret": null}}})),
        )
        .await;
    match refused {
        Err(kube::Error::Api(status))
            if status.code == 422 && status.message.contains("tls.enabled cannot change") =>
        {
            Ok(())
        }
        other => Err(E2eError::Check(format!(
            "turning TLS off on an existing cluster: expected a 422 naming tls.enabled, got {other:?}"
        ))),
    }
}
