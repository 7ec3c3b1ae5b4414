//! One call that sets up everything a controller binary needs around its reconcilers.
//!
//! ```no_run
//! # use clap::Parser;
//! # #[derive(Parser)] struct Cli { #[command(flatten)] common: plumbing::cli::CommonArgs }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use plumbing::{Exit, Metrics, Names, Runtime};
//! let cli = Cli::parse();
//! let names = Names { controller: "valkey-node-controller", default_lease: "valkey-node-controller" };
//! let runtime = Runtime::start(&cli.common, names, Metrics::default()).await?;
//! if runtime.wait_for_leadership().await? {
//!     // Build the kube Controller with `.graceful_shutdown_on(runtime.stop_signal())`,
//!     // call `runtime.readiness.mark_synced()` once it is built, and run it. (Binaries use
//!     // [`main`] and [`Handles::run`], which do all of this.)
//! }
//! if runtime.finish().await? == Exit::LeadershipLost {
//!     std::process::exit(1); // restart as a standby
//! }
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use futures::future::Shared;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::cache::Cache;
use crate::cli::CommonArgs;
use crate::events::EventPublisher;
use crate::health::{HealthError, HealthServer, Readiness};
use crate::leader::{
    LeaderElector, LeaderError, LeaderState, Leadership, POD_NAME_ENV, default_identity,
};
use crate::metrics::Metrics;
use crate::reconcile::{self, Reconciler, Shell};
use crate::shutdown::{Shutdown, ShutdownError};
use crate::telemetry::{self, TelemetryError};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Shutdown(#[from] ShutdownError),
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Health(#[from] HealthError),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("health server task failed: {0}")]
    HealthTask(#[source] tokio::task::JoinError),
}

/// The names a binary runs under.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    /// Event reporter (and log context), e.g. `valkey-node-controller`.
    pub controller: &'a str,
    /// Lease name unless `--leader-election-id` overrides it.
    pub default_lease: &'a str,
}

/// How the process should end, from [`Runtime::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Shut down on request: exit 0.
    Graceful,
    /// Leadership was lost: exit non-zero so the pod restarts as a standby.
    LeadershipLost,
}

/// Handles a controller binary works with. Fields are public so reconcilers can clone what they
/// need into their context.
pub struct Runtime {
    pub client: kube::Client,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub shutdown: Shutdown,
    pub leadership: Leadership,
    pub events: EventPublisher,
    watch_namespace: Option<String>,
    health: JoinHandle<Result<(), HealthError>>,
    bridge: JoinHandle<()>,
}

impl Runtime {
    /// Initialises, in order: logs, the SIGTERM/SIGINT handler, the Kubernetes client (in-cluster
    /// or `KUBECONFIG`; every request it sends is counted into `metrics`), the health server on
    /// `--metrics-addr`, and leader election when `--leader-elect` is set. `metrics` may carry a
    /// binary's own registered metrics.
    pub async fn start(
        args: &CommonArgs,
        names: Names<'_>,
        metrics: Metrics,
    ) -> Result<Self, RuntimeError> {
        telemetry::init(args.log_format, &args.log_level)?;
        let shutdown = Shutdown::on_signals()?;
        let client = crate::api_requests::counted_client(metrics.api_requests())
            .await
            .map_err(RuntimeError::Client)?;

        let readiness = Readiness::new(args.leader_elect);
        let server = HealthServer::bind(args.metrics_addr).await?;
        tracing::info!(addr = %server.local_addr()?, "serving /metrics, /live and /ready");
        let health =
            tokio::spawn(server.serve(metrics.clone(), readiness.clone(), shutdown.clone()));

        let leadership = if args.leader_elect {
            let namespace = args.lease_namespace();
            let name = args.lease_name(names.default_lease);
            LeaderElector::new(client.clone(), &namespace, name, &default_identity()).spawn()
        } else {
            Leadership::always()
        };
        let bridge = tokio::spawn(mirror_leadership(
            leadership.subscribe(),
            metrics.clone(),
            readiness.clone(),
        ));

        // Detached: it ends with the runtime.
        crate::memory::spawn_giving_back(crate::memory::GIVE_BACK_EVERY);

        let instance = std::env::var(POD_NAME_ENV).ok().filter(|n| !n.is_empty());
        let events = EventPublisher::new(client.clone(), names.controller, instance);
        Ok(Self {
            client,
            metrics,
            readiness,
            shutdown,
            leadership,
            events,
            watch_namespace: args.watch_namespace().map(str::to_owned),
            health,
            bridge,
        })
    }

    /// The namespace to watch; `None` for all.
    pub fn watch_namespace(&self) -> Option<&str> {
        self.watch_namespace.as_deref()
    }

    /// Waits until this replica leads (`true`) or shutdown is requested first (`false`).
    pub async fn wait_for_leadership(&self) -> Result<bool, LeaderError> {
        tokio::select! {
            acquired = self.leadership.acquired() => acquired.map(|()| true),
            () = self.shutdown.wait() => Ok(false),
        }
    }

