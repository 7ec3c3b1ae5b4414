//! What the backup crate's component tests start: real valkey-server processes and a real
//! S3-compatible object store process, each on its own loopback address.

#![allow(dead_code)]

#[path = "../../../cluster-controller/tests/common/servers.rs"]
pub mod servers;

pub mod data;
pub mod objectstore;
pub mod valkey;

use std::time::{Duration, Instant};

/// Polls `check` until it returns `Some`, or panics with `what` at the deadline.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
