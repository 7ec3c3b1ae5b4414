//! ValkeyCluster → ValkeyNodes (the spec each member should have) and ValkeyNodes → engine
//! members (what the engine reasons about). Pure.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{NodeCredentials, ValkeyCluster, ValkeyNode, ValkeyNodeSpec};

use super::auth::{self, CREDENTIALS_DIR, HEALTHCHECK_PASSWORD_KEY, HEALTHCHECK_USER};
use super::labels::{member_labels, member_name, position};
use super::placement;
use crate::engine::Member;

/// Pod annotation that changes when the ACL Secret does, so pods restart (one at a time) to load it.
pub const CREDENTIALS_REVISION_ANNOTATION: &str = "valkey.io/credentials-revision";
/// The Valkey port of every ValkeyNode's pod (fixed by the node-controller).
pub const VALKEY_PORT: u16 = 6379;

/// What the cluster decides about authentication, for the node specs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAuth {
    /// `spec.auth.enabled: false`: the default user stays open.
    Open,
    /// The ACL Secret and the fingerprint of what pods load from it.
    Acl { secret: String, revision: String },
}

/// Settings every member of a cluster runs with, before the user's own `spec.config` (which may
/// override the tunable ones; the API refuses the keys the operator owns).
fn config(cluster: &ValkeyCluster, auth: &NodeAuth) -> BTreeMap<String, String> {
    let mut config = BTreeMap::from([
        ("cluster-enabled".to_owned(), "yes".to_owned()),
        ("cluster-config-file".to_owned(), "nodes.conf".to_owned()),
        // Fail over within seconds rather than Valkey's default 15 s.
        ("cluster-node-timeout".to_owned(), "5000".to_owned()),
        // The operator places replicas per shard; Valkey must not move them between shards.
        (
            "cluster-allow-replica-migration".to_owned(),
            "no".to_owned(),
        ),
    ]);
    // Valkey 9 can hand a primary's slots to its replica as part of a graceful shutdown, so a
    // deleted or evicted primary pod costs no failover timeout. Older servers refuse the value.
    if image_major_version(&cluster.spec.image).is_some_and(|major| major >= 9) {
        config.insert("shutdown-on-sigterm".to_owned(), "failover".to_owned());
    }
    if cluster.spec.persistence.enabled {
        config.insert("appendonly".to_owned(), "yes".to_owned());
    }
    match auth {
        NodeAuth::Open => {
            config.insert("protected-mode".to_owned(), "no".to_owned());
        }
        NodeAuth::Acl { .. } => {
            config.insert(
                "aclfile".to_owned(),
                format!("{CREDENTIALS_DIR}/{}", auth::ACL_FILE_KEY),
            );
            config.insert(
                "include".to_owned(),
                format!("{CREDENTIALS_DIR}/{}", auth::REPLICATION_CONF_KEY),
            );
        }
    }
    config.extend(cluster.spec.config.clone().unwrap_or_default());
    config
}

/// The major version an image's tag names (`valkey/valkey:9.1` → 9), when it names one.
fn image_major_version(image: &str) -> Option<u32> {
    let reference = image.split('@').next()?;
    let (_, tag) = reference.rsplit('/').next()?.split_once(':')?;
    tag.split(['.', '-']).next()?.parse().ok()
}

/// The ValkeyNode member `(shard, index)` of `cluster` should be. `allowed_revision` is the
/// parent's gate on pod restarts (see `spec.allowedRevision`), decided by the caller.
pub fn desired_node(
    cluster: &ValkeyCluster,
    shard: u32,
    index: u32,
    auth: &NodeAuth,
    allowed_revision: Option<String>,
) -> Option<ValkeyNode> {
    let cluster_name = cluster.meta().name.as_deref()?;
    let spec = &cluster.spec;
    let labels = member_labels(cluster_name, shard, index);
    let mut pod_labels = spec.pod_labels.clone().unwrap_or_default();
    pod_labels.extend(labels.clone());
    let mut pod_annotations = spec.pod_annotations.clone().unwrap_or_default();
    let credentials = match auth {
        NodeAuth::Open => None,
        NodeAuth::Acl { secret, revision } => {
            pod_annotations.insert(CREDENTIALS_REVISION_ANNOTATION.to_owned(), revision.clone());
            Some(NodeCredentials {
                secret_name: secret.clone(),
                username: HEALTHCHECK_USER.to_owned(),
                password_key: HEALTHCHECK_PASSWORD_KEY.to_owned(),
            })
        }
    };
    Some(ValkeyNode {
        metadata: ObjectMeta {
            name: Some(member_name(cluster_name, shard, index)),
            namespace: cluster.meta().namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![cluster.controller_owner_ref(&())?]),
            ..Default::default()
        },
        spec: ValkeyNodeSpec {
            workload_type: spec.workload_type,
            image: spec.image.clone(),
            image_pull_policy: spec.image_pull_policy,
            resources: spec.resources.clone(),
            tolerations: spec.tolerations.clone(),
            node_selector: spec.node_selector.clone(),
            affinity: placement::affinity(
                spec.affinity.as_ref(),
                spec.placement,
                cluster_name,
                shard,
            ),
            persistence: Some(spec.persistence.clone()),
            config: Some(config(cluster, auth)),
            pod_labels: Some(pod_labels),
            pod_annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
            credentials,
            allowed_revision,
        },
        status: None,
    })
}