    /// Resolves on shutdown or on lost leadership: pass it to `Controller::graceful_shutdown_on`.
    pub fn stop_signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        stop_signal(self.shutdown.wait_owned(), self.leadership.lost_owned())
    }

    /// Call after the controllers have stopped: releases the Lease, stops the health server, and
    /// says how the process should exit.
    pub async fn finish(self) -> Result<Exit, RuntimeError> {
        let exit = if self.leadership.state() == LeaderState::Lost {
            Exit::LeadershipLost
        } else {
            Exit::Graceful
        };
        self.leadership.release().await;
        self.shutdown.trigger();
        self.bridge.abort();
        self.health.await.map_err(RuntimeError::HealthTask)??;
        tracing::info!(?exit, "stopped");
        Ok(exit)
    }
}

/// What a binary's controllers run with, handed over by [`main`].
///
/// A binary builds every cache and controller first, then runs them (several at once with
/// `futures::join!`): readiness waits for the caches registered by the time the first runs.
pub struct Handles {
    pub client: kube::Client,
    /// The namespace to watch; `None` for all.
    pub namespace: Option<String>,
    pub metrics: Metrics,
    pub events: EventPublisher,
    pub readiness: Readiness,
    /// The controller's name: the `controller` label of the reconcile metrics.
    controller: String,
    /// Resolves on shutdown or lost leadership; every controller stops on it.
    stop: Shared<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
}

impl Handles {
    /// The API of `K` in the watched namespace, or in all namespaces.
    pub fn api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => kube::Api::namespaced(self.client.clone(), ns),
            None => kube::Api::all(self.client.clone()),
        }
    }

    /// A watch cache of the `K`s `config` selects in the watched namespace(s); `/ready` and every
    /// pass wait until it has listed. For the kind a controller reconciles, cache
    /// `DeserializeGuard<K>` and hand it to [`Handles::run`].
    pub fn cache<K>(&self, config: watcher::Config) -> Cache<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        self.cache_keeping(config, crate::cache::keep_whole)
    }

    /// A watch cache like [`Handles::cache`] whose objects keep only what `keep` leaves of them
    /// (see [`Cache::keeping`]).
    pub fn cache_keeping<K>(&self, config: watcher::Config, keep: fn(&mut K)) -> Cache<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        Cache::keeping(self.api::<K>(), config, &self.readiness, keep)
    }

    /// A watch cache of the metadata only of the `K`s `config` selects in the watched
    /// namespace(s) (see [`Cache::metadata`]); `/ready` and every pass wait until it has listed.
    pub fn metadata_cache<K>(
        &self,
        config: watcher::Config,
    ) -> Cache<kube::core::PartialObjectMeta<K>>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        Cache::metadata(
            self.api::<kube::core::PartialObjectMeta<K>>(),
            config,
            &self.readiness,
        )
    }

    /// Runs `reconciler` over the objects of `primary`, woken also by what `children` adds to the
    /// controller (`owns_stream`, `watches_stream` of other caches), until shutdown or lost
    /// leadership. See [`Reconciler`] for what the shell does around each pass.
    pub async fn run<R, F>(
        &self,
        primary: Cache<DeserializeGuard<R::Object>>,
        children: F,
        reconciler: R,
    ) where
        R: Reconciler,
        F: FnOnce(
            Controller<DeserializeGuard<R::Object>>,
        ) -> Controller<DeserializeGuard<R::Object>>,
    {
        self.run_as(&self.controller, primary, children, reconciler)
            .await;
    }

    /// [`Handles::run`] for one of several controllers of a binary: `controller` names it in the
    /// reconcile metrics (`controller` label) and logs.
    pub async fn run_as<R, F>(
        &self,
        controller: &str,
        primary: Cache<DeserializeGuard<R::Object>>,
        children: F,
        reconciler: R,
    ) where
        R: Reconciler,
        F: FnOnce(
            Controller<DeserializeGuard<R::Object>>,
        ) -> Controller<DeserializeGuard<R::Object>>,
    {
        // Every cache of this binary exists by now (see the type's documentation).
        self.readiness.mark_synced();
        let shell = Shell::new(
            reconciler,
            controller,
            self.metrics.clone(),
            self.readiness.clone(),
        );
        reconcile::run(primary, children, shell, self.stop.clone()).await;
    }
}

/// Most runtime threads a controller runs, whatever the machine's cores: a controller waits on
/// the network almost all the time, its CPU-bound work (a pass over a cluster of 990 members
/// takes under a second) spreads over clusters four at a time at most on any machine it runs
/// on, and every thread costs its stack and, with glibc, may hold an arena of its own. Without
/// a CPU limit a pod sees every core of its node.
pub const MAX_WORKER_THREADS: usize = 4;

/// Runtime threads for a machine of `cores`: one a core, at most [`MAX_WORKER_THREADS`].
pub fn worker_threads(cores: usize) -> usize {
    cores.clamp(1, MAX_WORKER_THREADS)
}

