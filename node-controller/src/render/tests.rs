use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use valkey_api::v1alpha1::ValkeyNode;

use super::exporter;
use super::*;

fn node(yaml: &str) -> ValkeyNode {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("fixture: {e}"))
}

const STATEFUL: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: cache-0-0, namespace: prod, uid: 7f9d2c1e-0000-4000-8000-000000000001}
spec:
  image: valkey/valkey:9.1
  persistence: {enabled: true, size: 2Gi, storageClassName: fast}
  config: {cluster-enabled: "yes", maxmemory: 100mb, save: "3600 1 300 100"}
  credentials: {secretName: cache-acl, username: healthcheck}
  podLabels: {valkey.io/cluster: cache, valkey.io/node: not-this}
  podAnnotations: {note: hello}
  nodeSelector: {topology.kubernetes.io/zone: zone-b}
  tolerations: [{key: dedicated, operator: Equal, value: valkey, effect: NoSchedule}]
  resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}
  allowedRevision: ""
"#;

const CACHE: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: scratch, namespace: dev, uid: 7f9d2c1e-0000-4000-8000-000000000002}
spec:
  workloadType: Deployment
  image: valkey/valkey:8.0
  config: {protected-mode: "no"}
"#;

fn pod_template(children: &Children) -> &PodTemplateSpec {
    match &children.workload {
        Workload::StatefulSet(s) => s.spec.as_ref().map(|s| &s.template),
        Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
    }
    .unwrap_or_else(|| panic!("workload without spec"))
}

fn valkey_conf(children: &Children) -> String {
    children
        .config_map
        .data
        .as_ref()
        .and_then(|d| d.get(&config_key(&children.revision)))
        .cloned()
        .unwrap_or_default()
}

/// Rendered objects are compared with files under `tests/golden/`; `UPDATE_GOLDEN=1` rewrites them.
fn assert_golden(file: &str, children: &Children) {
    let mut text = String::new();
    let workload = match &children.workload {
        Workload::StatefulSet(s) => serde_yaml::to_string(s),
        Workload::Deployment(d) => serde_yaml::to_string(d),
    };
    for doc in [
        serde_yaml::to_string(&children.config_map),
        serde_yaml::to_string(&children.pvc),
        workload,
    ] {
        text.push_str("---\n");
        text.push_str(&doc.unwrap_or_else(|e| panic!("{e}")));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        golden == text,
        "{} differs from the rendering (UPDATE_GOLDEN=1 to accept):\n{text}",
        path.display()
    );
}

#[test]
fn statefulset_with_persistence_and_credentials_matches_golden() {
    let children = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    assert_golden("statefulset.yaml", &children);
}

#[test]
fn deployment_without_persistence_matches_golden() {
    let children = build(&node(CACHE)).unwrap_or_else(|e| panic!("{e}"));
    assert!(children.pvc.is_none());
    assert_golden("deployment.yaml", &children);
}

#[test]
fn the_contract_names_and_ownership() {
    let children = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let Workload::StatefulSet(sts) = &children.workload else {
        panic!("not a StatefulSet")
    };
    assert_eq!(sts.metadata.name.as_deref(), Some("valkey-cache-0-0"));
    assert_eq!(sts.spec.as_ref().and_then(|s| s.replicas), Some(1));
    let pvc = children.pvc.as_ref().unwrap_or_else(|| panic!("no PVC"));
    assert_eq!(pvc.metadata.name.as_deref(), Some("valkey-cache-0-0-data"));
    assert!(
        pvc.metadata.owner_references.is_none(),
        "the PVC must outlive the ValkeyNode"
    );
    for owners in [
        &sts.metadata.owner_references,
        &children.config_map.metadata.owner_references,
    ] {
        let owner = owners
            .as_ref()
            .and_then(|o| o.first())
            .unwrap_or_else(|| panic!("no owner"));
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ValkeyNode", "cache-0-0")
        );
        assert_eq!(owner.controller, Some(true));
    }
    // The node-controller's selector label wins over a parent's attempt to set it.
    let labels = pod_template(&children)
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    assert_eq!(
        labels
            .as_ref()
            .and_then(|l| l.get("valkey.io/node"))
            .map(String::as_str),
        Some("cache-0-0")
    );
    assert_eq!(
        labels
            .as_ref()
            .and_then(|l| l.get("valkey.io/cluster"))
            .map(String::as_str),
        Some("cache")
    );
}

