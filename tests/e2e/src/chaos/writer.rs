//! A writer that counts two kinds of acknowledgement, through a cluster client:
//! - plain: the primary answered `OK` to `SET`;
//! - replicated: `OK`, and `WAIT 1` on the same connection right after it confirmed that a
//!   replica has the write.
//!
//! Each write is `SET` and `WAIT` pipelined to the primary of the key's slot, so the `WAIT` counts
//! the replicas of exactly that write's primary. A write whose reply did not arrive (a timeout, a
//! dropped connection, a MOVED while the cluster changes) is not acknowledged, whatever happened to
//! it on the server: only an `OK` the client received counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, Slot, SlotAddr};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// How long `WAIT` may block for a replica's confirmation.
const WAIT_MS: u64 = 500;
/// A gap between two acknowledged writes at least this long counts as a pause clients felt:
/// twenty times the writer's rhythm (a write every few milliseconds), above the stalls of about
/// 50 ms an idle cluster shows now and then. A planned failover on an idle cluster with little
/// data stops writes for about that long too (50 to 80 ms measured on localkube), so it is not
/// counted here: the chaos report counts the operator's planned failovers by their Events.
pub const PAUSE: Duration = Duration::from_millis(100);
/// Gaps at least this long are kept (with when they ended), to judge [`PAUSE`] by.
pub const NOTED_GAP: Duration = Duration::from_millis(20);
/// Refused writes in a row after which the writer builds a new connection (its slot map may be
/// stale beyond what redirections fix, e.g. every node it knew was replaced).
const RECONNECT_AFTER: u32 = 20;

/// What the writer saw.
#[derive(Debug, Clone, Default)]
pub struct Acks {
    /// Every write the primary answered `OK` to: key → value.
    pub plain: BTreeMap<String, String>,
    /// The subset whose `WAIT 1` confirmed a replica.
    pub replicated: BTreeMap<String, String>,
    /// Writes that got no `OK`.
    pub refused: u64,
    /// The longest time between two plain acknowledgements.
    pub longest_gap: Duration,
    /// Every gap between two plain acknowledgements of at least [`NOTED_GAP`], with when it
    /// ended, in order: the pauses writes made (a failover Valkey made, then a planned one the
    /// operator made, are two).
    pub gaps: Vec<(Instant, Duration)>,
    /// When each plain acknowledgement arrived: what was acknowledged after a fault struck is
    /// not Valkey's own asynchronous replication's to lose.
    pub acked_at: BTreeMap<String, Instant>,
}

impl Acks {
    /// Adds what another writer saw (with keys of its own prefix).
    pub fn merge(&mut self, other: Acks) {
        self.plain.extend(other.plain);
        self.replicated.extend(other.replicated);
        self.refused += other.refused;
        self.acked_at.extend(other.acked_at);
        self.longest_gap = self.longest_gap.max(other.longest_gap);
        self.gaps.extend(other.gaps);
        self.gaps.sort();
    }

    /// Records the time since the previous acknowledgement (or, at the end, since the last).
    pub fn note_gap(&mut self, gap: Duration) {
        self.longest_gap = self.longest_gap.max(gap);
        if gap >= NOTED_GAP {
            self.gaps.push((Instant::now(), gap));
        }
    }
}

/// Builds cluster connections for the writer (a fresh one when the old one is lost).
pub type Connect =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Option<ClusterConnection>> + Send + Sync>;

/// A running writer; [`ReplicatedWriter::stop`] ends it and returns what it saw.
pub struct ReplicatedWriter {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Acks>>,
    task: JoinHandle<()>,
}

impl ReplicatedWriter {
    /// Starts writing `<prefix>:<n>` on `conn`; `connect` builds a replacement when needed.
    pub fn start(prefix: &str, conn: ClusterConnection, connect: Connect) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Acks::default()));
        let (s, a, prefix) = (stop.clone(), acks.clone(), prefix.to_owned());
        let task = tokio::spawn(async move {
            let mut conn = conn;
            let mut n: u64 = 0;
            let mut refused_in_a_row = 0u32;
            let mut last_ack = Instant::now();
            while !s.load(Ordering::Relaxed) {
                let (key, value) = (format!("{prefix}:{n}"), format!("v{n}"));
                n += 1;
                match write(&mut conn, &key, &value).await {
                    Some(replicated) => {
                        refused_in_a_row = 0;
                        let now = Instant::now();
                        let mut acks = a.lock().await;
                        acks.note_gap(now - last_ack);
                        last_ack = now;
                        if replicated {
                            acks.replicated.insert(key.clone(), value.clone());
                        }
                        acks.acked_at.insert(key.clone(), now);
                        acks.plain.insert(key, value);
                    }
                    None => {
                        a.lock().await.refused += 1;
                        refused_in_a_row += 1;
                        if refused_in_a_row >= RECONNECT_AFTER {
                            refused_in_a_row = 0;
                            if let Some(fresh) = connect().await {
                                conn = fresh;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut acks = a.lock().await;
            acks.note_gap(last_ack.elapsed());
        });
        Self { stop, acks, task }
    }

    /// Plain acknowledgements so far.
    pub async fn acked(&self) -> usize {
        self.acks.lock().await.plain.len()
    }

    /// Stops the writer and returns what it saw.
    pub async fn stop(self) -> Acks {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.acks.lock().await.clone()
    }
}

impl crate::cluster::Acknowledged for ReplicatedWriter {
    async fn acknowledged(&self) -> usize {
        self.acked().await
    }
}

/// One write: `Some(replicated)` when the primary answered `OK`, `None` otherwise.
async fn write(conn: &mut ClusterConnection, key: &str, value: &str) -> Option<bool> {
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(key)
        .arg(value)
        .cmd("WAIT")
        .arg(1)
        .arg(WAIT_MS);
    let route =
        SingleNodeRoutingInfo::SpecificNode(Route::with_slot(Slot::for_key(key), SlotAddr::Master));
    let timeout = Duration::from_millis(WAIT_MS + 5_000);
    let replies = tokio::time::timeout(timeout, conn.route_pipeline(pipe, 0, 2, route))
        .await
        .ok()?
        .ok()?;
    match replies.as_slice() {
        [Value::Okay, Value::Int(replicas)] => Some(*replicas >= 1),
        [Value::Okay, ..] => Some(false),
        _ => None,
    }
}
