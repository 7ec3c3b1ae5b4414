//! Capture against real servers: valkey-server 9.1 and 8.0 (the localkube image table's, or
//! VALKEY_SERVER_9 / VALKEY_SERVER_8) and a real S3-compatible object store process
//! (tests/objectstore). Each test binds addresses of its own (`127.0.24x.y`), so they run side
//! by side. Without the object store binary they skip and say how to build it.

mod common;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use backup::{CaptureError, CaptureOptions, PayloadForm, Store};
use common::objectstore::ObjectStore;
use common::servers::{Binary, valkey_8, valkey_9};
use common::valkey::{BACKUP_PASSWORD, BACKUP_USER, CLIENT_PASSWORD, CLIENT_USER, Sync, Valkey};
use common::{data, runtime};

const KEYS: usize = 20_000;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("backup-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn ip(subnet: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, subnet, host)
}

/// Small parts (the store's minimum), so a 20,000-key dataset is several parts.
fn options() -> CaptureOptions {
    CaptureOptions {
        part_size: 5 * 1024 * 1024,
        ..CaptureOptions::default()
    }
}

/// How the test asks and what the server must answer with.
struct Case {
    sync: Sync,
    offer_diskless: bool,
    form: PayloadForm,
}

/// Backs a server with 20,000 varied keys up, downloads the object and checks its checksum,
/// loads it into a fresh server and checks every key.
fn round_trip(binary: Binary, case: Case, subnet: u8, name: &str) {
    let sync = case.sync;
    let store_bin = require_objectstore!();
    let dir = scratch(name);
    let store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let source = Valkey::start(&binary, ip(subnet, 2), &dir.join("source"), sync);
    data::write(&mut source.connection(), KEYS);

    let rt = runtime();
    let store = Store::new(&store_proc.config()).expect("store");
    let object = format!("{name}/shard-0.rdb");
    let progress = Mutex::new(Vec::new());
    let captured = rt
        .block_on(backup::capture(
            &source.source(BACKUP_USER, BACKUP_PASSWORD),
            &store,
            &object,
            &CaptureOptions {
                offer_diskless: case.offer_diskless,
                ..options()
            },
            &|bytes| progress.lock().expect("progress").push(bytes),
        ))
        .unwrap_or_else(|e| panic!("capture: {e}\n{}", source.log_tail()));

    assert_eq!(captured.form, case.form);
    assert!(captured.bytes > 10 * 1024 * 1024, "{captured:?}");
    assert!(captured.parts >= 3, "{captured:?}");
    let reported = progress.lock().expect("progress").clone();
    assert!(
        !reported.is_empty() && reported.windows(2).all(|w| w[0] < w[1]),
        "{reported:?}"
    );
    // The replication id the server reported is its own (a primary's history; it takes a new
    // one when its first link asks for a full sync, so it is read after).
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut source.connection())
        .expect("INFO");
    assert!(
        info.contains(&format!("master_replid:{}", captured.replication_id)),
        "{captured:?}\n{info}"
    );
    assert!(captured.rdb_version >= 11, "{captured:?}");

    // Re-downloaded, the object is the bytes the capture hashed.
    let file = dir.join("restore").join("dump.rdb");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("restore folder");
    let fetched = rt
        .block_on(async {
            let mut out = tokio::fs::File::create(&file).await.expect("file");
            store.fetch_into(&object, &mut out).await
        })
        .expect("download");
    assert_eq!(fetched.bytes, captured.bytes);
    assert_eq!(fetched.sha256, captured.sha256);
    let header = std::fs::read(&file).expect("read")[..9].to_vec();
    assert_eq!(
        backup::rdb::version(&header),
        Ok(captured.rdb_version),
        "{:?}",
        String::from_utf8_lossy(&header)
    );

    // A fresh server loads it: every key, value and time to live is there.
    let restored = Valkey::start(&binary, ip(subnet, 3), &dir.join("restore"), sync);
    data::check(&mut restored.connection(), KEYS);
    drop(restored);
    let _ = std::fs::remove_dir_all(&dir);
}

