//! A member's ValkeyNode as any parent kind wants it: [`server_node`] builds what every parent's
//! members share, from the spec's `ServerSettings` and the parent's own [`NodeParts`] (name,
//! labels, owner, placement, mode settings). Pure: the apply stage adds each node's restart gate,
//! the engine's `AllowRestart` moves it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use valkey_api::v1alpha1::{
    NodeCredentials, NodeExporter, NodeServer, NodeTls, ServerSettings, ValkeyNode, ValkeyNodeSpec,
};

use super::auth::{
    self, CREDENTIALS_DIR, HEALTHCHECK_PASSWORD_KEY, HEALTHCHECK_USER, MOUNTED_KEYS,
};

/// A member the spec wants and the ValkeyNode it should be, without a restart gate.
#[derive(Debug, Clone)]
pub struct DesiredMember {
    pub shard: u32,
    pub index: u32,
    pub name: String,
    /// Where it stands, in words for Events: `shard 1, member 0`.
    pub place: String,
    pub node: ValkeyNode,
}

impl DesiredMember {
    /// The node with the parent's gate on pod restarts (see `spec.allowedRevision`).
    pub fn gated(&self, allowed_revision: Option<String>) -> ValkeyNode {
        let mut node = self.node.clone();
        node.spec.allowed_revision = allowed_revision;
        node
    }
}

/// What the member nodes mount for authentication: the cluster's ACL Secret (its ACL file and
/// replication login only), and with TLS the certificate Secret they serve. A change of users or
/// passwords reaches running servers live (the access stage) and this file is what a server loads
/// when it starts, so no change of it restarts a pod; nor does a renewed certificate (the servers
/// reload the mounted files).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeAuth {
    pub secret: String,
    pub tls: Option<NodeTls>,
}

impl NodeAuth {
    /// The ACL Secret of the cluster named `cluster`, without TLS.
    pub fn of(cluster: &str) -> Self {
        Self {
            secret: auth::acl_secret_name(cluster),
            tls: None,
        }
    }

    /// What a node's probes log in with (the healthcheck user), mounting only `files` of the
    /// ACL Secret.
    fn probe_credentials(&self, files: &[&str]) -> NodeCredentials {
        NodeCredentials {
            secret_name: self.secret.clone(),
            username: HEALTHCHECK_USER.to_owned(),
            password_key: HEALTHCHECK_PASSWORD_KEY.to_owned(),
            files: Some(files.iter().map(|k| (*k).to_owned()).collect()),
        }
    }
}

/// The settings of every server, whatever its parent: the parent's mode settings first, then
/// persistence and authentication, then the user's own `spec.config` (which may override the
/// tunable ones; the API refuses the keys the operator owns).
fn server_config(
    settings: &ServerSettings,
    mode: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut config = mode;
    if settings.persistence.enabled {
        config.insert("appendonly".to_owned(), "yes".to_owned());
    } else {
        // No persistence means no file a restarted server could load: a server restarted in
        // place (same pod, same folder) would otherwise come back with an old snapshot, from a
        // save point or from the full sync that made it a replica, and continue that old
        // history as if it were current. The user may still ask for save points.
        config.insert("save".to_owned(), String::new());
        config.insert("rdb-del-sync-files".to_owned(), "yes".to_owned());
    }
    // Every server has the operator's users, with authentication on or off: the clients' access
    // is the ACL's business (and the NetworkPolicy's), so Valkey's protected mode, which refuses
    // every remote client while the default user needs no password, stays off.
    config.insert("protected-mode".to_owned(), "no".to_owned());
    // A replica's full sync starts at once. Valkey's default waits 5 s for more replicas to share
    // one transfer; here replicas attach together anyway (the operator attaches them in one
    // pass), and the wait is 5 s of a new or replaced replica's shard without its copy (and of a
    // forming cluster not Ready). The user may set it again.
    config.insert("repl-diskless-sync-delay".to_owned(), "0".to_owned());
    config.insert(
        "aclfile".to_owned(),
        format!("{CREDENTIALS_DIR}/{}", auth::ACL_FILE_KEY),
    );
    config.insert(
        "include".to_owned(),
        format!("{CREDENTIALS_DIR}/{}", auth::REPLICATION_CONF_KEY),
    );
    config.extend(settings.config.clone().unwrap_or_default());
    config
}

/// The major version an image's tag names (`valkey/valkey:9.1` → 9), when it names one.
pub fn image_major_version(image: &str) -> Option<u32> {
    let reference = image.split('@').next()?;
    let (_, tag) = reference.rsplit('/').next()?.split_once(':')?;
    tag.split(['.', '-']).next()?.parse().ok()
}

