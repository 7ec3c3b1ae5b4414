//! localkube-kubelet: registers the local nodes and runs the pods bound to them as processes.

mod backoff;
mod config;
mod envvars;
mod expand;
mod images;
mod network;
mod node;
mod node_faults;
mod pod;
mod probe;
mod procs;
mod sandbox;
mod storage;
mod volumes;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use config::{Args, Settings};

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("reading kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
    #[error("preparing the pod network on {bridge}: {source}")]
    Bridge {
        bridge: String,
        source: network::NetError,
    },
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
}

async fn client(args: &Args) -> Result<kube::Client, StartError> {
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(kube::Client::try_from(config)?)
}

/// Ends what an earlier run left behind: processes, network namespaces and veths.
async fn clean_leftovers(settings: &Settings) {
    let killed = procs::kill_recorded(&settings.pods_dir());
    if killed > 0 {
        tracing::info!(killed, "ended processes left by an earlier run");
    }
    network::remove_stale(&BTreeSet::new()).await;
}

async fn run(args: Args) -> Result<(), StartError> {
    let settings = Settings::from_args(&args)?;
    let client = client(&args).await?;
    let mut term = signal(SignalKind::terminate()).map_err(StartError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(StartError::Signals)?;

    clean_leftovers(&settings).await;
    let bridge_err = |source| StartError::Bridge {
        bridge: settings.bridge.clone(),
        source,
    };
    for n in &settings.nodes {
        network::bridge_address(&settings.bridge, n.ip, true)
            .await
            .map_err(bridge_err)?;
    }
    network::prepare_host(&settings.bridge).map_err(bridge_err)?;
    let gateway = network::bridge_gateway(&settings.bridge)
        .await
        .map_err(bridge_err)?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let (faults_tx, faults_rx) = watch::channel(node_faults::Stopped::new());
    let node_names = settings.nodes.iter().map(|n| n.name.clone()).collect();
    let faults = tokio::spawn(node_faults::watch_files(
        settings.faults_dir(),
        node_names,
        faults_tx,
        stop_rx.clone(),
    ));
    let nodes = tokio::spawn(node::run(
        client.clone(),
        settings.clone(),
        faults_rx.clone(),
        stop_rx.clone(),
    ));
    let storage = tokio::spawn(storage::run(
        client.clone(),
        settings.clone(),
        stop_rx.clone(),
    ));
    let ctx = Arc::new(pod::Ctx::new(
        client.clone(),
        settings.clone(),
        gateway,
        faults_rx,
    ));
    let pods = tokio::spawn(pod::manager::Manager::new(ctx).run(stop_rx.clone()));
    tracing::info!(nodes = settings.nodes.len(), state_dir = %settings.state_dir.display(), "kubelet running");

    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(25), async {
        let _ = pods.await;
        let _ = nodes.await;
        let _ = storage.await;
        let _ = faults.await;
    })
    .await;
    clean_leftovers(&settings).await;
    for n in &settings.nodes {
        if let Err(e) = network::bridge_address(&settings.bridge, n.ip, false).await {
            tracing::warn!(error = %e, "removing node address");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kubelet failed");
            std::process::ExitCode::FAILURE
        }
    }
}
