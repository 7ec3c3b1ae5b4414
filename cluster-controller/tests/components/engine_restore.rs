//! A cluster restored from a backup forms with its data: each shard's first member starts from
//! that shard's snapshot (a `dump.rdb` the restore init container would have put there), takes
//! the shard's slots (`Desired::restore`, the manifest's), and every key is there; replicas
//! sync from it.

use crate::common;

use std::time::Duration;

use backup::manifest::{BackupRef, Manifest, ObjectRef, ShardBackup, SourceRef};
use backup::{CaptureOptions, Store, StoreConfig};
use cluster_controller::engine::Desired;
use cluster_controller::parent::restore;
use cluster_controller::valkey::slots::SlotSet;
use redis::Value;
use valkey_api::v1alpha1::BackupStore;

use common::lab::Lab;
use common::servers;

const KEYS: usize = 2_000;

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_cluster_forms_with_every_key_on_the_backups_slots() {
    // The source: two shards, every key written to its owner, then each primary's snapshot.
    let mut source = Lab::new("restore-src", servers::valkey_9(), 161);
    source.scale(Desired::new(2, 0));
    source.converge(Duration::from_secs(60)).await;
    let mut owner_slots = Vec::new();
    for shard in 0..2 {
        let nodes = source.cluster_nodes(&format!("c-{shard}-0")).await;
        owner_slots.push(nodes.myself().expect("myself").slots.clone());
    }
    for i in 0..KEYS {
        let key = format!("key:{i}");
        let slot: u16 = text(&source.command("c-0-0", &["CLUSTER", "KEYSLOT", &key]).await)
            .parse()
            .expect("slot");
        let shard = owner_slots
            .iter()
            .position(|s| s.contains(slot))
            .expect("an owner");
        let value = format!("value-{i}");
        source
            .command(&format!("c-{shard}-0"), &["SET", &key, &value])
            .await;
    }
    let (source_root, _) = source.paths();
    for shard in 0..2 {
        source.command(&format!("c-{shard}-0"), &["SAVE"]).await;
    }

    // The restore: each shard's first member starts on its shard's snapshot, with `appendonly
    // no` (with it on and no append-only file yet, a server ignores dump.rdb: the first try of
    // this test, with the lab's default persistence, restored no key).
    let mut restored = Lab::with_options(
        "restore-dst",
        servers::valkey_9(),
        162,
        servers::Options {
            persistence: false,
            ..servers::Options::default()
        },
    );
    let (root, _) = restored.paths();
    for shard in 0..2 {
        let name = format!("c-{shard}-0");
        std::fs::create_dir_all(root.join(&name)).expect("folder");
        std::fs::copy(
            source_root.join(&name).join("dump.rdb"),
            root.join(&name).join("dump.rdb"),
        )
        .expect("snapshot");
    }
    drop(source);
    let mut desired = Desired::new(2, 1);
    desired.restore = Some(
        owner_slots
            .iter()
            .map(|s| SlotSet::from_ranges(s.ranges()))
            .collect(),
    );
    restored.scale(desired);
    let health = restored.converge(Duration::from_secs(90)).await;
    assert_eq!(health.ready_shards, 2, "{health:?}");
    assert_eq!(health.replicas_in_sync, 2, "{health:?}");
    for (shard, slots) in owner_slots.iter().enumerate() {
        let nodes = restored.cluster_nodes(&format!("c-{shard}-0")).await;
        let me = nodes.myself().expect("myself");
        assert!(
            me.is_primary(),
            "c-{shard}-0 holds the data and is the primary"
        );
        assert_eq!(&me.slots, slots, "shard {shard} has the backup's slots");
    }
    for i in 0..KEYS {
        let key = format!("key:{i}");
        let slot: u16 = text(
            &restored
                .command("c-0-0", &["CLUSTER", "KEYSLOT", &key])
                .await,
        )
        .parse()
        .expect("slot");
        let shard = owner_slots
            .iter()
            .position(|s| s.contains(slot))
            .expect("an owner");
        let got = restored
            .command(&format!("c-{shard}-0"), &["GET", &key])
            .await;
        assert_eq!(text(&got), format!("value-{i}"), "{key}");
    }
    // Replicas started empty and synced from the restored primaries.
    restored
        .wait_replicas_caught_up(Duration::from_secs(30))
        .await;
    for shard in 0..2 {
        let size = text(&restored.command(&format!("c-{shard}-1"), &["DBSIZE"]).await);
        let primary = text(&restored.command(&format!("c-{shard}-0"), &["DBSIZE"]).await);
        assert_eq!(
            size, primary,
            "shard {shard}'s replica has its primary's keys"
        );
    }
}