#[test]
fn pod_runs_restricted() {
    let children = build(&node(CACHE)).unwrap_or_else(|e| panic!("{e}"));
    let spec = pod_template(&children)
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("no pod spec"));
    let pod_sc = spec
        .security_context
        .as_ref()
        .unwrap_or_else(|| panic!("no pod securityContext"));
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(
        pod_sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    let container = &spec.containers[0];
    let sc = container
        .security_context
        .as_ref()
        .unwrap_or_else(|| panic!("no container securityContext"));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    assert!(container.readiness_probe.is_some() && container.liveness_probe.is_some());
}

#[test]
fn credentials_are_referenced_never_copied() {
    let children = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let spec = pod_template(&children)
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("no pod spec"));
    let env = spec.containers[0].env.clone().unwrap_or_default();
    let auth = env
        .iter()
        .find(|e| e.name == "REDISCLI_AUTH")
        .unwrap_or_else(|| panic!("no REDISCLI_AUTH"));
    assert!(
        auth.value.is_none(),
        "the password must come from the Secret"
    );
    let key = auth
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref());
    assert_eq!(
        key.map(|k| (k.name.as_str(), k.key.as_str())),
        Some(("cache-acl", "password"))
    );
    let probe = spec.containers[0]
        .readiness_probe
        .as_ref()
        .and_then(|p| p.exec.as_ref());
    let command = probe.and_then(|e| e.command.clone()).unwrap_or_default();
    assert!(
        command.windows(2).any(|w| w == ["--user", "healthcheck"]),
        "{command:?}"
    );
}

#[test]
fn only_the_listed_credential_files_reach_the_pod() {
    let secret_volume = |yaml: &str| {
        let children = build(&node(yaml)).unwrap_or_else(|e| panic!("{e}"));
        pod_template(&children)
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|v| v.name == "credentials")
            .and_then(|v| v.secret)
            .unwrap_or_else(|| panic!("no credentials volume"))
    };
    assert!(
        secret_volume(STATEFUL).items.is_none(),
        "without a list, the whole Secret"
    );
    let listed = STATEFUL.replace(
        "credentials: {secretName: cache-acl, username: healthcheck}",
        "credentials: {secretName: cache-acl, username: healthcheck, files: [users.acl, replication.conf]}",
    );
    assert_ne!(listed, STATEFUL);
    let items: Vec<(String, String)> = secret_volume(&listed)
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|i| (i.key, i.path))
        .collect();
    assert_eq!(
        items,
        [
            ("users.acl".to_owned(), "users.acl".to_owned()),
            ("replication.conf".to_owned(), "replication.conf".to_owned())
        ]
    );
}

#[test]
fn valkey_conf_holds_the_config_as_given_then_what_the_pod_needs() {
    let children = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let conf = valkey_conf(&children);
    let lines: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "cluster-enabled yes",
            "maxmemory 100mb",
            "save 3600 1 300 100",
            "dir /data",
            "port 6379"
        ]
    );
}

#[test]
fn an_empty_value_is_written_as_an_empty_argument() {
    let mut n = node(CACHE);
    n.spec.config = Some(BTreeMap::from([
        ("save".to_owned(), String::new()),
        ("rdb-del-sync-files".to_owned(), "yes".to_owned()),
    ]));
    let children = build(&n).unwrap_or_else(|e| panic!("{e}"));
    let conf = valkey_conf(&children);
    assert!(
        conf.lines().any(|l| l == "save \"\""),
        "no save \"\" line in:\n{conf}"
    );
    assert!(
        conf.lines().any(|l| l == "rdb-del-sync-files yes"),
        "{conf}"
    );
}

#[test]
fn without_maxmemory_the_memory_limit_sets_it_and_a_given_one_wins() {
    let mut n = node(STATEFUL);
    if let Some(config) = n.spec.config.as_mut() {
        config.remove("maxmemory");
    }
    let conf = valkey_conf(&build(&n).unwrap_or_else(|e| panic!("{e}")));
    // 60% of the 256Mi limit.
    assert!(conf.lines().any(|l| l == "maxmemory 161061273"), "{conf}");
    n.spec.resources = None;
    let conf = valkey_conf(&build(&n).unwrap_or_else(|e| panic!("{e}")));
    assert!(!conf.contains("maxmemory"), "no limit, no default:\n{conf}");
}

