//! Names and labels of everything a ValkeyNode owns (the ValkeyNode contract fixes the first two).

use std::collections::BTreeMap;

pub use valkey_api::contract::{NODE_LABEL, REVISION_ANNOTATION};
/// The field manager of every server-side apply this binary makes.
pub const FIELD_MANAGER: &str = "valkey-node-controller";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChildNames {
    /// StatefulSet or Deployment: `valkey-<name>`.
    pub workload: String,
    /// The data volume: `valkey-<name>-data`.
    pub pvc: String,
    /// valkey.conf: `valkey-<name>-config`.
    pub config_map: String,
}

impl ChildNames {
    pub fn of(node_name: &str) -> Self {
        Self {
            workload: format!("valkey-{node_name}"),
            pvc: format!("valkey-{node_name}-data"),
            config_map: format!("valkey-{node_name}-config"),
        }
    }
}

/// Labels on every child; the selector is the `valkey.io/node` label alone, which never changes.
pub fn labels(node_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
        (
            "app.kubernetes.io/instance".to_owned(),
            node_name.to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            FIELD_MANAGER.to_owned(),
        ),
        (NODE_LABEL.to_owned(), node_name.to_owned()),
    ])
}

pub fn selector(node_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(NODE_LABEL.to_owned(), node_name.to_owned())])
}
