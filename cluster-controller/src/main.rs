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

    /// Seconds a client user's previous password keeps working after every server accepts the
    /// new one (the time clients have to read the changed Secret).
    #[arg(long, default_value_t = 120)]
    password_rotation_grace_seconds: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let names = Names {
        controller: controller::CONTROLLER,
        default_lease: controller::CONTROLLER,
    };
    let settings = controller::Settings {
        password_rotation_grace: std::time::Duration::from_secs(
            cli.password_rotation_grace_seconds,
        ),
        // Set by the chart (Downward API): where the controllers' pods run.
        operator_namespace: std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|ns| !ns.is_empty()),
    };
    plumbing::runtime::main(&cli.common, names, move |handles| {
        controller::run(handles, settings)
    })
    .await
}
