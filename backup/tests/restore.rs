//! `valkey-restore` against the real object store and real servers (Valkey 9.1 and 8.0): a
//! snapshot captured from a server is fetched into an empty folder and a fresh server loads every
//! key; a corrupted object, a wrong length, a missing object, a store that is down and an object
//! that is not an RDB each fail with a message naming the object and leave no dump.rdb; with the
//! marker present nothing is fetched. And what a server with `appendonly yes` does with a
//! dump.rdb and no append-only file yet. Addresses `127.0.23x.y`, apart from capture.rs's.

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use backup::{CaptureOptions, Store};
use common::objectstore::{ACCESS_KEY, BUCKET, ObjectStore, SECRET_KEY};
use common::servers::{Binary, valkey_8, valkey_9};
use common::valkey::{BACKUP_PASSWORD, BACKUP_USER, DEFAULT_PASSWORD, Sync, Valkey};
use common::{data, runtime, wait_for};

const KEYS: usize = 3_000;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("restore-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn ip(subnet: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, subnet, host)
}

/// A snapshot in the store and what the manifest would say of it.
struct Snapshot {
    object: String,
    sha256: String,
    bytes: u64,
}

/// Writes the dataset into a server and captures it into the store as `object`.
fn snapshot(binary: &Binary, ip: Ipv4Addr, dir: &Path, store: &Store, object: &str) -> Snapshot {
    let source = Valkey::start(binary, ip, &dir.join("source"), Sync::Diskless);
    data::write(&mut source.connection(), KEYS);
    let captured = runtime()
        .block_on(backup::capture(
            &source.source(BACKUP_USER, BACKUP_PASSWORD),
            store,
            object,
            &CaptureOptions::default(),
            &|_| {},
        ))
        .unwrap_or_else(|e| panic!("capture: {e}\n{}", source.log_tail()));
    Snapshot {
        object: object.to_owned(),
        sha256: captured.sha256,
        bytes: captured.bytes,
    }
}