/// The parent's gate for an existing node: keep what it has; pin a node that has none to the
/// revision it runs, so that a later spec change waits for the engine's `AllowRestart`. A node
/// whose pod cannot run (unschedulable, image, crash loop) has nothing to protect and would never
/// be rolled by the engine, which rolls only a healthy cluster: it takes a new spec at once.
/// A node that is merely not ready this moment (a restart, a slow probe) keeps its gate: letting
/// it go would restart it beside the member the engine is rolling.
pub fn allowed_revision(existing: Option<&ValkeyNode>) -> Option<String> {
    let node = existing?;
    if stuck_condition(node).is_some() {
        return None;
    }
    node.spec
        .allowed_revision
        .clone()
        .filter(|r| !r.is_empty())
        .or_else(|| node.status.as_ref()?.current_revision.clone())
}

/// Ready-condition reasons of a ValkeyNode that no amount of waiting fixes: a person must act.
const STUCK_REASONS: &[&str] = &[
    "Unschedulable",
    "ErrImagePull",
    "ImagePullBackOff",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "InvalidConfig",
];

/// The node's Ready condition, when it says the pod cannot run.
fn stuck_condition(node: &ValkeyNode) -> Option<&Condition> {
    let status = node.status.as_ref().filter(|s| !s.ready)?;
    let ready = plumbing::conditions::find_condition(status.conditions.as_deref()?, "Ready")?;
    (ready.status == "False" && STUCK_REASONS.contains(&ready.reason.as_str())).then_some(ready)
}

/// The first member whose pod cannot run, as a problem for the cluster's status.
pub fn stuck_member(nodes: &[ValkeyNode]) -> Option<super::status::Problem> {
    let mut sorted: Vec<&ValkeyNode> = nodes.iter().collect();
    sorted.sort_by_key(|n| n.name_any());
    sorted.into_iter().find_map(|node| {
        stuck_condition(node).map(|ready| super::status::Problem {
            reason: ready.reason.clone(),
            message: format!("ValkeyNode {}: {}", node.name_any(), ready.message),
        })
    })
}