/// Values that would break a naive template: none may add a line to valkey.conf or a key to YAML.
const HOSTILE: &[&str] = &[
    "a\" b",
    "it's",
    "# not a comment",
    "{{ template }}",
    "{% if x %}",
    "---",
    "...",
    "key: value",
    "[1, 2]",
    "&anchor *alias !tag",
    "ünïcödé ✓ 日本語",
    "tab\tinside",
];

#[test]
fn hostile_values_stay_one_value() {
    for value in HOSTILE {
        let mut n = node(CACHE);
        let config = BTreeMap::from([("maxmemory-policy".to_owned(), (*value).to_owned())]);
        n.spec.config = Some(config);
        n.spec.pod_annotations = Some(BTreeMap::from([("note".to_owned(), (*value).to_owned())]));
        n.spec.image = format!("valkey/valkey:{value}");
        let result = build(&n);
        if value.chars().any(char::is_control) {
            assert!(
                matches!(result, Err(RenderError::InvalidConfig(_))),
                "{value:?}: {result:?}"
            );
            continue;
        }
        let children = result.unwrap_or_else(|e| panic!("{value:?}: {e}"));
        let conf = valkey_conf(&children);
        let expected = format!("maxmemory-policy {value}");
        assert_eq!(
            conf.lines().filter(|l| !l.starts_with('#')).count(),
            3,
            "{value:?}:\n{conf}"
        );
        assert!(conf.lines().any(|l| l == expected), "{value:?}:\n{conf}");
        let template = pod_template(&children);
        let annotations = template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default();
        assert_eq!(annotations.get("note").map(String::as_str), Some(*value));
        let image = template
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone());
        assert_eq!(
            image.as_deref(),
            Some(format!("valkey/valkey:{value}").as_str())
        );
    }
}

#[test]
fn line_breaks_and_control_characters_are_refused() {
    for value in ["a\nb", "a\rb", "x\n---\nkind: Secret", "bell\u{7}", "nul\0"] {
        let mut n = node(CACHE);
        n.spec.config = Some(BTreeMap::from([("save".to_owned(), value.to_owned())]));
        assert!(
            matches!(build(&n), Err(RenderError::InvalidConfig(_))),
            "{value:?}"
        );
    }
    let mut n = node(CACHE);
    n.spec.config = Some(BTreeMap::from([(
        "bad key\nport".to_owned(),
        "1".to_owned(),
    )]));
    assert!(matches!(build(&n), Err(RenderError::InvalidConfig(_))));
}

#[test]
fn the_revision_follows_what_shapes_the_pod() {
    let base = node(STATEFUL);
    let rev = |n: &ValkeyNode| build(n).unwrap_or_else(|e| panic!("{e}")).revision;
    let original = rev(&base);
    assert_eq!(original, rev(&base), "deterministic");

    let mut n = base.clone();
    n.spec.allowed_revision = Some("abc".into());
    assert_eq!(rev(&n), original, "allowedRevision does not shape the pod");

    let mut n = base.clone();
    n.spec.image = "valkey/valkey:9.2".into();
    assert_ne!(rev(&n), original, "image");

    // A setting Valkey changes at runtime is set live, not rolled: the revision stays, and
    // valkey.conf (what a restarted pod reads) has the new value.
    let mut n = base.clone();
    n.spec
        .config
        .get_or_insert_default()
        .insert("maxmemory".into(), "200mb".into());
    let live = build(&n).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(live.revision, original, "a live setting");
    assert_eq!(
        live.live.get("maxmemory").map(String::as_str),
        Some("200mb")
    );
    assert!(valkey_conf(&live).lines().any(|l| l == "maxmemory 200mb"));

    let mut n = base.clone();
    n.spec
        .config
        .get_or_insert_default()
        .insert("databases".into(), "4".into());
    assert_ne!(rev(&n), original, "a restart-only setting");
    assert!(
        !build(&n)
            .unwrap_or_else(|e| panic!("{e}"))
            .live
            .contains_key("databases")
    );

    // Which is which follows the version the server reported.
    let mut n = base.clone();
    n.spec
        .config
        .get_or_insert_default()
        .insert("io-threads".into(), "2".into());
    let unknown = rev(&n);
    n.status = serde_json::from_value(serde_json::json!({"valkeyVersion": "9.1.2"})).ok();
    let io_threads_live = rev(&n);
    n.status = serde_json::from_value(serde_json::json!({"valkeyVersion": "8.0.1"})).ok();
    assert_eq!(rev(&n), unknown, "8.0 restarts for io-threads");
    assert_ne!(io_threads_live, unknown, "9.1 sets io-threads live");

    let mut n = base;
    n.spec.resources = None;
    assert_ne!(rev(&n), original, "resources");
}