/// Runs valkey-restore as the init container would, with the credentials as files.
fn valkey_restore(store: &ObjectStore, dir: &Path, snapshot: &Snapshot, extra: &[&str]) -> Output {
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets folder");
    std::fs::write(secrets.join("AWS_ACCESS_KEY_ID"), ACCESS_KEY).expect("key id");
    std::fs::write(secrets.join("AWS_SECRET_ACCESS_KEY"), SECRET_KEY).expect("secret");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data folder");
    Command::new(env!("CARGO_BIN_EXE_valkey-restore"))
        .arg("--dir")
        .arg(&data)
        .args(["--object", &snapshot.object, "--sha256", &snapshot.sha256])
        .args(["--bytes", &snapshot.bytes.to_string()])
        .args(["--endpoint", &format!("http://{}", store.address)])
        .args(["--bucket", BUCKET, "--prefix", "tests"])
        .arg("--access-key-id-file")
        .arg(secrets.join("AWS_ACCESS_KEY_ID"))
        .arg("--secret-access-key-file")
        .arg(secrets.join("AWS_SECRET_ACCESS_KEY"))
        .args(["--retry-timeout-seconds", "3"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("running valkey-restore")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Fails with a message that names the object and says `why`, leaving no snapshot to load.
fn assert_fails_closed(out: &Output, dir: &Path, object: &str, why: &str) {
    let text = stderr(out);
    assert!(
        !out.status.success(),
        "exit status {:?}: {text}",
        out.status
    );
    assert!(
        text.contains(&format!("s3://{BUCKET}/tests/{object}")),
        "the message names the object: {text}"
    );
    assert!(text.contains(why), "the message says {why:?}: {text}");
    // Printed for the record (`--nocapture`): what the pod's status will quote.
    eprintln!("{}", text.trim());
    let data = dir.join("data");
    for leftover in ["dump.rdb", "dump.rdb.partial"] {
        assert!(
            !data.join(leftover).exists(),
            "{leftover} left behind after: {text}"
        );
    }
    let markers: Vec<_> = std::fs::read_dir(&data)
        .expect("data folder")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".initial-data"))
        .collect();
    assert!(markers.is_empty(), "a marker left behind: {markers:?}");
}

/// A good snapshot restores and a server loads every key; run again with the marker present
/// (and the store down) it does nothing; each fault fails closed.
fn restore_and_faults(binary: Binary, subnet: u8, name: &str) {
    let store_bin = require_objectstore!();
    let dir = scratch(name);
    let mut store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let store = Store::new(&store_proc.config()).expect("store");
    let good = snapshot(
        &binary,
        ip(subnet, 2),
        &dir,
        &store,
        &format!("{name}/shard-0.rdb"),
    );
    let rt = runtime();

    // The good one.
    let target = dir.join("good");
    let out = valkey_restore(&store_proc, &target, &good, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("restored"), "{}", stderr(&out));
    let data_dir = target.join("data");
    assert!(
        data_dir
            .join(backup::restore::marker_name(&good.sha256))
            .is_file()
    );
    assert!(!data_dir.join("dump.rdb.partial").exists());
    let loaded = std::fs::read(data_dir.join("dump.rdb")).expect("dump.rdb");
    assert_eq!(loaded.len() as u64, good.bytes);
    {
        let server = Valkey::start(&binary, ip(subnet, 3), &data_dir, Sync::Diskless);
        data::check(&mut server.connection(), KEYS);
    }

    // Corrupted: the same length, a few bytes flipped in the middle.
    let mut flipped = loaded.clone();
    let middle = flipped.len() / 2;
    for b in &mut flipped[middle..middle + 4] {
        *b ^= 0xA5;
    }
    let corrupted = Snapshot {
        object: format!("{name}/corrupted.rdb"),
        ..clone_of(&good)
    };
    rt.block_on(store.put(&corrupted.object, flipped))
        .expect("upload");
    let target = dir.join("corrupted");
    let out = valkey_restore(&store_proc, &target, &corrupted, &[]);
    assert_fails_closed(&out, &target, &corrupted.object, "does not match");

    // A wrong length (the manifest says one byte more).
    let long = Snapshot {
        bytes: good.bytes + 1,
        ..clone_of(&good)
    };
    let target = dir.join("length");
    let out = valkey_restore(&store_proc, &target, &long, &[]);
    assert_fails_closed(&out, &target, &long.object, "expected");
    assert!(stderr(&out).contains("length"), "{}", stderr(&out));

    // Not an RDB, though its checksum and length are the ones asked for.
    let text = b"this is not a snapshot at all".to_vec();
    let not_rdb = Snapshot {
        object: format!("{name}/text.rdb"),
        sha256: sha256_hex(&text),
        bytes: text.len() as u64,
    };
    rt.block_on(store.put(&not_rdb.object, text))
        .expect("upload");
    let target = dir.join("not-rdb");
    let out = valkey_restore(&store_proc, &target, &not_rdb, &[]);
    assert_fails_closed(&out, &target, &not_rdb.object, "not an RDB");

    // A newer RDB than the server reads.
    let target = dir.join("newer");
    let out = valkey_restore(&store_proc, &target, &good, &["--max-rdb-version", "10"]);
    assert_fails_closed(&out, &target, &good.object, "newer than 10");

    // Missing.
    let missing = Snapshot {
        object: format!("{name}/gone.rdb"),
        ..clone_of(&good)
    };
    let target = dir.join("missing");
    let out = valkey_restore(&store_proc, &target, &missing, &[]);
    assert_fails_closed(&out, &target, &missing.object, "not found");

    // The store down.
    store_proc.kill();
    let target = dir.join("down");
    let started = std::time::Instant::now();
    let out = valkey_restore(&store_proc, &target, &good, &[]);
    assert_fails_closed(&out, &target, &good.object, "fetching");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "it gives up after its retry deadline: {:?}",
        started.elapsed()
    );

    // The marker present (the good folder, the store still down): nothing is fetched or touched.
    let before = std::fs::read(data_dir.join("dump.rdb")).expect("dump.rdb");
    let out = valkey_restore(&store_proc, &dir.join("good"), &good, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing to do"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(data_dir.join("dump.rdb")).expect("dump.rdb"),
        before
    );

    let _ = std::fs::remove_dir_all(&dir);
}

