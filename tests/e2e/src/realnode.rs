//! localkube's real node (tests/localkube/realnode/README.md): the upstream kubelet with
//! containerd, running images built here. Tests that need it ask [`node`] first.

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::{E2eError, Result};

/// The node's name, and its label and taint key.
pub const NODE: &str = "localkube-real";
pub const LABEL: &str = "localkube.io/real-node";

/// What a pod spec (YAML, two spaces in) needs to run there: its label, and a toleration of its
/// taint.
pub const POD_PLACEMENT: &str = r#"  nodeSelector: {localkube.io/real-node: "true"}
  tolerations: [{key: localkube.io/real-node, operator: Exists, effect: NoSchedule}]
"#;

/// The same as fields of a ValkeyCluster's or ValkeyReplication's spec (flow style).
pub const SPEC_PLACEMENT: &str = r#"nodeSelector: {localkube.io/real-node: "true"}, tolerations: [{key: localkube.io/real-node, operator: Exists, effect: NoSchedule}]"#;

/// The real node, or `None` after saying why the test does not run. With
/// `LOCALKUBE_REAL_NODE=1` (make test starts localkube with the node) its absence is a failure
/// that names what the machine lacks, when localkube recorded it; elsewhere (another cluster, a
/// localkube started without it) the test says it is skipped and why.
pub async fn node() -> Result<Option<Node>> {
    let asked = std::env::var("LOCALKUBE_REAL_NODE").is_ok_and(|v| v == "1");
    if !asked && !crate::is_localkube() {
        eprintln!("SKIPPED: the real node is localkube's (this cluster is not)");
        return Ok(None);
    }
    let nodes: Api<Node> = Api::all(crate::client().await?);
    if let Some(node) = nodes.get_opt(NODE).await? {
        return Ok(Some(node));
    }
    let unavailable = crate::localkube_dir().join("realnode/state/unavailable");
    let why = std::fs::read_to_string(&unavailable).unwrap_or_else(|_| {
        "localkube runs without it (localkube start --real-node, or LOCALKUBE_REAL_NODE=1 make localkube)".into()
    });
    if asked {
        return Err(E2eError::Check(format!("no real node {NODE}: {why}")));
    }
    eprintln!("SKIPPED: no real node {NODE}: {why}");
    Ok(None)
}
