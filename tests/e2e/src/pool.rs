//! How many heavy tests run at once. The suite is one test binary whose tests run on many
//! threads, so light tests (a pod, an API call) never wait behind heavy ones; a test that forms a
//! Valkey cluster or installs the chart first takes a permit, so that the machine is not
//! oversubscribed (every heavy test runs its own controllers, several valkey-server pods and a
//! writer, beside the control plane).
//!
//! `E2E_HEAVY` sets the number of permits; the default is one per core, at least two.

use std::sync::OnceLock;
use std::time::Instant;

use tokio::sync::{Semaphore, SemaphorePermit};

static HEAVY: OnceLock<Semaphore> = OnceLock::new();

/// Permits for heavy tests: `E2E_HEAVY`, else the number of cores (at least 2).
pub fn heavy_permits() -> usize {
    std::env::var("E2E_HEAVY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2)
        })
}

/// A permit to run one heavy test; hold it for the test's life. The semaphore is shared by every
/// test of the binary, whatever runtime each test runs on. (It is never closed, so `None` cannot
/// happen; were it ever, the test would simply run unthrottled.)
pub async fn heavy() -> Option<HeavyTurn> {
    let semaphore = HEAVY.get_or_init(|| Semaphore::new(heavy_permits()));
    let permit = semaphore.acquire().await.ok()?;
    Some(HeavyTurn {
        _permit: permit,
        started: Instant::now(),
        test: std::thread::current().name().unwrap_or("?").to_owned(),
    })
}

/// A heavy test's turn. When it ends, the test's name and how long it held the turn are added to
/// [`times_file`], so a run says where the suite's time goes (`make e2e` prints the longest).
pub struct HeavyTurn {
    _permit: SemaphorePermit<'static>,
    started: Instant,
    test: String,
}

impl Drop for HeavyTurn {
    fn drop(&mut self) {
        let line = format!(
            "{:.0}\t{}\n",
            self.started.elapsed().as_secs_f64(),
            self.test
        );
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(times_file());
        // A figure for people, not a verdict: a file that cannot be written loses only it.
        if let Ok(mut file) = file {
            let _ = std::io::Write::write_all(&mut file, line.as_bytes());
        }
    }
}

/// Where heavy tests' times go: `target/e2e-heavy-times.tsv` (seconds, test), one line per turn.
pub fn times_file() -> std::path::PathBuf {
    crate::repo_root().join("target/e2e-heavy-times.tsv")
}

/// localkube's object store is one process for every test of the binary. A test that stops it
/// (to hold a backup mid-capture, or to make it unreachable) would fail every other test's backup
/// or restore meanwhile; so a test that uses the store holds a shared turn for its whole life,
/// and a test that stops it the only one. Take it after the heavy permit (once the cluster is
/// formed): a test that holds the store then never waits for a permit, so no two tests wait on
/// each other.
static OBJECT_STORE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A turn to use the object store beside other tests that use it.
pub async fn object_store() -> tokio::sync::RwLockReadGuard<'static, ()> {
    OBJECT_STORE.read().await
}

/// A turn to stop the object store: no other test uses it meanwhile.
pub async fn object_store_alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    OBJECT_STORE.write().await
}