/// The object store process of the backup tests (tests/objectstore), or `None` when it is not
/// built (`make unit` builds it first).
fn objectstore_binary() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("OBJECTSTORE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../.localkube/objectstore/bin/versitygw")
        });
    path.is_file().then_some(path)
}

/// Killed when dropped.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The whole chain without Kubernetes: each shard of a formed cluster captured into the real
/// object store and a manifest written last, as a backup does; then the restore's plan read
/// from that manifest (`parent::restore`), each first member's folder filled by
/// `backup::restore` (what `valkey-restore` runs) and the engine forming with the plan's slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_captured_into_the_store_is_restored_through_its_manifest() {
    let Some(store_bin) = objectstore_binary() else {
        eprintln!(
            "SKIPPED: the object store is not built: run tests/objectstore/build.sh (make unit does)"
        );
        return;
    };
    let mut source = Lab::new("restore-chain-src", servers::valkey_9(), 163);
    // The store's folder outside the lab's, which goes with the lab.
    let store_dir = std::env::temp_dir()
        .join("valkey-engine-tests")
        .join(format!("restore-chain-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store_dir);
    std::fs::create_dir_all(store_dir.join("root/backups")).expect("store folder");
    let address = "127.0.164.1:7070";
    let _store_process = Process(
        std::process::Command::new(&store_bin)
            .args([
                "--port", address, "--access", "k", "--secret", "s-secret", "--quiet",
            ])
            .arg("posix")
            .arg(store_dir.join("root"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("object store"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(address).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the object store does not answer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spec_store: BackupStore = serde_json::from_value(serde_json::json!({"s3": {
        "endpoint": format!("http://{address}"), "bucket": "backups", "prefix": "tests",
        "credentials": {"secretName": "store-keys"}
    }}))
    .expect("store");
    let config: StoreConfig =
        restore::store_config(&spec_store, "k".into(), "s-secret".into(), None);
    let store = Store::new(&config).expect("store client");

    source.scale(Desired::new(2, 0));
    source.converge(Duration::from_secs(60)).await;
    let mut owner_slots = Vec::new();
    for shard in 0..2 {
        let nodes = source.cluster_nodes(&format!("c-{shard}-0")).await;
        owner_slots.push(nodes.myself().expect("myself").slots.clone());
    }
    for i in 0..KEYS {
        let key = format!("key:{i}");
        let slot: u16 = text(&source.command("c-0-0", &["CLUSTER", "KEYSLOT", &key]).await)
            .parse()
            .expect("slot");
        let shard = owner_slots
            .iter()
            .position(|s| s.contains(slot))
            .expect("owner");
        source
            .command(
                &format!("c-{shard}-0"),
                &["SET", &key, &format!("value-{i}")],
            )
            .await;
    }
    let location = "shop/orders/nightly-1a2b3c4d";
    let mut shards = Vec::new();
    for (shard, slots) in owner_slots.iter().enumerate() {
        let name = format!("c-{shard}-0");
        let object = format!("shard-{shard}.rdb");
        let captured = backup::capture(
            &backup::Source {
                address: format!("{}:6379", source.ip_of(&name)),
                user: "default".into(),
                password: servers::DEFAULT_PASSWORD.into(),
            },
            &store,
            &format!("{location}/{object}"),
            &CaptureOptions::default(),
            &|_| {},
        )
        .await
        .expect("capture");
        let mut entry = ShardBackup::from_capture(shard as u32, &captured);
        entry.object = ObjectRef {
            name: object,
            bytes: captured.bytes,
            sha256: captured.sha256.clone(),
        };
        entry.slot_ranges = slots
            .ranges()
            .iter()
            .map(|r| [r.start(), r.end()])
            .collect();
        shards.push(entry);
    }
    let manifest = Manifest {
        format_version: backup::manifest::FORMAT_VERSION,
        backup: BackupRef {
            namespace: "shop".into(),
            name: "nightly".into(),
            uid: "1a2b3c4d".into(),
        },
        source: SourceRef {
            kind: "ValkeyCluster".into(),
            name: "orders".into(),
            uid: "u".into(),
        },
        started_at: String::new(),
        completed_at: String::new(),
        valkey_version: "9.1.2".into(),
        shards,
        users: Vec::new(),
    };
    store
        .put(&format!("{location}/manifest.json"), manifest.to_json())
        .await
        .expect("manifest");
    drop(source);
    // Nothing was captured from it but what the store holds now.

    // The restore's plan, from the store alone.
    let from = valkey_api::v1alpha1::RestoreFrom {
        store: Some(spec_store.clone()),
        path: Some(location.into()),
        ..Default::default()
    };
    let src = restore::source(&from, None).expect("source");
    let read = restore::read_manifest(&store, &src.location)
        .await
        .expect("manifest");
    let plan = restore::shards(&src, &read, "ValkeyCluster").expect("plan");
    assert_eq!(plan.len(), 2, "two shards");
    // A folder without a manifest is no backup: one line that names the key.
    let missing = restore::read_manifest(&store, "shop/orders/absent")
        .await
        .expect_err("no manifest there");
    assert_eq!(missing.reason, restore::MANIFEST_UNREADABLE);
    assert!(
        missing
            .message
            .contains("s3://backups/tests/shop/orders/absent/manifest.json")
            && !missing.message.contains('\n'),
        "{missing:?}"
    );

    let mut restored = Lab::with_options(
        "restore-chain-dst",
        servers::valkey_9(),
        165,
        servers::Options {
            persistence: false,
            ..servers::Options::default()
        },
    );
    let (root, _) = restored.paths();
    for shard in &plan {
        let data = backup::restore::InitialData {
            object: shard.initial_data.object.clone(),
            sha256: shard.initial_data.sha256.clone(),
            bytes: u64::try_from(shard.initial_data.bytes).expect("bytes"),
        };
        let dir = root.join(format!("c-{}-0", shard.index));
        std::fs::create_dir_all(&dir).expect("folder");
        backup::restore::restore(&store, &data, &dir, "dump.rdb", None)
            .await
            .expect("restore");
    }
    let mut desired = Desired::new(2, 1);
    desired.restore = Some(plan.iter().map(|s| s.slots.clone()).collect());
    restored.scale(desired);
    let health = restored.converge(Duration::from_secs(90)).await;
    assert_eq!(health.ready_shards, 2, "{health:?}");
    for (shard, slots) in owner_slots.iter().enumerate() {
        let nodes = restored.cluster_nodes(&format!("c-{shard}-0")).await;
        assert_eq!(&nodes.myself().expect("myself").slots, slots);
    }
    for i in 0..KEYS {
        let key = format!("key:{i}");
        let slot: u16 = text(
            &restored
                .command("c-0-0", &["CLUSTER", "KEYSLOT", &key])
                .await,
        )
        .parse()
        .expect("slot");
        let shard = owner_slots
            .iter()
            .position(|s| s.contains(slot))
            .expect("owner");
        let got = restored
            .command(&format!("c-{shard}-0"), &["GET", &key])
            .await;
        assert_eq!(text(&got), format!("value-{i}"), "{key}");
    }
    drop(restored);
    let _ = std::fs::remove_dir_all(&store_dir);
}