fn clone_of(s: &Snapshot) -> Snapshot {
    Snapshot {
        object: s.object.clone(),
        sha256: s.sha256.clone(),
        bytes: s.bytes,
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn restore_on_valkey_9() {
    restore_and_faults(valkey_9(), 231, "v9");
}

#[test]
fn restore_on_valkey_8() {
    restore_and_faults(valkey_8(), 232, "v8");
}

/// A server started on `dir` with `appendonly` as given; the default user's password as the
/// capture tests' servers have it.
fn server_with_aof(binary: &Binary, ip: Ipv4Addr, dir: &Path, appendonly: bool) -> Server {
    let mut cmd = Command::new(&binary.path);
    cmd.args(["--bind", &ip.to_string(), "--port", "6379"])
        .args(["--requirepass", DEFAULT_PASSWORD])
        .arg("--dir")
        .arg(dir)
        .args(["--dbfilename", "dump.rdb", "--save", ""])
        .args(["--appendonly", if appendonly { "yes" } else { "no" }])
        .args(["--logfile", "server.log"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(libs) = &binary.libs {
        cmd.env("LD_LIBRARY_PATH", libs);
    }
    Server(cmd.spawn().expect("valkey-server"))
}

/// Killed when dropped, also when the test panics.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn connect(ip: Ipv4Addr) -> redis::Connection {
    let client = redis::Client::open(format!("redis://default:{DEFAULT_PASSWORD}@{ip}:6379/"))
        .expect("client");
    wait_for("the server answers", Duration::from_secs(60), || {
        let mut conn = client.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut conn).ok()?;
        Some(conn)
    })
}

fn dbsize(conn: &mut redis::Connection) -> usize {
    redis::cmd("DBSIZE").query(conn).expect("DBSIZE")
}

/// The design's reason to start a restored member with `appendonly no`: with `appendonly yes`
/// and no append-only file yet, the server starts empty and ignores dump.rdb. Then the way
/// round it: started with `appendonly no` it loads dump.rdb, `CONFIG SET appendonly yes` writes
/// the append-only file from what it holds, and a restart with `appendonly yes` has every key.
fn aof_ignores_the_snapshot(binary: Binary, subnet: u8, name: &str) {
    let store_bin = require_objectstore!();
    let dir = scratch(name);
    let store_proc = ObjectStore::start(store_bin, ip(subnet, 1), &dir.join("store"));
    let store = Store::new(&store_proc.config()).expect("store");
    let snap = snapshot(
        &binary,
        ip(subnet, 2),
        &dir,
        &store,
        &format!("{name}/shard-0.rdb"),
    );
    let rdb_version = {
        let target = dir.join("aof-yes");
        let out = valkey_restore(&store_proc, &target, &snap, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    assert!(rdb_version.contains("RDB version"), "{rdb_version}");

    // appendonly yes from the first start: empty.
    let data_dir = dir.join("aof-yes").join("data");
    let server = server_with_aof(&binary, ip(subnet, 3), &data_dir, true);
    let mut conn = connect(ip(subnet, 3));
    let with_aof = dbsize(&mut conn);
    drop(server);
    assert_eq!(
        with_aof, 0,
        "a server with appendonly yes and no append-only file loaded dump.rdb"
    );

    // appendonly no first, then on live, then a restart with it on.
    let target = dir.join("aof-live");
    let out = valkey_restore(&store_proc, &target, &snap, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let data_dir = target.join("data");
    let server = server_with_aof(&binary, ip(subnet, 4), &data_dir, false);
    let mut conn = connect(ip(subnet, 4));
    assert_eq!(dbsize(&mut conn), KEYS);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut conn)
        .expect("CONFIG SET appendonly yes");
    wait_for(
        "the append-only file is rewritten from the loaded data",
        Duration::from_secs(60),
        || {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut conn)
                .ok()?;
            (info.contains("aof_enabled:1")
                && info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
                && info.contains("aof_last_bgrewrite_status:ok"))
            .then_some(())
        },
    );
    drop(server);
    // dump.rdb away: what comes back is the append-only file's.
    std::fs::remove_file(data_dir.join("dump.rdb")).expect("remove dump.rdb");
    let server = server_with_aof(&binary, ip(subnet, 4), &data_dir, true);
    let mut conn = connect(ip(subnet, 4));
    data::check(&mut conn, KEYS);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn appendonly_yes_ignores_the_snapshot_on_valkey_9() {
    aof_ignores_the_snapshot(valkey_9(), 233, "aof-v9");
}

#[test]
fn appendonly_yes_ignores_the_snapshot_on_valkey_8() {
    aof_ignores_the_snapshot(valkey_8(), 234, "aof-v8");
}
