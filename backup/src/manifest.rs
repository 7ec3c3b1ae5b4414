//! The manifest: what a backup holds, written as the last object of a backup, once every shard's
//! object is committed. A backup without a manifest is incomplete by definition, whatever
//! objects it has, so restore reads the manifest first and trusts nothing it does not list.
//!
//! JSON, with a format version that restore checks before anything else: a newer format than
//! the reader knows is refused (it may hold what the reader would get wrong), never guessed at.

use serde::{Deserialize, Serialize};

use crate::capture::{Captured, PayloadForm};

/// The format this code writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The object name of a backup's manifest, beside its shards' objects.
pub const MANIFEST_NAME: &str = "manifest.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format_version: u32,
    /// The ValkeyBackup's name and namespace, and when its capture began and ended (RFC 3339).
    pub backup: BackupRef,
    pub source: SourceRef,
    pub started_at: String,
    pub completed_at: String,
    /// The server version every shard was taken from (`INFO server`'s `valkey_version`).
    pub valkey_version: String,
    pub shards: Vec<ShardBackup>,
    /// The users the source's servers had, by reference: their names and the Secret that holds
    /// their passwords (never a password or hash); restore applies the spec's users anyway, this
    /// says which existed.
    pub users: Vec<UserRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    /// `ValkeyCluster` or `ValkeyReplication`.
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// One shard's object and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardBackup {
    pub index: u32,
    /// `[first, last]` inclusive, as CLUSTER SHARDS says them; empty for a replication.
    pub slot_ranges: Vec<[u16; 2]>,
    /// The ValkeyNode it was captured from and that node's Valkey node ID, and whether it was a
    /// replica (the rule) or the primary (only when no replica was in sync and the spec allowed
    /// it).
    pub member: String,
    pub node_id: Option<String>,
    pub from_replica: bool,
    /// The shard primary's node ID at capture time: restore gives the restored primary new IDs
    /// and never reuses these; they say which shard of the source this was.
    pub primary_node_id: Option<String>,
    /// Keys by `INFO keyspace` just before the capture (a replica being written to: a figure to
    /// compare, not to check exactly).
    pub keys: u64,
    pub object: ObjectRef,
    pub replication_id: String,
    pub replication_offset: u64,
    pub rdb_version: u32,
    pub form: PayloadForm,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Relative to the backup's location (prefix and backup folder).
    pub name: String,
    pub bytes: u64,
    /// Hex SHA-256 of the whole object.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserRef {
    pub name: String,
    /// The Secret and key that hold the password, where the spec named one.
    pub secret: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not valid JSON of this shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error(
        "the manifest's format version {found} is newer than this operator reads ({FORMAT_VERSION}): upgrade the operator to restore it"
    )]
    TooNew { found: u32 },
    #[error("the manifest lists no shard")]
    NoShard,
}

impl ShardBackup {
    /// A shard entry from a completed capture and what the caller knew of the member.
    pub fn from_capture(index: u32, captured: &Captured) -> Self {
        Self {
            index,
            slot_ranges: Vec::new(),
            member: String::new(),
            node_id: None,
            from_replica: true,
            primary_node_id: None,
            keys: 0,
            object: ObjectRef {
                name: captured.object.clone(),
                bytes: captured.bytes,
                sha256: captured.sha256.clone(),
            },
            replication_id: captured.replication_id.clone(),
            replication_offset: captured.offset,
            rdb_version: captured.rdb_version,
            form: captured.form,
        }
    }
}

impl Manifest {
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings, numbers and lists: serialising it cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, ManifestError> {
        // The version first, from a lenient read: a newer format may not parse as this one.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Version {
            format_version: u32,
        }
        let found = serde_json::from_slice::<Version>(bytes)?.format_version;
        if found > FORMAT_VERSION {
            return Err(ManifestError::TooNew { found });
        }
        let manifest: Self = serde_json::from_slice(bytes)?;
        if manifest.shards.is_empty() {
            return Err(ManifestError::NoShard);
        }
        Ok(manifest)
    }

    /// The highest RDB version among the shards: a server older than the one that wrote it may
    /// not load it (Valkey 9.2's new encodings do not load on 9.0), so restore compares it with
    /// the image it runs.
    pub fn rdb_version(&self) -> u32 {
        self.shards.iter().map(|s| s.rdb_version).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            backup: BackupRef {
                namespace: "shop".into(),
                name: "nightly-1".into(),
                uid: "u-1".into(),
            },
            source: SourceRef {
                kind: "ValkeyCluster".into(),
                name: "orders".into(),
                uid: "u-2".into(),
            },
            started_at: "2026-12-04T10:00:00Z".into(),
            completed_at: "2026-12-04T10:01:00Z".into(),
            valkey_version: "9.1.2".into(),
            shards: vec![ShardBackup {
                index: 0,
                slot_ranges: vec![[0, 5460]],
                member: "orders-0-1".into(),
                node_id: Some("b".repeat(40)),
                from_replica: true,
                primary_node_id: Some("a".repeat(40)),
                keys: 20_000,
                object: ObjectRef {
                    name: "shard-0.rdb".into(),
                    bytes: 1234,
                    sha256: "c".repeat(64),
                },
                replication_id: "d".repeat(40),
                replication_offset: 99,
                rdb_version: 11,
                form: PayloadForm::Diskless,
            }],
            users: vec![UserRef {
                name: "app".into(),
                secret: Some("orders-users/app".into()),
            }],
        }
    }

    #[test]
    fn round_trips_through_json() {
        let manifest = sample();
        let back = Manifest::from_json(&manifest.to_json()).expect("parse");
        assert_eq!(back, manifest);
        let text = String::from_utf8(manifest.to_json()).expect("utf8");
        assert!(text.contains("\"formatVersion\": 1"), "{text}");
        assert!(text.contains("\"slotRanges\""), "{text}");
    }

    #[test]
    fn a_newer_format_is_refused_before_its_shape_is_read() {
        let text = br#"{"formatVersion": 2, "somethingNew": true}"#;
        assert!(matches!(
            Manifest::from_json(text),
            Err(ManifestError::TooNew { found: 2 })
        ));
    }

    #[test]
    fn a_manifest_without_shards_is_refused() {
        let mut manifest = sample();
        manifest.shards.clear();
        assert!(matches!(
            Manifest::from_json(&manifest.to_json()),
            Err(ManifestError::NoShard)
        ));
    }
}
