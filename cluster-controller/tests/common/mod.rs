//! Loading the captured replies under `tests/fixtures/`.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use redis::Value;

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The text of `<name>.txt`.
pub fn text(name: &str) -> String {
    let file = path(&format!("{name}.txt"));
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The raw bytes of `name` (with its extension).
pub fn bytes(name: &str) -> Vec<u8> {
    let file = path(name);
    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// A `.resp2` / `.resp3` capture decoded by the redis crate's own parser, as a client gets it.
pub fn value(name: &str) -> Value {
    redis::parse_redis_value(&bytes(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The same reply as RESP2 and as RESP3.
pub fn both(name: &str) -> [Value; 2] {
    [
        value(&format!("{name}.resp2")),
        value(&format!("{name}.resp3")),
    ]
}

/// An integer reply capture (e.g. CLUSTER COUNTKEYSINSLOT).
pub fn int(name: &str) -> u64 {
    match value(name) {
        Value::Int(n) => u64::try_from(n).unwrap_or_else(|_| panic!("{name}: negative")),
        other => panic!("{name}: not an integer: {other:?}"),
    }
}

pub mod lab;
pub mod memory;
pub mod net;
pub mod replication_lab;
pub mod sentinels;
pub mod servers;
pub mod traffic;
pub mod world;
