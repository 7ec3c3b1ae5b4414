//! A cluster restored from a backup forms with its data: each shard's first member starts from
//! that shard's snapshot (a `dump.rdb` the restore init container would have put there), takes
//! the shard's slots (`Desired::restore`, the manifest's), and every key is there; replicas
//! sync from it.

use crate::common;

use std::time::Duration;

use cluster_controller::engine::Desired;
use cluster_controller::valkey::slots::SlotSet;
use redis::Value;

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
