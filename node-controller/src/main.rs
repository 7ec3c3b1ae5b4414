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
    /// The image of the init container that fetches a ValkeyNode's spec.initialData: one that
    /// holds `valkey-restore`, this node-controller's own (the chart passes it).
    #[arg(long, env = "VALKEY_RESTORE_IMAGE", default_value = render::DEFAULT_RESTORE_IMAGE)]
    restore_image: String,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let names = Names {
        controller: controller::CONTROLLER,
        default_lease: controller::CONTROLLER,
    };
    let render = render::Options {
        restore_image: cli.restore_image,
    };
    plumbing::runtime::process(plumbing::runtime::main(&cli.common, names, |handles| {
        controller::run(handles, render)
    }))
}