#[test]
fn a_larger_volume_grows_the_claim_and_restarts_nothing() {
    let base = node(STATEFUL);
    let before = build(&base).unwrap_or_else(|e| panic!("{e}"));
    let mut n = base;
    if let Some(p) = n.spec.persistence.as_mut() {
        p.size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("5Gi".into());
    }
    let after = build(&n).unwrap_or_else(|e| panic!("{e}"));
    let size = |c: &Children| {
        c.pvc
            .as_ref()
            .and_then(volume::request)
            .map(|q| q.0.clone())
    };
    assert_eq!(size(&before).as_deref(), Some("2Gi"));
    assert_eq!(size(&after).as_deref(), Some("5Gi"));
    assert_eq!(after.revision, before.revision, "the pod's revision stays");
    assert_eq!(after.workload, before.workload, "the workload is untouched");
    assert_eq!(after.config_map, before.config_map);
}

#[test]
fn a_deployment_waits_paused_for_its_revision() {
    let paused = |allowed: Option<&str>| {
        let mut n = node(CACHE);
        n.spec.allowed_revision = allowed.map(str::to_owned);
        let children = build(&n).unwrap_or_else(|e| panic!("{e}"));
        let revision = children.revision.clone();
        let Workload::Deployment(d) = children.workload else {
            panic!("not a Deployment")
        };
        (d.spec.and_then(|s| s.paused), revision)
    };
    let (open, revision) = paused(None);
    assert_eq!(open, Some(false));
    assert_eq!(paused(Some("0000000000")).0, Some(true));
    assert_eq!(paused(Some(&revision)).0, Some(false));
}

#[test]
fn a_statefulset_holds_its_pod_by_partition() {
    let partition = |allowed: Option<&str>| {
        let mut n = node(STATEFUL);
        n.spec.allowed_revision = allowed.map(str::to_owned);
        let children = build(&n).unwrap_or_else(|e| panic!("{e}"));
        let revision = children.revision.clone();
        let Workload::StatefulSet(s) = children.workload else {
            panic!("not a StatefulSet")
        };
        let strategy = s.spec.and_then(|s| s.update_strategy);
        (
            strategy
                .and_then(|u| u.rolling_update)
                .and_then(|r| r.partition),
            revision,
        )
    };
    let (open, revision) = partition(None);
    assert_eq!(open, Some(0));
    assert_eq!(partition(Some("0000000000")).0, Some(1));
    assert_eq!(partition(Some(&revision)).0, Some(0));
}

#[test]
fn each_revision_reads_its_own_key() {
    let children = build(&node(CACHE)).unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<&String> = children
        .config_map
        .data
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, [&config_key(&children.revision)]);
    let volumes = pod_template(&children)
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let items = volumes
        .iter()
        .find(|v| v.name == "config")
        .and_then(|v| v.config_map.as_ref())
        .and_then(|c| c.items.clone())
        .unwrap_or_default();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].key, config_key(&children.revision));
    assert_eq!(items[0].path, "valkey.conf");
}

#[test]
fn held_configs_stay_until_the_pod_has_rolled_out() {
    let held = |rolled_out: bool| {
        let children = build(&node(CACHE)).unwrap_or_else(|e| panic!("{e}"));
        let mut config_map = children.config_map.clone();
        let mut live = children.config_map.clone();
        let data = live.data.get_or_insert_default();
        data.clear();
        data.insert("valkey-0000000000.conf".into(), "port 6379".into());
        data.insert(config_key(&children.revision), "edited by hand".into());
        data.insert("notes".into(), "not a config".into());
        keep_held_configs(&mut config_map, Some(&live), rolled_out);
        (config_map.data.unwrap_or_default(), children.revision)
    };
    let (data, revision) = held(false);
    assert_eq!(
        data.keys().cloned().collect::<Vec<_>>(),
        ["valkey-0000000000.conf".to_owned(), config_key(&revision)]
    );
    assert!(
        data[&config_key(&revision)].contains("protected-mode no"),
        "the desired config is rendered, never copied"
    );
    let (data, revision) = held(true);
    assert_eq!(
        data.keys().cloned().collect::<Vec<_>>(),
        [config_key(&revision)]
    );
}