/// Runs a controller binary's `main` future to its end, on a runtime sized for a controller
/// ([`worker_threads`]) after capping the allocator's arenas ([`crate::memory::few_arenas`]):
/// the process's first call, in place of `#[tokio::main]`.
pub fn process(main: impl Future<Output = std::process::ExitCode>) -> std::process::ExitCode {
    crate::memory::few_arenas();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads(cores))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(main),
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The whole life of a controller binary: start the runtime, wait to lead, run `controllers`
/// until they stop, release the Lease, and say how the process should exit (non-zero after lost
/// leadership, so the pod restarts as a standby).
pub async fn main<F, Fut>(
    args: &CommonArgs,
    names: Names<'_>,
    controllers: F,
) -> std::process::ExitCode
where
    F: FnOnce(Handles) -> Fut,
    Fut: Future<Output = ()>,
{
    let runtime = match Runtime::start(args, names, Metrics::default()).await {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{}: {e}", names.controller);
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.wait_for_leadership().await {
        Ok(true) => {
            let namespace = runtime.watch_namespace().map(str::to_owned);
            tracing::info!(
                namespace = namespace.as_deref().unwrap_or("(all)"),
                "reconciling"
            );
            let stop: Pin<Box<dyn Future<Output = ()> + Send + Sync>> =
                Box::pin(runtime.stop_signal());
            controllers(Handles {
                client: runtime.client.clone(),
                namespace,
                metrics: runtime.metrics.clone(),
                events: runtime.events.clone(),
                readiness: runtime.readiness.clone(),
                controller: names.controller.to_owned(),
                stop: stop.shared(),
            })
            .await;
        }
        Ok(false) => {}
        Err(e) => tracing::error!(error = %e, "leader election failed"),
    }
    match runtime.finish().await {
        Ok(Exit::Graceful) => std::process::ExitCode::SUCCESS,
        Ok(Exit::LeadershipLost) => std::process::ExitCode::from(1),
        Err(e) => {
            tracing::error!(error = %e, "shutdown failed");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn stop_signal(
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    lost: impl Future<Output = ()> + Send + Sync + 'static,
) {
    tokio::select! {
        () = shutdown => {}
        () = lost => tracing::warn!("leadership lost; stopping the controllers"),
    }
}

/// Keeps the `leader` gauge and readiness in step with the election.
async fn mirror_leadership(
    mut state: tokio::sync::watch::Receiver<LeaderState>,
    metrics: Metrics,
    readiness: Readiness,
) {
    loop {
        let leading = *state.borrow_and_update() == LeaderState::Leading;
        metrics.set_leader(leading);
        readiness.set_leading(leading);
        if state.changed().await.is_err() {
            metrics.set_leader(false);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn assert_send_sync_static<T: Send + Sync + 'static>(_: &T) {}

    #[test]
    fn a_controller_runs_one_thread_a_core_and_no_more_than_four() {
        assert_eq!(worker_threads(0), 1);
        assert_eq!(worker_threads(2), 2);
        assert_eq!(worker_threads(64), MAX_WORKER_THREADS);
    }

    #[test]
    fn a_process_runs_its_main_to_the_end_and_returns_its_exit_code() {
        let code = process(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            std::process::ExitCode::from(3)
        });
        assert_eq!(code, std::process::ExitCode::from(3));
    }

    #[tokio::test]
    async fn stop_signal_fires_on_shutdown_and_is_sync() -> Result<(), tokio::time::error::Elapsed>
    {
        let shutdown = Shutdown::new();
        let leadership = Leadership::always();
        let signal = stop_signal(shutdown.wait_owned(), leadership.lost_owned());
        assert_send_sync_static(&signal);
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), signal).await
    }

    #[tokio::test]
    async fn stop_signal_waits_while_leading() {
        let shutdown = Shutdown::new();
        let leadership = Leadership::always();
        let signal = stop_signal(shutdown.wait_owned(), leadership.lost_owned());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), signal)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn leader_gauge_and_readiness_follow_state() -> Result<(), Box<dyn std::error::Error>> {
        let (sender, receiver) = tokio::sync::watch::channel(LeaderState::Standby);
        let metrics = Metrics::default();
        let readiness = Readiness::new(true);
        let bridge = tokio::spawn(mirror_leadership(
            receiver,
            metrics.clone(),
            readiness.clone(),
        ));
        let leader_line = |m: &Metrics| -> Result<bool, std::fmt::Error> {
            Ok(m.encode()?.lines().any(|l| l == "leader 1"))
        };
        assert!(readiness.is_ready(), "a standby is ready");
        sender.send_replace(LeaderState::Leading);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !leader_line(&metrics)? {
            assert!(
                tokio::time::Instant::now() < deadline,
                "leader gauge never became 1"
            );
            tokio::task::yield_now().await;
        }
        assert!(!readiness.is_ready(), "a new leader waits for its watches");
        drop(sender);
        tokio::time::timeout(Duration::from_secs(5), bridge).await??;
        assert!(!leader_line(&metrics)?);
        Ok(())
    }
}
