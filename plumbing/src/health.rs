//! The HTTP server on `--metrics-addr`: `/metrics`, `/live` and `/ready`.
//!
//! - `/live` answers 200 while the process runs; a hung runtime fails it by not answering.
//! - `/ready` answers 200 once the caller has marked its watches as synced. With leader
//!   election on, a standby replica (one that does not lead) is ready too: it is healthy but idle,
//!   and it must not be restarted or hidden just because another replica leads.
//! - `/metrics` serves [`Metrics`] in the OpenMetrics text format.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::shutdown::Shutdown;

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Shared readiness state; clones see the same flags.
///
/// Ready means: the controllers have started and every watch cache they registered
/// ([`Readiness::register`], which `Handles::cache` calls) has listed its objects once. As in
/// kubert's runtime, each cache holds a [`SyncHandle`] it releases itself, so no caller has to
/// know which watches exist.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<ReadinessFlags>,
}

#[derive(Debug)]
struct ReadinessFlags {
    leader_election: bool,
    /// Watches that have not listed yet, plus one until the controllers have started.
    pending: AtomicUsize,
    /// Woken whenever `pending` drops.
    released: tokio::sync::Notify,
    started: AtomicBool,
    leading: AtomicBool,
}

/// One watch's share of readiness: release it with [`SyncHandle::synced`] once the watch has
/// listed. A handle dropped without that (a watch that never listed) keeps `/ready` failing.
#[derive(Debug)]
#[must_use = "readiness waits until the handle is released"]
pub struct SyncHandle {
    readiness: Readiness,
}

impl SyncHandle {
    pub fn synced(self) {
        self.readiness.release();
    }
}

impl Readiness {
    /// `leader_election`: whether this process takes part in leader election (`--leader-elect`).
    pub fn new(leader_election: bool) -> Self {
        Self {
            inner: Arc::new(ReadinessFlags {
                leader_election,
                pending: AtomicUsize::new(1),
                released: tokio::sync::Notify::new(),
                started: AtomicBool::new(false),
                leading: AtomicBool::new(false),
            }),
        }
    }

    /// A watch that readiness must wait for.
    pub fn register(&self) -> SyncHandle {
        self.inner.pending.fetch_add(1, Ordering::SeqCst);
        SyncHandle {
            readiness: self.clone(),
        }
    }

    /// Call once the controllers are built: every watch they need has registered by then, and
    /// readiness waits for those alone. Idempotent.
    pub fn mark_synced(&self) {
        if !self.inner.started.swap(true, Ordering::SeqCst) {
            self.release();
        }
    }

    fn release(&self) {
        self.inner.pending.fetch_sub(1, Ordering::SeqCst);
        self.inner.released.notify_waiters();
    }

    /// Resolves once the controllers have started and every registered watch has listed.
    pub async fn synced(&self) {
        loop {
            // Created before the check, so a release between the two still wakes it.
            let released = self.inner.released.notified();
            if self.inner.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            released.await;
        }
    }

    /// Kept up to date by the runtime from the leader elector.
    pub fn set_leading(&self, leading: bool) {
        self.inner.leading.store(leading, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        is_ready(
            self.inner.pending.load(Ordering::SeqCst) == 0,
            self.inner.leader_election,
            self.inner.leading.load(Ordering::SeqCst),
        )
    }
}

/// Ready when the watches have synced, or when this replica is an idle standby (it runs no
/// watches until it leads).
pub fn is_ready(synced: bool, leader_election: bool, leading: bool) -> bool {
    synced || (leader_election && !leading)
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Readiness,
}

/// The routes, without a listener; handy for tests and for adding a binary's own routes.
pub fn router(metrics: Metrics, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/live", get(live))
        .route("/ready", get(ready))
        .with_state(AppState { metrics, readiness })
}

async fn serve_metrics(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

async fn live() -> &'static str {
    "ok\n"
}

async fn ready(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: watches not synced\n",
        )
    }
}

/// A bound, not yet serving, health server. Binding first lets `main` fail fast on a taken port
/// and lets tests bind port 0 and read the chosen port.
pub struct HealthServer {
    listener: TcpListener,
}