#[test]
fn a_tls_node_serves_tls_only_and_mounts_only_the_three_tls_keys() {
    let tls = STATEFUL.replace(
        "  allowedRevision: \"\"",
        "  tls: {secretName: cache-tls}\n  allowedRevision: \"\"",
    );
    assert_ne!(tls, STATEFUL);
    // The version the node-controller observed decides the live settings.
    let mut tls_node = node(&tls);
    tls_node.status = Some(valkey_api::v1alpha1::ValkeyNodeStatus {
        valkey_version: Some("9.1.2".into()),
        ..Default::default()
    });
    let children = build(&tls_node).unwrap_or_else(|e| panic!("{e}"));
    let conf = valkey_conf(&children);
    for line in [
        "port 0",
        "tls-port 6379",
        "tls-cert-file /etc/valkey/tls/tls.crt",
        "tls-key-file /etc/valkey/tls/tls.key",
        "tls-ca-cert-file /etc/valkey/tls/ca.crt",
        "tls-replication yes",
        "tls-cluster yes",
    ] {
        assert!(conf.lines().any(|l| l == line), "{line} in\n{conf}");
    }
    assert!(
        !conf.lines().any(|l| l == "port 6379"),
        "no plain port:\n{conf}"
    );
    // Valkey 9.1 reloads renewed files by itself: set live, never in valkey.conf.
    assert_eq!(
        children
            .live
            .get("tls-auto-reload-interval")
            .map(String::as_str),
        Some("10")
    );
    assert!(!conf.contains("tls-auto-reload-interval"));

    let spec = pod_template(&children).spec.clone().unwrap_or_default();
    let volume = spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "tls")
        .and_then(|v| v.secret)
        .unwrap_or_else(|| panic!("no tls volume"));
    assert_eq!(volume.secret_name.as_deref(), Some("cache-tls"));
    let keys: Vec<String> = volume
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(keys, ["tls.crt", "tls.key", "ca.crt"]);
    let probe = serde_json::to_string(&spec.containers).unwrap_or_default();
    assert!(
        probe.contains("--tls") && probe.contains("/etc/valkey/tls/ca.crt"),
        "the probe speaks TLS: {probe}"
    );

    let plain = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    assert!(valkey_conf(&plain).lines().any(|l| l == "port 6379"));
    assert!(!valkey_conf(&plain).contains("tls-"));
    assert!(!plain.live.contains_key("tls-auto-reload-interval"));
}

/// STATEFUL with the exporter the cluster-controller asks for when metrics are on.
fn with_exporter(yaml: &str) -> ValkeyNode {
    let with = yaml.replace(
        "  allowedRevision: \"\"",
        "  exporter: {image: \"oliver006/redis_exporter:v1.45.0\", resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 64Mi}}}\n  allowedRevision: \"\"",
    );
    assert_ne!(with, yaml);
    node(&with)
}

fn exporter_container(children: &Children) -> k8s_openapi::api::core::v1::Container {
    pod_template(children)
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "exporter").cloned())
        .unwrap_or_else(|| panic!("no exporter container"))
}

#[test]
fn a_statefulset_with_an_exporter_over_tls_matches_golden() {
    let tls = STATEFUL.replace(
        "  allowedRevision: \"\"",
        "  tls: {secretName: cache-tls}\n  allowedRevision: \"\"",
    );
    let children = build(&with_exporter(&tls)).unwrap_or_else(|e| panic!("{e}"));
    assert_golden("statefulset-exporter-tls.yaml", &children);
}

/// Nodes without an exporter render exactly as before exporters existed: the same revision, so
/// an operator upgrade restarts no pod. These are the revisions of the golden files of release
/// 0.1.0.
#[test]
fn a_node_without_an_exporter_keeps_the_revision_it_had_before_exporters() {
    let rev = |yaml: &str| {
        build(&node(yaml))
            .unwrap_or_else(|e| panic!("{e}"))
            .revision
    };
    assert_eq!(rev(STATEFUL), "c6d05fa78c");
    assert_eq!(rev(CACHE), "1f160a442c");
    let children = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let spec = pod_template(&children).spec.clone().unwrap_or_default();
    assert_eq!(
        spec.containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["valkey"]
    );
}

