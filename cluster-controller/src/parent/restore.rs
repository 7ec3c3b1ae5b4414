//! `spec.restoreFrom` of a new ValkeyCluster or ValkeyReplication: which backup, what its
//! manifest says each shard is, and what that makes of each shard's first member. No Kubernetes
//! here: the kind's pass reads the ValkeyBackup (or takes the store location from the spec), the
//! store's Secret and the manifest, and hands them over.
//!
//! What a restore gives each shard (docs/design/backup.md, "Restore"):
//! - its first member gets `spec.initialData` (the shard's snapshot: the backup's store, the
//!   object's key under the backup's location, its SHA-256 and length) and `appendonly no` for
//!   its first start: with `appendonly yes` and no append-only file a server ignores the snapshot;
//! - that member becomes the shard's primary with the manifest's slots (`CLUSTER ADDSLOTSRANGE`
//!   on the new cluster); its replicas start empty and sync from it; node IDs and `nodes.conf`
//!   are never taken from the backup (a snapshot holds neither).
//!
//! Fail closed: a backup not Completed, a manifest that cannot be read or does not fit the kind
//! is a problem with a reason and a message, and the caller forms nothing in its place (an empty
//! cluster where data was asked for would look like a successful restore).

use backup::manifest::{MANIFEST_NAME, Manifest};
use backup::{Store, StoreConfig};
use valkey_api::v1alpha1::{
    BackupPhase, BackupStore, InitialData, RestoreFrom, StatusReason, ValkeyBackup, ValkeyNodeSpec,
};

use crate::valkey::slots::{SLOT_COUNT, SlotRange, SlotSet};

/// The condition reasons of a restore that cannot go on.
pub const BACKUP_NOT_FOUND: StatusReason = StatusReason::RestoreBackupNotFound;
pub const BACKUP_NOT_COMPLETED: StatusReason = StatusReason::RestoreBackupNotCompleted;
pub const MANIFEST_UNREADABLE: StatusReason = StatusReason::RestoreManifestUnreadable;
pub const MANIFEST_MISMATCH: StatusReason = StatusReason::RestoreManifestMismatch;

/// Why a restore cannot go on (yet): a reason for the parent's condition and a message in a
/// person's words. Never a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: StatusReason,
    pub message: String,
}

impl Problem {
    fn new(reason: StatusReason, message: String) -> Self {
        Self { reason, message }
    }
}

/// Where a backup is: its store and its folder (the one that holds `manifest.json`) under the
/// store's prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub store: BackupStore,
    pub location: String,
}

/// Where `restoreFrom` points. `backup`: the named ValkeyBackup of the namespace, read by the
/// caller (`None`: not found); it must be Completed, or nothing is restored.
pub fn source(from: &RestoreFrom, backup: Option<&ValkeyBackup>) -> Result<Source, Problem> {
    if let (Some(store), Some(path)) = (&from.store, &from.path) {
        return Ok(Source {
            store: store.clone(),
            location: path.trim_matches('/').to_owned(),
        });
    }
    let name = from.backup.as_deref().unwrap_or_default();
    let Some(backup) = backup else {
        return Err(Problem::new(
            BACKUP_NOT_FOUND,
            format!(
                "spec.restoreFrom.backup names ValkeyBackup {name}, which does not exist in this \
                 namespace; nothing is created until it does"
            ),
        ));
    };
    let status = backup.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    match (phase, status.and_then(|s| s.location.as_deref())) {
        (Some(BackupPhase::Completed), Some(location)) if !location.is_empty() => Ok(Source {
            store: backup.spec.store.clone(),
            location: location.trim_matches('/').to_owned(),
        }),
        (Some(BackupPhase::Completed), _) => Err(Problem::new(
            MANIFEST_UNREADABLE,
            format!("ValkeyBackup {name} is Completed but has no status.location"),
        )),
        (phase, _) => Err(Problem::new(
            BACKUP_NOT_COMPLETED,
            format!(
                "ValkeyBackup {name} is {}, not Completed: only a complete backup is restored{}",
                phase.map_or("Pending", |p| p.as_str()),
                match phase {
                    Some(BackupPhase::Failed) => "; restore another backup into a new object",
                    _ => "; the restore starts once it completes",
                }
            ),
        )),
    }
}

