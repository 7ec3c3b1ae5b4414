//! Capture's throughput beside `valkey-cli --rdb` to a file, on the same server and data, both
//! on this machine's loopback and disk. A measurement, not a check: ignored by default.
//!
//!   BACKUP_BENCH_KEYS=200000 cargo test --workspace --test throughput -- --ignored --nocapture

mod common;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Instant;

use backup::{CaptureOptions, Store};
use common::objectstore::ObjectStore;
use common::servers::valkey_9;
use common::valkey::{BACKUP_PASSWORD, BACKUP_USER, DEFAULT_PASSWORD, Sync, Valkey};
use common::{data, runtime};

#[test]
#[ignore = "a measurement: run it by hand"]
fn capture_beside_valkey_cli_rdb() {
    let store_bin = require_objectstore!();
    let keys: usize = std::env::var("BACKUP_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = std::env::temp_dir().join(format!("backup-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let binary = valkey_9();
    let store_proc =
        ObjectStore::start(store_bin, Ipv4Addr::new(127, 0, 249, 1), &dir.join("store"));
    let source = Valkey::start(
        &binary,
        Ipv4Addr::new(127, 0, 249, 2),
        &dir.join("source"),
        Sync::Diskless,
    );
    data::write(&mut source.connection(), keys);

    // valkey-cli beside the server binary (the image table ships both).
    let cli = binary.path.with_file_name("valkey-cli");
    let cli = if cli.is_file() {
        cli
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../.localkube/images/valkey-9.1/bin/valkey-cli")
    };
    let file = dir.join("cli.rdb");
    let started = Instant::now();
    let mut cmd = Command::new(&cli);
    cmd.args(["-h", &source.address.ip().to_string(), "-p", "6379"])
        .args([
            "--user",
            "default",
            "--pass",
            DEFAULT_PASSWORD,
            "--no-auth-warning",
        ])
        .arg("--rdb")
        .arg(&file);
    if let Some(libs) = &binary.libs {
        cmd.env("LD_LIBRARY_PATH", libs);
    }
    let out = cmd.output().expect("valkey-cli");
    let cli_time = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli_bytes = std::fs::metadata(&file).expect("rdb").len();

    let rt = runtime();
    let store = Store::new(&store_proc.config()).expect("store");
    let captured = rt
        .block_on(backup::capture(
            &source.source(BACKUP_USER, BACKUP_PASSWORD),
            &store,
            "bench/shard-0.rdb",
            &CaptureOptions::default(),
            &|_| {},
        ))
        .expect("capture");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let cli_rate = mib(cli_bytes) / cli_time.as_secs_f64();
    let capture_rate = mib(captured.bytes) / captured.duration.as_secs_f64();
    println!(
        "keys {keys}: valkey-cli --rdb {:.1} MiB in {:.2} s ({cli_rate:.0} MiB/s); capture to the \
         object store {:.1} MiB in {:.2} s ({capture_rate:.0} MiB/s, {} parts); ratio {:.2}",
        mib(cli_bytes),
        cli_time.as_secs_f64(),
        mib(captured.bytes),
        captured.duration.as_secs_f64(),
        captured.parts,
        capture_rate / cli_rate
    );
    drop(source);
    drop(store_proc);
    let _ = std::fs::remove_dir_all(&dir);
}