#[test]
fn the_exporter_reads_the_local_server_as_the_nodes_user_with_the_password_from_the_secret() {
    let children = build(&with_exporter(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let exporter = exporter_container(&children);
    assert_eq!(
        exporter.image.as_deref(),
        Some("oliver006/redis_exporter:v1.45.0")
    );
    let port = exporter
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name.unwrap_or_default(), p.container_port))
        .collect::<Vec<_>>();
    assert_eq!(
        port,
        [(
            valkey_api::contract::METRICS_PORT_NAME.to_owned(),
            i32::from(valkey_api::contract::METRICS_PORT)
        )]
    );
    let limits = exporter.resources.as_ref().and_then(|r| r.limits.clone());
    assert_eq!(
        limits
            .as_ref()
            .and_then(|l| l.get("memory"))
            .map(|q| q.0.as_str()),
        Some("64Mi")
    );

    // The password: from the Secret into a variable, from the variable into the address, which
    // only the exporter's own server is read with (never the exporter's password setting, which
    // its /scrape endpoint would send to any address it is given).
    let env = exporter.env.clone().unwrap_or_default();
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [exporter::PASSWORD_ENV, "REDIS_ADDR"],
        "order matters for $(VAR)"
    );
    let key = env[0]
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .map(|k| (k.name.as_str(), k.key.as_str()));
    assert_eq!(key, Some(("cache-acl", "password")));
    assert_eq!(
        env[1].value.as_deref(),
        Some("redis://healthcheck:$(VALKEY_EXPORTER_PASSWORD)@localhost:6379")
    );
    assert!(
        !env.iter()
            .any(|e| matches!(e.name.as_str(), "REDIS_PASSWORD" | "REDIS_USER")),
        "{names:?}"
    );
    let args = exporter.args.clone().unwrap_or_default();
    assert!(exporter.command.is_none(), "the image's own entrypoint");
    assert!(
        !args
            .iter()
            .any(|a| a.contains("password") || a.contains("redis.addr")),
        "{args:?}"
    );
    assert!(args.iter().any(|a| a == "--set-client-name=false"));
    assert!(
        exporter.volume_mounts.is_none(),
        "the exporter mounts nothing"
    );

    let probe = exporter
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .unwrap_or_else(|| panic!("no readiness probe"));
    assert_eq!(probe.path.as_deref(), Some("/health"));
    assert_eq!(
        probe.port,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("metrics".into())
    );
    let sc = exporter.security_context.clone().unwrap_or_default();
    assert_eq!(
        (sc.read_only_root_filesystem, sc.allow_privilege_escalation),
        (Some(true), Some(false))
    );
    // The Valkey container is the one it was.
    let spec = pod_template(&children).spec.clone().unwrap_or_default();
    assert_eq!(spec.containers[0].name, "valkey");
}

#[test]
fn over_tls_the_exporter_speaks_tls_to_the_local_server() {
    let tls = STATEFUL.replace(
        "  allowedRevision: \"\"",
        "  tls: {secretName: cache-tls}\n  allowedRevision: \"\"",
    );
    let children = build(&with_exporter(&tls)).unwrap_or_else(|e| panic!("{e}"));
    let exporter = exporter_container(&children);
    let addr = exporter
        .env
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == "REDIS_ADDR")
        .and_then(|e| e.value);
    assert_eq!(
        addr.as_deref(),
        Some("rediss://healthcheck:$(VALKEY_EXPORTER_PASSWORD)@localhost:6379")
    );
    assert!(
        exporter
            .args
            .unwrap_or_default()
            .iter()
            .any(|a| a == "--skip-tls-verification")
    );

    // Without credentials, no login and no variable.
    let mut open = with_exporter(STATEFUL);
    open.spec.credentials = None;
    let children = build(&open).unwrap_or_else(|e| panic!("{e}"));
    let env = exporter_container(&children).env.unwrap_or_default();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].value.as_deref(), Some("redis://localhost:6379"));
}

