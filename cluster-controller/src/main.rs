//! cluster-controller: turns each ValkeyCluster into ValkeyNodes and drives Valkey itself (CLUSTER
//! MEET, slots, REPLICATE, FAILOVER, slot migration) against their `status.podIP`.

use clap::Parser;
use cluster_controller::controller;
use plumbing::{CommonArgs, Names};

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
    plumbing::runtime::main(&cli.common, names, controller::run).await
}