/// The engine's view of a ValkeyNode; `None` for a node whose labels do not place it.
pub fn member(node: &ValkeyNode) -> Option<Member> {
    let (shard, index) = position(node.meta().labels.as_ref())?;
    let status = node.status.as_ref();
    let mut member = Member::new(shard, index, node.name_any());
    member.address = status
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, VALKEY_PORT));
    // Ready only for the spec the node-controller has seen: a stale status is not readiness.
    let current = status.is_some_and(|s| s.observed_generation == node.meta().generation);
    member.ready = current && status.is_some_and(|s| s.ready);
    member.current_revision = status.and_then(|s| s.current_revision.clone());
    member.desired_revision = status
        .filter(|_| current)
        .and_then(|s| s.desired_revision.clone());
    member.allowed_revision = node.spec.allowed_revision.clone().filter(|r| !r.is_empty());
    Some(member)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> ValkeyCluster {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const CLUSTER: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {name: cache, namespace: prod, uid: 0000-1}
spec:
  shards: 3
  replicas: 1
  config: {maxmemory: 100mb, cluster-node-timeout: "2000"}
  podLabels: {team: data, valkey.io/shard: "99"}
"#;

    #[test]
    fn a_member_node_names_its_place_and_carries_the_cluster_settings() {
        let auth = NodeAuth::Acl {
            secret: "cache-acl".into(),
            revision: "abc".into(),
        };
        let node =
            desired_node(&cluster(CLUSTER), 1, 0, &auth, None).unwrap_or_else(|| panic!("no node"));
        assert_eq!(node.metadata.name.as_deref(), Some("cache-1-0"));
        let owner = node
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .unwrap_or_else(|| panic!("no owner"));
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ValkeyCluster", Some(true))
        );
        let config = node.spec.config.clone().unwrap_or_default();
        assert_eq!(
            config.get("cluster-enabled").map(String::as_str),
            Some("yes")
        );
        assert_eq!(
            config.get("cluster-node-timeout").map(String::as_str),
            Some("2000"),
            "the user's tunables win"
        );
        assert_eq!(config.get("maxmemory").map(String::as_str), Some("100mb"));
        assert_eq!(
            config.get("appendonly").map(String::as_str),
            Some("yes"),
            "persistence is on by default"
        );
        assert_eq!(
            config.get("aclfile").map(String::as_str),
            Some("/etc/valkey/credentials/users.acl")
        );
        assert!(!config.contains_key("protected-mode"));
        let pod_labels = node.spec.pod_labels.clone().unwrap_or_default();
        assert_eq!(
            pod_labels.get("valkey.io/shard").map(String::as_str),
            Some("1"),
            "placement labels win"
        );
        assert_eq!(pod_labels.get("team").map(String::as_str), Some("data"));
        let credentials = node
            .spec
            .credentials
            .clone()
            .unwrap_or_else(|| panic!("no credentials"));
        assert_eq!(
            (
                credentials.secret_name.as_str(),
                credentials.username.as_str()
            ),
            ("cache-acl", "healthcheck")
        );
        assert_eq!(
            node.spec
                .pod_annotations
                .as_ref()
                .and_then(|a| a.get(CREDENTIALS_REVISION_ANNOTATION))
                .map(String::as_str),
            Some("abc")
        );
    }

    #[test]
    fn valkey_9_hands_over_on_shutdown() {
        assert_eq!(image_major_version("valkey/valkey:9.1"), Some(9));
        assert_eq!(
            image_major_version("registry:5000/valkey/valkey:8.0.1"),
            Some(8)
        );
        assert_eq!(image_major_version("registry:5000/valkey/valkey"), None);
        assert_eq!(image_major_version("valkey/valkey:latest"), None);
        assert_eq!(
            image_major_version("valkey/valkey:9.0-alpine@sha256:00"),
            Some(9)
        );
        let node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::Open, None)
            .unwrap_or_else(|| panic!("no node"));
        let config = node.spec.config.unwrap_or_default();
        assert_eq!(
            config.get("shutdown-on-sigterm").map(String::as_str),
            Some("failover")
        );
    }

    #[test]
    fn an_open_cluster_turns_protected_mode_off() {
        let node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::Open, None)
            .unwrap_or_else(|| panic!("no node"));
        let config = node.spec.config.unwrap_or_default();
        assert_eq!(config.get("protected-mode").map(String::as_str), Some("no"));
        assert!(!config.contains_key("aclfile") && node.spec.credentials.is_none());
    }

    #[test]
    fn members_are_read_back_from_their_nodes() {
        let mut node = desired_node(&cluster(CLUSTER), 2, 1, &NodeAuth::Open, Some("r1".into()))
            .unwrap_or_else(|| panic!("no node"));
        node.metadata.generation = Some(2);
        node.status = Some(serde_json::from_value(serde_json::json!({
            "ready": true, "podIP": "10.213.2.5", "currentRevision": "r1", "desiredRevision": "r2", "observedGeneration": 2
        })).unwrap_or_default());
        let m = member(&node).unwrap_or_else(|| panic!("no member"));
        assert_eq!((m.shard, m.index, m.ready), (2, 1, true));
        assert_eq!(
            m.address,
            Some("10.213.2.5:6379".parse().unwrap_or_else(|e| panic!("{e}")))
        );
        assert!(m.needs_restart());
        // A status written for an older spec is not readiness.
        node.metadata.generation = Some(3);
        let m = member(&node).unwrap_or_else(|| panic!("no member"));
        assert!(!m.ready && m.desired_revision.is_none());
    }

    #[test]
    fn a_member_that_cannot_run_is_named() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 1, &NodeAuth::Open, None)
            .unwrap_or_else(|| panic!("no node"));
        assert_eq!(stuck_member(std::slice::from_ref(&node)), None);
        node.status = Some(serde_json::from_value(serde_json::json!({"ready": false, "conditions": [{
            "type": "Ready", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "message": "Pod valkey-cache-0-1-0 cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        }]})).unwrap_or_default());
        let problem = stuck_member(&[node]).unwrap_or_else(|| panic!("not stuck"));
        assert_eq!(problem.reason, "Unschedulable");
        assert!(
            problem.message.starts_with("ValkeyNode cache-0-1: ")
                && problem.message.contains("anti-affinity")
        );
    }

    #[test]
    fn a_node_without_a_gate_is_pinned_to_what_it_runs() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::Open, None)
            .unwrap_or_else(|| panic!("no node"));
        assert_eq!(allowed_revision(Some(&node)), None);
        node.status = Some(
            serde_json::from_value(serde_json::json!({"ready": true, "currentRevision": "r1"}))
                .unwrap_or_default(),
        );
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r1"));
        node.spec.allowed_revision = Some("r0".into());
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r0"));
        assert_eq!(allowed_revision(None), None);
    }

    #[test]
    fn a_node_not_ready_for_a_moment_keeps_its_gate_but_a_stuck_one_lets_go() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::Open, Some("r0".into()))
            .unwrap_or_else(|| panic!("no node"));
        let status = |reason: &str| {
            serde_json::from_value(
                serde_json::json!({"ready": false, "currentRevision": "r0", "conditions": [{
                    "type": "Ready", "status": "False", "reason": reason, "message": "m",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"
                }]}),
            )
            .unwrap_or_default()
        };
        for transient in [
            "PodNotReady",
            "ValkeyNotResponding",
            "PodTerminating",
            "ContainerWaiting",
        ] {
            node.status = Some(status(transient));
            assert_eq!(
                allowed_revision(Some(&node)).as_deref(),
                Some("r0"),
                "{transient}"
            );
        }
        node.spec.allowed_revision = None;
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r0"));
        for stuck in ["CrashLoopBackOff", "Unschedulable", "ImagePullBackOff"] {
            node.status = Some(status(stuck));
            assert_eq!(allowed_revision(Some(&node)), None, "{stuck}");
        }
    }
}
