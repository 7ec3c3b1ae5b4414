//! The constants of the ValkeyNode contract and of the labels parents put on their nodes: what
//! the node-controller guarantees, what parents and tests rely on. Declared once, here, beside
//! the types they belong with.

use crate::v1alpha1::StatusReason;

/// The port Valkey listens on in every ValkeyNode's pod (in TLS when `spec.tls` is set); its
/// cluster bus is this plus 10000.
pub const VALKEY_PORT: u16 = 6379;

/// The port a Sentinel (`server: Sentinel`) listens on: Sentinel's customary port, the one
/// Sentinel clients are configured with by default.
pub const SENTINEL_PORT: u16 = 26379;

/// The label that ties a pod, its workload and its PVC to their ValkeyNode (the value is the
/// node's name).
pub const NODE_LABEL: &str = "valkey.io/node";

/// The label the node-controller keeps on each node's pod: the replication role Valkey reports
/// (`primary` or `replica`, as `status.role`), set and changed by a metadata patch (never a
/// restart) and removed while Valkey does not answer the node-controller. Services select on
/// it, so a Service of primaries never names a server that is not one.
pub const ROLE_LABEL: &str = "valkey.io/role";

/// An annotation a parent may set on a ValkeyNode (any value, e.g. a time) after it changed the
/// server's role: like any change to the node, it makes the node-controller read Valkey at
/// once, so `status.role` and the pod's [`ROLE_LABEL`] follow within a pass rather than at the
/// next periodic read.
pub const OBSERVE_ANNOTATION: &str = "valkey.io/observe";

/// Pod annotation carrying the revision the pod was built from (`status.currentRevision`).
pub const REVISION_ANNOTATION: &str = "valkey.io/revision";

/// Where the pod sees the Secret `spec.credentials` names, read-only: a parent points
/// `spec.config` (`aclfile`, `include`) at files in it.
pub const CREDENTIALS_DIR: &str = "/etc/valkey/credentials";

/// Where the pod sees the keys of the Secret `spec.tls` names, read-only.
pub const TLS_DIR: &str = "/etc/valkey/tls";
/// The keys of a TLS Secret, in the shape cert-manager writes: the certificate (with its chain),
/// its private key, and the CA that servers and clients verify each other against.
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
pub const TLS_CA_KEY: &str = "ca.crt";
/// The plain-text client port beside TLS, when `spec.tls.plaintextPort` asks for one.
pub const PLAINTEXT_PORT: u16 = 6380;

/// The port of the exporter container `spec.exporter` adds (Prometheus metrics at `/metrics`), and
/// its name in the pod, which PodMonitors and Services select.
pub const METRICS_PORT: u16 = 9121;
pub const METRICS_PORT_NAME: &str = "metrics";
/// The name of the pod's container that runs the server.
pub const VALKEY_CONTAINER: &str = "valkey";
/// The name of the exporter's container in the pod.
pub const EXPORTER_CONTAINER: &str = "exporter";

/// The condition a ValkeyNode is ready by.
pub const READY_CONDITION: &str = "Ready";

/// The condition that says whether the running server has the live settings of `spec.config`
/// (the node-controller sets them with CONFIG SET; False quotes what Valkey refused, and then
/// nothing else of the node was changed).
pub const CONFIG_APPLIED_CONDITION: &str = "ConfigApplied";
/// ConfigApplied=False while the pod runs an older revision than the desired one: the live
/// settings reach the server that replaces it (from its valkey.conf), not the one it runs, which
/// may be an older Valkey that refuses the newer values. Not a fault: a parent rolling its members
/// sees it on every member it has not rolled yet.
pub const CONFIG_AWAITS_RESTART: &str = StatusReason::AwaitingRestart.as_str();

/// Reasons of a ValkeyNode's Ready=False that no amount of waiting fixes: its pod cannot run
/// (not scheduled, no image, crash loop, a config Valkey or the node-controller refuses). A
/// parent need not wait for such a node before changing its spec.
pub const POD_CANNOT_RUN_REASONS: &[&str] = &[
    UNSCHEDULABLE,
    StatusReason::ErrImagePull.as_str(),
    StatusReason::ImagePullBackOff.as_str(),
    StatusReason::CrashLoopBackOff.as_str(),
    StatusReason::CreateContainerConfigError.as_str(),
    INVALID_CONFIG,
];

/// Ready=False: the scheduler found no node for the pod.
pub const UNSCHEDULABLE: &str = StatusReason::Unschedulable.as_str();
/// Ready=False: `spec.config` holds a value the node-controller will not write to valkey.conf.
pub const INVALID_CONFIG: &str = StatusReason::InvalidConfig.as_str();

/// Labels a ValkeyReplication puts on its ValkeyNodes (and, through `spec.podLabels`, on their
/// pods), beside [`cluster::INDEX_LABEL`] for the member's index.
pub mod replication {
    /// The replication's name.
    pub const REPLICATION_LABEL: &str = "valkey.io/replication";
}

/// Labels a ValkeyCluster puts on its ValkeyNodes (and, through `spec.podLabels`, on their pods).
pub mod cluster {
    /// The cluster's name.
    pub const CLUSTER_LABEL: &str = "valkey.io/cluster";
    /// The member's shard, from 0.
    pub const SHARD_LABEL: &str = "valkey.io/shard";
    /// The member's index within its shard, from 0 (0 is the shard's first primary).
    pub const INDEX_LABEL: &str = "valkey.io/index";
}