/// The store as the backup crate's client takes it, with the Secret's values the caller read.
pub fn store_config(
    store: &BackupStore,
    access_key_id: String,
    secret_access_key: String,
    ca_bundle: Option<Vec<u8>>,
) -> StoreConfig {
    let s3 = &store.s3;
    let mut config = StoreConfig::s3_compatible(
        s3.endpoint.clone().unwrap_or_default(),
        s3.bucket.clone(),
        access_key_id,
        secret_access_key,
    );
    config.endpoint = s3.endpoint.clone();
    config.prefix = s3.prefix.clone().unwrap_or_default();
    config.region = s3.region.clone();
    config.path_style = s3.path_style;
    config.ca_bundle = ca_bundle;
    config
}

/// Reads and checks the manifest of the backup at `location`.
pub async fn read_manifest(store: &Store, location: &str) -> Result<Manifest, Problem> {
    let name = format!("{location}/{MANIFEST_NAME}");
    let unreadable = |e: String| {
        Problem::new(
            MANIFEST_UNREADABLE,
            format!(
                "the manifest s3://{}/{} cannot be read: {e}; a backup without its manifest is \
                 incomplete, and nothing is restored from it",
                store.bucket(),
                store.path(&name)
            ),
        )
    };
    // One line: the store's error can carry its XML answer, and this goes into a condition.
    let flat = |e: &dyn std::fmt::Display| {
        let text = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        match text.char_indices().nth(400) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text,
        }
    };
    let bytes = store.get(&name).await.map_err(|e| unreadable(flat(&e)))?;
    Manifest::from_json(&bytes).map_err(|e| unreadable(flat(&e)))
}

/// What one shard is restored from.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardRestore {
    pub index: u32,
    pub initial_data: InitialData,
    /// The slots its primary serves; empty for a ValkeyReplication.
    pub slots: SlotSet,
}

/// Every shard of a backup, in index order, checked against the kind restored into: a
/// ValkeyCluster's shards must cover every slot once, a ValkeyReplication's backup is one shard.
pub fn shards(
    source: &Source,
    manifest: &Manifest,
    kind: &str,
) -> Result<Vec<ShardRestore>, Problem> {
    let mismatch = |message: String| Problem::new(MANIFEST_MISMATCH, message);
    if manifest.source.kind != kind {
        return Err(mismatch(format!(
            "the backup at {} is of a {} and cannot be restored into a {kind}",
            source.location, manifest.source.kind
        )));
    }
    let mut shards: Vec<&backup::manifest::ShardBackup> = manifest.shards.iter().collect();
    shards.sort_by_key(|s| s.index);
    let mut covered = SlotSet::new();
    let mut out = Vec::with_capacity(shards.len());
    for (position, shard) in shards.iter().enumerate() {
        if shard.index as usize != position {
            return Err(mismatch(format!(
                "the manifest's shards are not numbered 0 to {}: shard {} is listed at {position}",
                shards.len() - 1,
                shard.index
            )));
        }
        let mut slots = SlotSet::new();
        for [start, end] in &shard.slot_ranges {
            let range = SlotRange::new(*start, *end).ok_or_else(|| {
                mismatch(format!(
                    "shard {} lists slots {start}-{end}, which are no slot range",
                    shard.index
                ))
            })?;
            let one = SlotSet::from_range(range);
            if !covered.is_disjoint(&one) {
                return Err(mismatch(format!(
                    "shard {} lists slots {start}-{end}, which another shard holds",
                    shard.index
                )));
            }
            covered.union_with(&one);
            slots.union_with(&one);
        }
        let sha256 = shard.object.sha256.to_ascii_lowercase();
        let bytes = i64::try_from(shard.object.bytes).unwrap_or(i64::MAX);
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) || bytes < 1 {
            return Err(mismatch(format!(
                "shard {}'s object {} has no valid SHA-256 or length",
                shard.index, shard.object.name
            )));
        }
        out.push(ShardRestore {
            index: shard.index,
            initial_data: InitialData {
                store: source.store.clone(),
                object: format!(
                    "{}/{}",
                    source.location,
                    shard.object.name.trim_start_matches('/')
                ),
                sha256,
                bytes,
            },
            slots,
        });
    }
    match kind {
        "ValkeyReplication" if out.len() != 1 => Err(mismatch(format!(
            "the backup at {} has {} shards; a ValkeyReplication is restored from one",
            source.location,
            out.len()
        ))),
        "ValkeyCluster" if covered.count() != usize::from(SLOT_COUNT) => Err(mismatch(format!(
            "the backup at {} covers {} of the {SLOT_COUNT} slots; slots {} are in no shard",
            source.location,
            covered.count(),
            covered.complement()
        ))),
        _ => Ok(out),
    }
}

