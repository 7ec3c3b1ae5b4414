//! Labels the cluster-controller puts on ValkeyNodes and, through them, on pods.

use std::collections::BTreeMap;

pub use valkey_api::contract::cluster::{CLUSTER_LABEL, INDEX_LABEL, SHARD_LABEL};

pub const FIELD_MANAGER: &str = "valkey-cluster-controller";

/// `<cluster>-<shard>-<index>`.
pub fn member_name(cluster: &str, shard: u32, index: u32) -> String {
    format!("{cluster}-{shard}-{index}")
}

pub fn member_labels(cluster: &str, shard: u32, index: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), cluster.to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            FIELD_MANAGER.to_owned(),
        ),
        (CLUSTER_LABEL.to_owned(), cluster.to_owned()),
        (SHARD_LABEL.to_owned(), shard.to_string()),
        (INDEX_LABEL.to_owned(), index.to_string()),
    ])
}

/// The shard and index a member's labels give, if both parse.
pub fn position(labels: Option<&BTreeMap<String, String>>) -> Option<(u32, u32)> {
    let labels = labels?;
    Some((
        labels.get(SHARD_LABEL)?.parse().ok()?,
        labels.get(INDEX_LABEL)?.parse().ok()?,
    ))
}
