//! A controller binary with no reconciler: shows the wiring and lets leader election, the health
//! endpoints and graceful shutdown be tried by hand against any cluster named by KUBECONFIG:
//!
//! ```sh
//! cargo run -p plumbing --example idle_controller -- --leader-elect --metrics-addr 127.0.0.1:18080
//! cargo run -p plumbing --example idle_controller -- --leader-elect --metrics-addr 127.0.0.1:18081
//! ```
//! Stop the leader with Ctrl-C and the other takes over within a couple of seconds.

use clap::Parser;
use plumbing::{CommonArgs, Exit, Metrics, Names, Runtime};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let names = Names {
        controller: "plumbing-idle-controller",
        default_lease: "plumbing-idle-controller",
    };
    let runtime = Runtime::start(&cli.common, names, Metrics::default()).await?;
    if runtime.wait_for_leadership().await? {
        // A real binary starts its kube Controllers here, with
        // `.graceful_shutdown_on(runtime.stop_signal())`, and marks readiness once their
        // stores have synced.
        runtime.readiness.mark_synced();
        tracing::info!("leading: reconciling until shutdown or lost leadership");
        runtime.stop_signal().await;
    }
    if runtime.finish().await? == Exit::LeadershipLost {
        std::process::exit(1);
    }
    Ok(())
}
