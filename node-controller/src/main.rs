//! node-controller: turns each ValkeyNode into one running Valkey pod (a 1-replica StatefulSet or
//! Deployment, its ConfigMap and its PVC) and reports what it observes. It makes no topology
//! decision; parents such as the cluster-controller do.

mod controller;
mod live;
mod names;
mod probe;
mod render;
mod status;

use clap::Parser;
use plumbing::{CommonArgs, Names};

#[derive(Parser)]
#[command(
    name = "node-controller",
    version,
    about = "Reconciles ValkeyNodes into Valkey pods"
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
    plumbing::runtime::main(&cli.common, names, controller::run).await
}