impl HealthServer {
    pub async fn bind(addr: SocketAddr) -> Result<Self, HealthError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HealthError::Bind { addr, source })?;
        Ok(Self { listener })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, HealthError> {
        self.listener.local_addr().map_err(HealthError::Serve)
    }

    /// Serves until `shutdown` fires, then finishes in-flight requests and returns.
    pub async fn serve(
        self,
        metrics: Metrics,
        readiness: Readiness,
        shutdown: Shutdown,
    ) -> Result<(), HealthError> {
        axum::serve(self.listener, router(metrics, readiness))
            .with_graceful_shutdown(shutdown.wait_owned())
            .await
            .map_err(HealthError::Serve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const DEADLINE: Duration = Duration::from_secs(10);

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// One HTTP/1.1 request; returns the status code and the body.
    async fn get(
        addr: SocketAddr,
        path: &str,
    ) -> Result<(u16, String), Box<dyn std::error::Error>> {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or("no status code in response")?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }

    #[test]
    fn readiness_rules() {
        // Without leader election: ready only once synced.
        assert!(!is_ready(false, false, false));
        assert!(is_ready(true, false, false));
        // A standby is ready but idle; a fresh leader is ready once its watches synced.
        assert!(is_ready(false, true, false));
        assert!(!is_ready(false, true, true));
        assert!(is_ready(true, true, true));
    }

    #[test]
    fn ready_once_started_and_every_registered_watch_synced() {
        let readiness = Readiness::new(false);
        let pods = readiness.register();
        let nodes = readiness.register();
        assert!(!readiness.is_ready(), "nothing synced yet");
        pods.synced();
        readiness.mark_synced();
        assert!(!readiness.is_ready(), "one watch has not listed");
        nodes.synced();
        assert!(readiness.is_ready());
        readiness.mark_synced();
        assert!(readiness.is_ready(), "starting twice changes nothing");
        let late = readiness.register();
        assert!(
            !readiness.is_ready(),
            "a watch added later is waited for too"
        );
        late.synced();
        assert!(readiness.is_ready());
    }

    #[tokio::test]
    async fn synced_resolves_when_the_last_watch_lists() {
        let readiness = Readiness::new(false);
        let watch = readiness.register();
        readiness.mark_synced();
        let waiting = tokio::spawn({
            let readiness = readiness.clone();
            async move { readiness.synced().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        watch.synced();
        assert!(
            tokio::time::timeout(DEADLINE, waiting).await.is_ok(),
            "synced() never resolved"
        );
    }

    #[tokio::test]
    async fn serves_endpoints_and_stops_on_shutdown() -> TestResult {
        let metrics = Metrics::default();
        let readiness = Readiness::new(false);
        let shutdown = Shutdown::new();
        let server = HealthServer::bind("127.0.0.1:0".parse()?).await?;
        let addr = server.local_addr()?;
        let task = tokio::spawn(server.serve(metrics.clone(), readiness.clone(), shutdown.clone()));

        assert_eq!(get(addr, "/live").await?.0, 200);
        assert_eq!(get(addr, "/ready").await?.0, 503);
        readiness.mark_synced();
        assert_eq!(get(addr, "/ready").await?.0, 200);

        drop(metrics.reconcile_started("test"));
        let (status, body) = get(addr, "/metrics").await?;
        assert_eq!(status, 200);
        assert!(
            body.contains("reconciles_total{controller=\"test\"} 1"),
            "{body}"
        );
        assert_eq!(get(addr, "/nope").await?.0, 404);

        shutdown.trigger();
        tokio::time::timeout(DEADLINE, task).await???;
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "still listening after shutdown"
        );
        Ok(())
    }

    #[tokio::test]
    async fn standby_is_ready_leader_waits_for_sync() -> TestResult {
        let readiness = Readiness::new(true);
        let shutdown = Shutdown::new();
        let server = HealthServer::bind("127.0.0.1:0".parse()?).await?;
        let addr = server.local_addr()?;
        let task =
            tokio::spawn(server.serve(Metrics::default(), readiness.clone(), shutdown.clone()));

        assert_eq!(get(addr, "/ready").await?.0, 200);
        readiness.set_leading(true);
        assert_eq!(get(addr, "/ready").await?.0, 503);
        readiness.mark_synced();
        assert_eq!(get(addr, "/ready").await?.0, 200);

        shutdown.trigger();
        tokio::time::timeout(DEADLINE, task).await???;
        Ok(())
    }

    #[tokio::test]
    async fn taken_port_is_a_bind_error() -> TestResult {
        let first = HealthServer::bind("127.0.0.1:0".parse()?).await?;
        let taken = first.local_addr()?;
        let second = HealthServer::bind(taken).await;
        assert!(matches!(second, Err(HealthError::Bind { .. })));
        Ok(())
    }
}
