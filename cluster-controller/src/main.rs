//! cluster-controller: turns each ValkeyCluster into ValkeyNodes and drives Valkey itself (CLUSTER
//! MEET, slots, REPLICATE, FAILOVER, slot migration) against their `status.podIP`.

use clap::Parser;
use cluster_controller::controller;
use plumbing::{CommonArgs, Exit, Metrics, Names, Runtime};

#[derive(Parser)]
#[command(
    name = "cluster-controller",
    version,
    about = "Reconciles ValkeyClusters through ValkeyNodes"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let names = Names {
        controller: controller::CONTROLLER,
        default_lease: controller::CONTROLLER,
    };
    let runtime = match Runtime::start(&cli.common, names, Metrics::default()).await {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cluster-controller: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.wait_for_leadership().await {
        Ok(true) => {
            tracing::info!(
                namespace = runtime.watch_namespace().unwrap_or("(all)"),
                "reconciling ValkeyClusters"
            );
            controller::run(
                runtime.client.clone(),
                runtime.watch_namespace(),
                runtime.metrics.clone(),
                runtime.events.clone(),
                runtime.readiness.clone(),
                runtime.stop_signal(),
            )
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