#[test]
fn adding_removing_or_changing_the_exporter_changes_the_revision() {
    let rev = |n: &ValkeyNode| build(n).unwrap_or_else(|e| panic!("{e}")).revision;
    let without = rev(&node(STATEFUL));
    let with = with_exporter(STATEFUL);
    let original = rev(&with);
    assert_ne!(original, without, "added");
    let mut image = with.clone();
    if let Some(e) = image.spec.exporter.as_mut() {
        e.image = "oliver006/redis_exporter:v1.62.0".into();
    }
    assert_ne!(rev(&image), original, "image");
    let mut resources = with.clone();
    if let Some(e) = resources.spec.exporter.as_mut() {
        e.resources = None;
    }
    assert_ne!(rev(&resources), original, "resources");
    let mut removed = with;
    removed.spec.exporter = None;
    assert_eq!(
        rev(&removed),
        without,
        "removed: back to the revision without one"
    );
}

const RESTORED: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: orders-0-0, namespace: prod, uid: 7f9d2c1e-0000-4000-8000-000000000009}
spec:
  image: valkey/valkey:9.1
  persistence: {enabled: true, size: 2Gi}
  config: {appendonly: "no", dbfilename: "\"orders.rdb\""}
  credentials: {secretName: orders-acl, username: healthcheck, files: [users.acl]}
  initialData:
    store:
      s3:
        endpoint: https://store.example:9000
        bucket: backups
        prefix: valkey/prod
        credentials: {secretName: store-keys, accessKeyIdKey: id, secretAccessKeyKey: secret}
        caBundle: {secretName: store-ca}
    object: prod/orders/nightly-1a2b3c4d/shard-0.rdb
    sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    bytes: 524288
"#;

fn restore_container(children: &Children) -> k8s_openapi::api::core::v1::Container {
    let spec = pod_template(children).spec.as_ref().expect("pod spec");
    let init = spec.init_containers.as_deref().unwrap_or_default();
    assert_eq!(init.len(), 1, "{init:?}");
    init[0].clone()
}

#[test]
fn initial_data_is_an_init_container_of_the_operators_image_with_the_store_keys_as_files() {
    let options = Options {
        restore_image: "registry.example/valkey-operator/node-controller:1.2.3".into(),
    };
    let children = build_with(&node(RESTORED), &options).expect("build");
    let restore = restore_container(&children);
    assert_eq!(restore.name, restore::RESTORE_CONTAINER);
    assert_eq!(
        restore.image.as_deref(),
        Some(options.restore_image.as_str())
    );
    assert_eq!(restore.command, Some(vec!["valkey-restore".to_owned()]));
    assert_eq!(
        restore.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let args = restore.args.clone().unwrap_or_default();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
    };
    assert_eq!(arg("--object"), "prod/orders/nightly-1a2b3c4d/shard-0.rdb");
    assert_eq!(arg("--sha256").len(), 64);
    assert_eq!(arg("--bytes"), "524288");
    assert_eq!(arg("--dir"), paths::DATA_DIR);
    // The server's own dbfilename, as Valkey reads it.
    assert_eq!(arg("--dbfilename"), "orders.rdb");
    assert_eq!(arg("--endpoint"), "https://store.example:9000");
    assert_eq!(arg("--bucket"), "backups");
    assert_eq!(arg("--prefix"), "valkey/prod");
    assert_eq!(arg("--path-style"), "true");
    assert_eq!(arg("--ca-bundle-file"), "/etc/valkey/restore-ca/ca.crt");
    // Credentials are files, never arguments or environment.
    assert!(restore.env.as_deref().unwrap_or_default().is_empty());
    assert!(!args.iter().any(|a| a == "id" || a == "secret"), "{args:?}");

    let spec = pod_template(&children).spec.clone().expect("pod spec");
    let volumes = spec.volumes.unwrap_or_default();
    let keys = volumes
        .iter()
        .find(|v| v.name == "restore-credentials")
        .and_then(|v| v.secret.clone())
        .expect("the store's Secret");
    assert_eq!(keys.secret_name.as_deref(), Some("store-keys"));
    let items: Vec<(String, String)> = keys
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|i| (i.key, i.path))
        .collect();
    assert_eq!(
        items,
        vec![
            ("id".to_owned(), "access-key-id".to_owned()),
            ("secret".to_owned(), "secret-access-key".to_owned())
        ]
    );
    // Mounted into the init container only: the server's and every other container never see
    // the store's keys.
    let mounts_of = |c: &k8s_openapi::api::core::v1::Container| -> Vec<String> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.clone())
            .collect()
    };
    assert!(mounts_of(&restore).contains(&"restore-credentials".to_owned()));
    assert!(mounts_of(&restore).contains(&"restore-ca".to_owned()));
    assert!(mounts_of(&restore).contains(&"data".to_owned()));
    for c in &spec.containers {
        let mounts = mounts_of(c);
        assert!(
            !mounts.iter().any(|m| m.starts_with("restore")),
            "{} mounts {mounts:?}",
            c.name
        );
    }
    // And the init container never sees the node's own credentials.
    assert!(!mounts_of(&restore).contains(&"credentials".to_owned()));
    let security = restore.security_context.expect("security context");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
}