/// What differs between the members of different parents: the node's name, labels and owner,
/// its placement, and the settings of the parent's mode.
#[derive(Debug, Clone)]
pub struct NodeParts {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub owner: OwnerReference,
    pub affinity: Option<Affinity>,
    pub mode: BTreeMap<String, String>,
}

/// A member's ValkeyNode: its parent's parts, and what every parent's servers share (image,
/// resources, scheduling, storage, settings, the credentials the pod mounts).
/// `allowed_revision` is the parent's gate on pod restarts (see `spec.allowedRevision`).
pub fn server_node(
    settings: &ServerSettings,
    parts: NodeParts,
    auth: &NodeAuth,
    allowed_revision: Option<String>,
) -> ValkeyNode {
    let mut pod_labels = settings.pod_labels.clone().unwrap_or_default();
    pod_labels.extend(parts.labels.clone());
    let pod_annotations = settings.pod_annotations.clone().unwrap_or_default();
    let credentials = Some(auth.probe_credentials(&MOUNTED_KEYS));
    ValkeyNode {
        metadata: ObjectMeta {
            name: Some(parts.name),
            namespace: parts.namespace,
            labels: Some(parts.labels),
            owner_references: Some(vec![parts.owner]),
            ..Default::default()
        },
        spec: ValkeyNodeSpec {
            server: NodeServer::Valkey,
            workload_type: settings.workload_type,
            image: settings.image.clone(),
            image_pull_policy: settings.image_pull_policy,
            resources: settings.resources.clone(),
            tolerations: settings.tolerations.clone(),
            node_selector: settings.node_selector.clone(),
            affinity: parts.affinity,
            persistence: Some(settings.persistence.clone()),
            config: Some(server_config(settings, parts.mode)),
            exporter: settings.metrics.enabled.then(|| NodeExporter {
                image: settings.metrics.image.clone(),
                resources: settings.metrics.resources.clone(),
            }),
            pod_labels: Some(pod_labels),
            pod_annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
            credentials,
            tls: auth.tls.clone(),
            // Set by a restore (spec.restoreFrom) on each shard's first member only.
            initial_data: None,
            allowed_revision,
        },
        status: None,
    }
}

/// What a Sentinel needs whatever its parent: little memory and CPU (it holds no data), so the
/// servers' own resources, sized for their data set, are not copied onto it.
fn sentinel_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("10m".to_owned())),
            ("memory".to_owned(), Quantity("32Mi".to_owned())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_owned(),
            Quantity("128Mi".to_owned()),
        )])),
        ..Default::default()
    }
}

/// A Sentinel's ValkeyNode (`spec.server: Sentinel`), for any parent that watches its servers
/// with Sentinel: the parent's image, pull policy and scheduling, its parts (`parts.mode` is
/// Sentinel's own configuration; the servers' settings and `spec.config` are not Sentinel's),
/// its pod labels (`pod_labels`: a Sentinel's pod must not carry the labels the members' Services,
/// budget and anti-affinity select), and TLS when the servers use it. No persistence (a
/// Sentinel starts clean and is told again what to monitor), no exporter. It mounts the
/// Sentinels' ACL file from the parent's ACL Secret (and nothing else of it) and its probes log
/// in as the healthcheck user, as a server's do.
pub fn sentinel_node(
    settings: &ServerSettings,
    parts: NodeParts,
    pod_labels: BTreeMap<String, String>,
    auth: &NodeAuth,
) -> ValkeyNode {
    let mut config = parts.mode;
    config.insert(
        "aclfile".to_owned(),
        format!("{CREDENTIALS_DIR}/{}", auth::SENTINEL_ACL_FILE_KEY),
    );
    let credentials = auth.probe_credentials(&[auth::SENTINEL_ACL_FILE_KEY]);
    let mut labels = settings.pod_labels.clone().unwrap_or_default();
    labels.extend(pod_labels);
    let pod_annotations = settings.pod_annotations.clone().unwrap_or_default();
    ValkeyNode {
        metadata: ObjectMeta {
            name: Some(parts.name),
            namespace: parts.namespace,
            labels: Some(parts.labels),
            owner_references: Some(vec![parts.owner]),
            ..Default::default()
        },
        spec: ValkeyNodeSpec {
            server: NodeServer::Sentinel,
            workload_type: settings.workload_type,
            image: settings.image.clone(),
            image_pull_policy: settings.image_pull_policy,
            resources: Some(sentinel_resources()),
            tolerations: settings.tolerations.clone(),
            node_selector: settings.node_selector.clone(),
            affinity: parts.affinity,
            persistence: None,
            config: Some(config),
            exporter: None,
            pod_labels: Some(labels),
            pod_annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
            credentials: Some(credentials),
            tls: auth.tls.clone(),
            initial_data: None,
            allowed_revision: None,
        },
        status: None,
    }
}