/// What a shard's first member is given: the snapshot, and `appendonly no` for its first start
/// (the parent turns the append-only file on live once the data is loaded, when the spec wants
/// one). Nothing else of the member changes.
pub fn restore_member(spec: &mut ValkeyNodeSpec, shard: &ShardRestore) {
    keep_member(spec, &shard.initial_data);
}

/// The annotation on a restored parent that records that every slot of the backup has been
/// served once: from then on no member is given a snapshot it does not already have, and the
/// engine no longer hands slots to first members as restored data (a slot lost later is a loss
/// the user decides on). Kept in the object, not in memory, so a restarted controller does not
/// start the restore over.
pub const SERVED_ANNOTATION: &str = "valkey.io/restore-served";

/// Whether the parent records that every slot of its restore was served once.
pub fn served(annotations: &std::collections::BTreeMap<String, String>) -> bool {
    annotations
        .get(SERVED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Whether a pass saw every slot served: the moment the restore's slots are done with.
pub fn every_slot_served(slots_assigned: Option<usize>) -> bool {
    slots_assigned == Some(usize::from(SLOT_COUNT))
}

/// The append-only file of a first member that loaded a snapshot, as its `INFO persistence`
/// shows it.
pub use crate::valkey::info::Aof;

/// What a shard's first member gets from the restore in this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum FirstMember {
    /// Its shard's snapshot and `appendonly no` ([`restore_member`]).
    Restore,
    /// What it has (its `initialData`, and `appendonly no`; [`keep_member`]): the restore is
    /// served, but the data it loaded is not yet anywhere a restart finds it.
    Keep,
    /// Nothing of the restore: the member as the spec alone makes it.
    Clear,
}

/// What the first member of a restored shard gets. Before every slot was served once, the
/// snapshot (a member created then must hold its shard's data). After: a member created then
/// starts empty as any new member; one that still has its snapshot keeps it until its data is
/// safe across the restart that clearing brings (clearing changes the pod's revision): with
/// persistence, once its append-only file is on and written (`aof`), never before, or the
/// restart would find `appendonly yes` and no file and come back empty; without persistence,
/// once it has replicas (the roll hands the shard over to one in sync first); a shard without
/// either keeps it, as no restart of it keeps data anyway.
pub fn first_member(
    served: bool,
    has: Option<&InitialData>,
    persistent: bool,
    replicas: u32,
    aof: Option<Aof>,
) -> FirstMember {
    if !served {
        return FirstMember::Restore;
    }
    if has.is_none() {
        return FirstMember::Clear;
    }
    let safe = if persistent {
        aof == Some(Aof::Written)
    } else {
        replicas > 0
    };
    if safe {
        FirstMember::Clear
    } else {
        FirstMember::Keep
    }
}

/// Whether the parent turns the append-only file on live on a first member now: once every slot
/// was served, on a member that still has its snapshot and runs without the file while the spec
/// wants persistence. The parent does it, not the node-controller: the member's `appendonly no`
/// is cleared only together with its snapshot (see [`first_member`]).
pub fn turn_aof_on(served: bool, has_snapshot: bool, persistent: bool, aof: Option<Aof>) -> bool {
    served && has_snapshot && persistent && aof == Some(Aof::Off)
}

/// [`FirstMember::Keep`] on a member's spec.
pub fn keep_member(spec: &mut ValkeyNodeSpec, data: &InitialData) {
    spec.initial_data = Some(data.clone());
    spec.config
        .get_or_insert_with(Default::default)
        .insert("appendonly".to_owned(), "no".to_owned());
}

#[cfg(test)]
mod tests {
    use backup::PayloadForm;
    use backup::manifest::{BackupRef, ObjectRef, ShardBackup, SourceRef, UserRef};
    use valkey_api::v1alpha1::ValkeyBackupStatus;

    use super::*;

    fn store() -> BackupStore {
        serde_json::from_value(serde_json::json!({"s3": {
            "endpoint": "http://10.213.0.1:7070", "bucket": "backups", "prefix": "valkey",
            "credentials": {"secretName": "store-keys"}
        }}))
        .expect("store")
    }

    fn backup(phase: Option<BackupPhase>, location: Option<&str>) -> ValkeyBackup {
        let mut b: ValkeyBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyBackup",
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {"source": {"kind": "ValkeyCluster", "name": "orders"}, "store": store()}
        }))
        .expect("backup");
        b.status = Some(ValkeyBackupStatus {
            phase,
            location: location.map(str::to_owned),
            ..Default::default()
        });
        b
    }

    fn shard(index: u32, ranges: Vec<[u16; 2]>) -> ShardBackup {
        ShardBackup {
            index,
            slot_ranges: ranges,
            member: format!("orders-{index}-1"),
            node_id: None,
            from_replica: true,
            primary_node_id: None,
            keys: 10,
            object: ObjectRef {
                name: format!("shard-{index}.rdb"),
                bytes: 1000 + u64::from(index),
                sha256: format!("{index}").repeat(64),
            },
            replication_id: "r".repeat(40),
            replication_offset: 7,
            rdb_version: 11,
            form: PayloadForm::Diskless,
        }
    }

    fn manifest(kind: &str, shards: Vec<ShardBackup>) -> Manifest {
        Manifest {
            format_version: backup::manifest::FORMAT_VERSION,
            backup: BackupRef {
                namespace: "shop".into(),
                name: "nightly".into(),
                uid: "u".into(),
            },
            source: SourceRef {
                kind: kind.into(),
                name: "orders".into(),
                uid: "v".into(),
            },
            started_at: String::new(),
            completed_at: String::new(),
            valkey_version: "9.1.2".into(),
            shards,
            users: Vec::<UserRef>::new(),
        }
    }

    fn from_backup() -> RestoreFrom {
        RestoreFrom {
            backup: Some("nightly".into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_completed_backup_with_a_location_is_a_source() {
        let b = backup(
            Some(BackupPhase::Completed),
            Some("shop/orders/nightly-1a2b3c4d/"),
        );
        let s = source(&from_backup(), Some(&b)).expect("source");
        assert_eq!(s.location, "shop/orders/nightly-1a2b3c4d");
        assert_eq!(s.store, store());

        let e = source(&from_backup(), None).expect_err("missing");
        assert_eq!(e.reason, BACKUP_NOT_FOUND);
        assert!(e.message.contains("nightly"), "{e:?}");
        for phase in [None, Some(BackupPhase::Running), Some(BackupPhase::Failed)] {
            let e = source(&from_backup(), Some(&backup(phase, Some("x")))).expect_err("not done");
            assert_eq!(e.reason, BACKUP_NOT_COMPLETED, "{phase:?}");
        }
        let e = source(
            &from_backup(),
            Some(&backup(Some(BackupPhase::Completed), None)),
        )
        .expect_err("no location");
        assert_eq!(e.reason, MANIFEST_UNREADABLE);

        // A backup made elsewhere: the store and path in the spec, no ValkeyBackup read.
        let from = RestoreFrom {
            store: Some(store()),
            path: Some("/elsewhere/b-1/".into()),
            ..Default::default()
        };
        assert_eq!(
            source(&from, None).expect("source").location,
            "elsewhere/b-1"
        );
    }

    #[test]
    fn a_clusters_shards_get_their_snapshot_and_their_slots() {
        let src = Source {
            store: store(),
            location: "shop/orders/nightly-1a2b3c4d".into(),
        };
        let m = manifest(
            "ValkeyCluster",
            vec![
                shard(1, vec![[8192, 16383]]),
                shard(0, vec![[0, 99], [100, 8191]]),
            ],
        );
        let shards = shards(&src, &m, "ValkeyCluster").expect("shards");
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].index, 0);
        assert_eq!(
            shards[0].initial_data.object,
            "shop/orders/nightly-1a2b3c4d/shard-0.rdb"
        );
        assert_eq!(shards[0].initial_data.bytes, 1000);
        assert_eq!(shards[0].slots.to_string(), "0-8191");
        assert_eq!(shards[1].slots.to_string(), "8192-16383");

        let mut spec: ValkeyNodeSpec = serde_json::from_value(serde_json::json!({
            "image": "valkey/valkey:9.1", "config": {"appendonly": "yes", "save": ""}
        }))
        .expect("spec");
        restore_member(&mut spec, &shards[1]);
        assert_eq!(spec.initial_data.as_ref(), Some(&shards[1].initial_data));
        let config = spec.config.expect("config");
        assert_eq!(config.get("appendonly").map(String::as_str), Some("no"));
        assert_eq!(config.get("save").map(String::as_str), Some(""));
    }

    #[test]
    fn a_manifest_that_does_not_fit_is_refused() {
        let src = Source {
            store: store(),
            location: "l".into(),
        };
        let refused = |m: Manifest, kind: &str, says: &str| {
            let e = shards(&src, &m, kind).expect_err(says);
            assert_eq!(e.reason, MANIFEST_MISMATCH);
            assert!(e.message.contains(says), "{e:?}");
        };
        refused(
            manifest("ValkeyCluster", vec![shard(0, vec![[0, 100]])]),
            "ValkeyCluster",
            "slots 101-16383 are in no shard",
        );
        refused(
            manifest(
                "ValkeyCluster",
                vec![shard(0, vec![[0, 9000]]), shard(1, vec![[8000, 16383]])],
            ),
            "ValkeyCluster",
            "another shard holds",
        );
        refused(
            manifest("ValkeyCluster", vec![shard(0, vec![[0, 16383]])]),
            "ValkeyReplication",
            "cannot be restored into a ValkeyReplication",
        );
        refused(
            manifest(
                "ValkeyReplication",
                vec![shard(0, vec![]), shard(1, vec![])],
            ),
            "ValkeyReplication",
            "has 2 shards",
        );
        refused(
            manifest(
                "ValkeyCluster",
                vec![shard(0, vec![[0, 8191]]), shard(2, vec![[8192, 16383]])],
            ),
            "ValkeyCluster",
            "not numbered",
        );
        let mut bad = shard(0, vec![[0, 16383]]);
        bad.object.sha256 = "nothex".into();
        refused(
            manifest("ValkeyCluster", vec![bad]),
            "ValkeyCluster",
            "no valid SHA-256",
        );
        // A replication's single shard: no slots.
        let ok = shards(
            &src,
            &manifest("ValkeyReplication", vec![shard(0, vec![])]),
            "ValkeyReplication",
        )
        .expect("replication");
        assert!(ok[0].slots.is_empty());
    }

    fn data() -> InitialData {
        InitialData {
            store: store(),
            object: "shop/orders/nightly-1/shard-0.rdb".into(),
            sha256: "0".repeat(64),
            bytes: 10,
        }
    }

    /// Before every slot was served, a first member always gets its snapshot; after, a member
    /// made then starts empty, and one that has its snapshot keeps it until a restart keeps its
    /// data: with persistence only once the append-only file is written (cleared earlier, the
    /// restart would find `appendonly yes` and no file, and come back empty).
    #[test]
    fn a_first_member_keeps_its_snapshot_until_a_restart_keeps_its_data() {
        let d = data();
        for aof in [None, Some(Aof::Off), Some(Aof::Writing), Some(Aof::Written)] {
            assert_eq!(
                first_member(false, None, true, 1, aof),
                FirstMember::Restore
            );
            assert_eq!(
                first_member(false, Some(&d), false, 0, aof),
                FirstMember::Restore
            );
            assert_eq!(first_member(true, None, true, 0, aof), FirstMember::Clear);
        }
        let keep = FirstMember::Keep;
        for aof in [None, Some(Aof::Off), Some(Aof::Writing)] {
            assert_eq!(first_member(true, Some(&d), true, 0, aof), keep, "{aof:?}");
            assert_eq!(first_member(true, Some(&d), true, 2, aof), keep, "{aof:?}");
        }
        assert_eq!(
            first_member(true, Some(&d), true, 0, Some(Aof::Written)),
            FirstMember::Clear
        );
        // Without persistence: a replica takes the shard over for the restart; without one no
        // restart keeps data, so the snapshot stays.
        assert_eq!(
            first_member(true, Some(&d), false, 1, None),
            FirstMember::Clear
        );
        assert_eq!(first_member(true, Some(&d), false, 0, None), keep);
    }

    /// The file is turned on once, where it is off, the slots served and persistence wanted.
    #[test]
    fn the_append_only_file_is_turned_on_only_after_the_slots_are_served() {
        assert!(turn_aof_on(true, true, true, Some(Aof::Off)));
        assert!(
            !turn_aof_on(false, true, true, Some(Aof::Off)),
            "not served"
        );
        assert!(!turn_aof_on(true, false, true, Some(Aof::Off)), "cleared");
        assert!(
            !turn_aof_on(true, true, false, Some(Aof::Off)),
            "no persistence"
        );
        for aof in [None, Some(Aof::Writing), Some(Aof::Written)] {
            assert!(!turn_aof_on(true, true, true, aof), "{aof:?}");
        }
    }

    #[test]
    fn the_append_only_file_is_written_when_no_rewrite_runs_and_the_last_was_ok() {
        let of = |fields: &[(&str, &str)]| {
            let fields: std::collections::BTreeMap<String, String> = fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            Aof::of(|k| fields.get(k).cloned())
        };
        let quiet = [
            ("aof_rewrite_in_progress", "0"),
            ("aof_rewrite_scheduled", "0"),
            ("aof_last_bgrewrite_status", "ok"),
        ];
        assert_eq!(of(&quiet), None, "no answer");
        let with = |enabled: &'static str, over: (&'static str, &'static str)| {
            let mut f = vec![("aof_enabled", enabled)];
            f.extend(quiet.iter().filter(|(k, _)| *k != over.0));
            f.push(over);
            of(&f)
        };
        assert_eq!(with("0", quiet[0]), Some(Aof::Off));
        assert_eq!(with("1", quiet[0]), Some(Aof::Written));
        assert_eq!(
            with("1", ("aof_rewrite_in_progress", "1")),
            Some(Aof::Writing)
        );
        assert_eq!(
            with("1", ("aof_rewrite_scheduled", "1")),
            Some(Aof::Writing)
        );
        assert_eq!(
            with("1", ("aof_last_bgrewrite_status", "err")),
            Some(Aof::Writing)
        );
    }

    #[test]
    fn the_restore_is_served_when_every_slot_is_and_so_recorded() {
        assert!(every_slot_served(Some(16384)));
        assert!(!every_slot_served(Some(16383)));
        assert!(!every_slot_served(None));
        let mut annotations = std::collections::BTreeMap::new();
        assert!(!served(&annotations));
        annotations.insert(SERVED_ANNOTATION.to_owned(), "true".to_owned());
        assert!(served(&annotations));
    }

    #[test]
    fn the_store_config_follows_the_spec_and_keeps_the_keys_out_of_debug() {
        let config = store_config(&store(), "AKID".into(), "very-secret".into(), None);
        assert_eq!(config.endpoint.as_deref(), Some("http://10.213.0.1:7070"));
        assert_eq!(config.prefix, "valkey");
        assert!(config.path_style);
        assert!(!format!("{config:?}").contains("very-secret"));
    }
}