const DISKLESS: Case = Case {
    sync: Sync::Diskless,
    offer_diskless: true,
    form: PayloadForm::Diskless,
};

#[test]
fn valkey_9_diskless_round_trip() {
    round_trip(valkey_9(), DISKLESS, 241, "v9-diskless");
}

/// 9.1 streams to an rdb-only link even with `repl-diskless-sync no`; the sized form comes
/// when the link does not offer `capa eof`.
#[test]
fn valkey_9_disk_round_trip() {
    let case = Case {
        sync: Sync::Disk,
        offer_diskless: false,
        form: PayloadForm::Sized,
    };
    round_trip(valkey_9(), case, 242, "v9-disk");
}

#[test]
fn valkey_8_diskless_round_trip() {
    round_trip(valkey_8(), DISKLESS, 243, "v8-diskless");
}

/// 8.0 writes the file and sends it sized when diskless sync is off, offered or not.
#[test]
fn valkey_8_disk_round_trip() {
    let case = Case {
        sync: Sync::Disk,
        offer_diskless: true,
        form: PayloadForm::Sized,
    };
    round_trip(valkey_8(), case, 244, "v8-disk");
}

/// The backup user's rules are enough, and are all it has; a client user (every key and data
/// command, no administration) is refused before anything reaches the store.
#[test]
fn only_the_replication_link_rights_are_needed_and_a_client_is_refused() {
    let store_bin = require_objectstore!();
    for (binary, subnet) in [(valkey_9(), 245u8), (valkey_8(), 246)] {
        let dir = scratch(&format!("rights-{subnet}"));
        let store_proc = ObjectStore::start(store_bin.clone(), ip(subnet, 1), &dir.join("store"));
        let source = Valkey::start(&binary, ip(subnet, 2), &dir.join("source"), Sync::Diskless);
        data::write(&mut source.connection(), 100);

        // The backup user can read no key and run no command but the handshake.
        let mut backup_conn = source
            .client(Some((BACKUP_USER, BACKUP_PASSWORD)))
            .get_connection()
            .expect("backup user connects");
        for cmd in [
            redis::cmd("GET").arg(data::key(1)).clone(),
            redis::cmd("INFO"),
            redis::cmd("KEYS").arg("*").clone(),
        ] {
            let err = cmd
                .query::<redis::Value>(&mut backup_conn)
                .expect_err("refused");
            assert!(err.to_string().contains("no permissions"), "{err}");
        }

        let rt = runtime();
        let store = Store::new(&store_proc.config()).expect("store");
        let refused = rt
            .block_on(backup::capture(
                &source.source(CLIENT_USER, CLIENT_PASSWORD),
                &store,
                "rights/client.rdb",
                &options(),
                &|_| {},
            ))
            .expect_err("a client user may not capture");
        match &refused {
            CaptureError::Refused { reply, .. } => {
                assert!(reply.contains("NOPERM"), "{refused}");
            }
            other => panic!("not refused: {other}"),
        }
        assert!(!refused.to_string().contains(CLIENT_PASSWORD), "{refused}");

        let wrong = rt
            .block_on(backup::capture(
                &source.source(BACKUP_USER, "not-the-password"),
                &store,
                "rights/wrong.rdb",
                &options(),
                &|_| {},
            ))
            .expect_err("a wrong password");
        assert!(
            matches!(
                wrong,
                CaptureError::Refused {
                    command: "AUTH",
                    ..
                }
            ),
            "{wrong}"
        );

        let captured = rt
            .block_on(backup::capture(
                &source.source(BACKUP_USER, BACKUP_PASSWORD),
                &store,
                "rights/backup.rdb",
                &options(),
                &|_| {},
            ))
            .expect("the backup user captures");
        assert_eq!(captured.parts, 1);
        let names = rt.block_on(store.list("rights")).expect("list");
        assert_eq!(names, vec!["rights/backup.rdb".to_owned()]);
        drop(source);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The store goes away mid-upload: the capture fails, says the upload could not be aborted
/// either, and once the store is back no object exists under that name.
#[test]
fn the_store_lost_mid_upload_leaves_no_object() {
    let store_bin = require_objectstore!();
    let subnet = 247;
    let dir = scratch("store-lost");
    let store_proc = Arc::new(Mutex::new(ObjectStore::start(
        store_bin,
        ip(subnet, 1),
        &dir.join("store"),
    )));
    let source = Valkey::start(
        &valkey_9(),
        ip(subnet, 2),
        &dir.join("source"),
        Sync::Diskless,
    );
    data::write(&mut source.connection(), KEYS);

    let mut config = store_proc.lock().expect("store").config();
    config.retry_timeout = std::time::Duration::from_secs(2);
    let store = Store::new(&config).expect("store");
    let killed = AtomicBool::new(false);
    let rt = runtime();
    let failed = rt
        .block_on(backup::capture(
            &source.source(BACKUP_USER, BACKUP_PASSWORD),
            &store,
            "lost/shard-0.rdb",
            &options(),
            // The first part is on its way: the store dies before the next.
            &|_| {
                if !killed.swap(true, Ordering::SeqCst) {
                    store_proc.lock().expect("store").kill();
                }
            },
        ))
        .expect_err("the store is gone");
    assert!(
        killed.load(Ordering::SeqCst),
        "the capture never reached a part"
    );
    match &failed {
        CaptureError::Store { object, abort, .. } => {
            assert_eq!(object, "lost/shard-0.rdb");
            assert!(
                abort.is_some(),
                "the abort cannot have reached a dead store: {failed}"
            );
        }
        other => panic!("not a store error: {other}"),
    }
    let text = failed.to_string();
    assert!(
        text.contains("lost/shard-0.rdb") && text.contains("never an object"),
        "{text}"
    );
    assert!(
        !text.contains(BACKUP_PASSWORD) && !text.contains(common::objectstore::SECRET_KEY),
        "{text}"
    );

    store_proc.lock().expect("store").restart();
    assert!(!rt.block_on(store.exists("lost/shard-0.rdb")).expect("head"));
    assert!(rt.block_on(store.list("lost")).expect("list").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server dies mid-stream: the capture fails with what it had read, the upload is aborted
/// (the store is up), and no object exists.
#[test]
fn the_source_lost_mid_stream_aborts_the_upload() {
    let store_bin = require_objectstore!();
    let subnet = 248;
    let dir = scratch("source-lost");
    let store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let source = Arc::new(Mutex::new(Valkey::start(
        &valkey_9(),
        ip(subnet, 2),
        &dir.join("source"),
        Sync::Diskless,
    )));
    let (address, mut conn) = {
        let s = source.lock().expect("source");
        (s.source(BACKUP_USER, BACKUP_PASSWORD), s.connection())
    };
    data::write(&mut conn, KEYS);
    let store = Store::new(&store_proc.config()).expect("store");
    let rt = runtime();
    let failed = rt
        .block_on(backup::capture(
            &address,
            &store,
            "cut/shard-0.rdb",
            &options(),
            &|_| source.lock().expect("source").kill(),
        ))
        .expect_err("the source is gone");
    match &failed {
        CaptureError::Stream { bytes, .. } => assert!(*bytes > 0, "{failed}"),
        other => panic!("not a stream error: {other}"),
    }
    assert!(!rt.block_on(store.exists("cut/shard-0.rdb")).expect("head"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica hands its snapshot too (what the backup controller captures from): at its own
/// offset, which holds every write its primary made before that offset, and none of the
/// replica's role changes.
#[test]
fn a_replica_hands_its_snapshot_with_every_write_it_has() {
    let store_bin = require_objectstore!();
    let binary = valkey_9();
    let subnet = 240;
    let dir = scratch("replica");
    let store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let primary = Valkey::start(&binary, ip(subnet, 2), &dir.join("primary"), Sync::Diskless);
    let replica = Valkey::start(&binary, ip(subnet, 3), &dir.join("replica"), Sync::Diskless);
    data::write(&mut primary.connection(), KEYS);
    let mut conn = replica.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("masterauth")
        .arg(common::valkey::DEFAULT_PASSWORD)
        .query(&mut conn)
        .expect("masterauth");
    let _: () = redis::cmd("REPLICAOF")
        .arg(primary.address.ip().to_string())
        .arg(primary.address.port())
        .query(&mut conn)
        .expect("REPLICAOF");
    let offset_of = |server: &Valkey, field: &str| -> Option<u64> {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut server.connection())
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
    };
    // The primary's offset starts with its first replica's sync: read once the link is up.
    let target = common::wait_for(
        "the replica has its primary's writes",
        std::time::Duration::from_secs(60),
        || {
            let target = offset_of(&primary, "master_repl_offset")?;
            offset_of(&replica, "slave_repl_offset")
                .filter(|o| *o >= target && target > 0)
                .map(|_| target)
        },
    );

    let rt = runtime();
    let store = Store::new(&store_proc.config()).expect("store");
    let captured = rt
        .block_on(backup::capture(
            &replica.source(BACKUP_USER, BACKUP_PASSWORD),
            &store,
            "replica/shard-0.rdb",
            &options(),
            &|_| {},
        ))
        .unwrap_or_else(|e| panic!("capture: {e}\n{}", replica.log_tail()));
    assert!(
        captured.offset >= target,
        "{captured:?}, primary at {target}"
    );
    let role: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut replica.connection())
        .expect("INFO");
    assert!(role.contains("role:slave"), "{role}");

    let file = dir.join("restore").join("dump.rdb");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("restore folder");
    rt.block_on(async {
        let mut out = tokio::fs::File::create(&file).await.expect("file");
        store.fetch_into("replica/shard-0.rdb", &mut out).await
    })
    .expect("download");
    let restored = Valkey::start(&binary, ip(subnet, 4), &dir.join("restore"), Sync::Diskless);
    data::check(&mut restored.connection(), KEYS);
    drop(restored);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A begun capture's snapshot is fixed at its `+FULLRESYNC`: keys written to the server after
/// [`backup::begin`] returned, before the stream is read, are not in it (the server forked, or
/// wrote its file from a fork, before it answered). What `consistency: PausedWrites` rests on:
/// writes may go on once every shard's capture has begun.
fn fixed_when_begun(binary: Binary, case: Case, subnet: u8, name: &str) {
    let store_bin = require_objectstore!();
    let dir = scratch(name);
    let store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let source = Valkey::start(&binary, ip(subnet, 2), &dir.join("source"), case.sync);
    data::write(&mut source.connection(), KEYS);

    let rt = runtime();
    let store = Store::new(&store_proc.config()).expect("store");
    let options = CaptureOptions {
        offer_diskless: case.offer_diskless,
        ..options()
    };
    let begun = rt
        .block_on(backup::begin(
            &source.source(BACKUP_USER, BACKUP_PASSWORD),
            &options,
        ))
        .unwrap_or_else(|e| panic!("begin: {e}\n{}", source.log_tail()));
    let mut conn = source.connection();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.set(format!("after:{i}"), i).ignore();
    }
    let (): () = pipe.query(&mut conn).expect("writes after the begin");
    let object = format!("{name}/shard-0.rdb");
    let captured = rt
        .block_on(begun.finish(&store, &object, &options, &|_| {}))
        .unwrap_or_else(|e| panic!("finish: {e}\n{}", source.log_tail()));
    assert_eq!(captured.form, case.form);

    let file = dir.join("restore").join("dump.rdb");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("restore folder");
    rt.block_on(async {
        let mut out = tokio::fs::File::create(&file).await.expect("file");
        store.fetch_into(&object, &mut out).await
    })
    .expect("download");
    let restored = Valkey::start(&binary, ip(subnet, 3), &dir.join("restore"), case.sync);
    // Exactly the keys written before the begin (`check` counts them too).
    data::check(&mut restored.connection(), KEYS);
    drop(restored);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_diskless_capture_is_fixed_when_begun() {
    fixed_when_begun(valkey_9(), DISKLESS, 236, "begun-diskless");
}

#[test]
fn a_sized_capture_is_fixed_when_begun() {
    let case = Case {
        sync: Sync::Disk,
        offer_diskless: true,
        form: PayloadForm::Sized,
    };
    fixed_when_begun(valkey_8(), case, 235, "begun-sized");
}