#[test]
fn without_initial_data_there_is_no_init_container_and_the_revision_is_as_before() {
    let with = node(RESTORED);
    let mut without = with.clone();
    without.spec.initial_data = None;
    let plain = build(&without).expect("build");
    assert!(
        pod_template(&plain)
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_none()
    );
    // Setting it, or clearing it, changes the revision (a parent holds the running pod on its
    // revision with allowedRevision when it clears it).
    let restored = build(&with).expect("build");
    assert_ne!(plain.revision, restored.revision);
    let mut other = with.clone();
    if let Some(d) = other.spec.initial_data.as_mut() {
        d.sha256 = "f".repeat(64);
    }
    assert_ne!(build(&other).expect("build").revision, restored.revision);
    // Without a CA bundle or endpoint: AWS S3 and the system's trust store.
    let mut aws = with.clone();
    if let Some(d) = aws.spec.initial_data.as_mut() {
        d.store.s3.ca_bundle = None;
        d.store.s3.endpoint = None;
    }
    let children = build(&aws).expect("build");
    let args = restore_container(&children).args.unwrap_or_default();
    assert!(
        !args
            .iter()
            .any(|a| a == "--endpoint" || a == "--ca-bundle-file"),
        "{args:?}"
    );
    assert_eq!(
        restore_container(&children).image.as_deref(),
        Some(DEFAULT_RESTORE_IMAGE)
    );
}

const SENTINEL: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: orders-sentinel-0, namespace: prod, uid: 7f9d2c1e-0000-4000-8000-000000000003}
spec:
  server: Sentinel
  image: valkey/valkey:9.1
  config: {sentinel: "resolve-hostnames no"}
  resources: {limits: {memory: 64Mi}}
  tls: {secretName: orders-tls}
"#;

#[test]
fn a_sentinel_runs_on_a_writable_copy_of_its_config_on_port_26379() {
    let children = build(&node(SENTINEL)).unwrap_or_else(|e| panic!("{e}"));
    let conf = valkey_conf(&children);
    assert!(conf.contains("sentinel resolve-hostnames no\n"), "{conf}");
    assert!(
        conf.contains("tls-port 26379\n") && conf.contains("port 0\n"),
        "{conf}"
    );
    assert!(conf.contains("tls-replication yes"), "{conf}");
    assert!(!conf.contains("tls-cluster"), "no cluster bus: {conf}");
    assert!(
        !conf.contains("maxmemory"),
        "a Sentinel holds no data set: {conf}"
    );
    assert!(
        children.live.is_empty(),
        "a Sentinel takes no CONFIG SET: {:?}",
        children.live
    );
    let spec = pod_template(&children)
        .spec
        .clone()
        .unwrap_or_else(|| panic!("no pod spec"));
    let valkey = &spec.containers[0];
    let command = valkey.command.clone().unwrap_or_default().join(" ");
    assert!(
        command.contains("cp /etc/valkey/config/valkey.conf /data/sentinel.conf")
            && command.contains("exec valkey-server /data/sentinel.conf --sentinel"),
        "{command}"
    );
    let ports: Vec<i32> = valkey
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [26379]);
    let probe = valkey
        .readiness_probe
        .as_ref()
        .and_then(|p| p.exec.as_ref())
        .and_then(|e| e.command.clone())
        .unwrap_or_default()
        .join(" ");
    assert!(probe.contains("-p 26379"), "{probe}");
    // Its data volume is an emptyDir: the copy is made afresh at every start.
    assert!(children.pvc.is_none());
}

#[test]
fn a_server_keeps_its_revision_now_that_nodes_may_run_sentinels() {
    let mut explicit = node(STATEFUL);
    explicit.spec.server = valkey_api::v1alpha1::NodeServer::Valkey;
    let before = build(&node(STATEFUL)).unwrap_or_else(|e| panic!("{e}"));
    let after = build(&explicit).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(before.revision, after.revision);
    assert_golden("statefulset.yaml", &after);
}
