//! cluster-controller: the parents of ValkeyNodes. It turns each ValkeyCluster into ValkeyNodes
//! and drives Valkey itself (CLUSTER MEET, slots, REPLICATE, FAILOVER, slot migration), and each
//! ValkeyReplication into ValkeyNodes and Services (REPLICAOF, FAILOVER), against their
//! `status.podIP`. Each kind is a controller of its own, enabled by `--kinds`; ValkeyBackups of
//! the kinds enabled are captured beside them.

use clap::{Parser, ValueEnum};
use cluster_controller::{backup, cluster, crds, parent, replication};
use plumbing::{CommonArgs, Names};

/// A kind this binary can reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// ValkeyCluster: sharded clusters.
    ValkeyCluster,
    /// ValkeyReplication: one primary and its replicas, without cluster mode.
    ValkeyReplication,
}

#[derive(Parser)]
#[command(
    name = "cluster-controller",
    version,
    about = "Reconciles ValkeyClusters and ValkeyReplications through ValkeyNodes"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Seconds a client user's previous password keeps working after every server accepts the
    /// new one (the time clients have to read the changed Secret).
    #[arg(long, default_value_t = 120)]
    password_rotation_grace_seconds: u64,

    /// Seconds a ValkeyCluster must have been steady (whole, every slot served, nothing else to
    /// do) before a planned failover spreads primaries that share a Kubernetes node or zone.
    /// Each such failover pauses writes; right after a failover Valkey made, clients have just
    /// paid one, and the cluster is Ready meanwhile. 0 spreads at once.
    #[arg(long, default_value_t = 300)]
    spread_after_steady_seconds: u64,

    /// The kinds to reconcile, comma-separated; a kind left out is not even watched. The
    /// default is what releases without the flag were granted (ValkeyClusters only); the chart
    /// passes the kinds its values enable.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = [Kind::ValkeyCluster]
    )]
    kinds: Vec<Kind>,

    /// Apply the CRDs this binary was built with when it starts leading (Helm never upgrades a
    /// chart's CRDs; an upgraded operator brings its own).
    #[arg(long)]
    apply_crds: bool,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let names = Names {
        controller: cluster::CONTROLLER,
        default_lease: cluster::CONTROLLER,
    };
    let settings = parent::Settings {
        password_rotation_grace: std::time::Duration::from_secs(
            cli.password_rotation_grace_seconds,
        ),
        spread_after: std::time::Duration::from_secs(cli.spread_after_steady_seconds),
        // Set by the chart (Downward API): where the controllers' pods run.
        operator_namespace: std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|ns| !ns.is_empty()),
    };
    let kinds = cli.kinds.clone();
    let apply_crds = cli.apply_crds;
    let controllers = plumbing::runtime::main(&cli.common, names, move |handles| async move {
        if apply_crds && let Err(failed) = crds::apply(&handles.client).await {
            // The CRDs in place still serve; the controllers go on, and say why they are old.
            for (crd, e) in failed {
                tracing::error!(crd = %crd, error = %e, "could not apply the CRD");
            }
        }
        // Every controller's caches are made before any of them runs (readiness waits for all).
        // ValkeyBackups when the API serves them: the cluster kind reads them too.
        let served = backup::served(&handles.client).await;
        let backup_cache = if served.backups {
            Some(backup::cache(&handles))
        } else {
            tracing::error!(
                "the API does not serve ValkeyBackups (their CRD is missing: apply the chart's crds/); backups are not captured until this controller restarts with it"
            );
            None
        };
        let (clusters, cluster_caches) = if kinds.contains(&Kind::ValkeyCluster) {
            let backups = backup_cache.as_ref().map(|c| c.store());
            let (run, caches) = cluster::start(&handles, settings.clone(), backups);
            (Some(run), Some(caches))
        } else {
            (None, None)
        };
        let (replications, replication_caches) = if kinds.contains(&Kind::ValkeyReplication) {
            let (run, caches) = replication::controller::start(&handles, settings.clone());
            (Some(run), Some(caches))
        } else {
            (None, None)
        };
        // Backups of whichever kinds are reconciled here (the chart grants their rules always),
        // read from those kinds' own caches.
        let backups = backup_cache.map(|cache| {
            let sources = backup::observe::Sources {
                clusters: cluster_caches,
                replications: replication_caches,
            };
            backup::start(&handles, cache, sources, served.schedules)
        });
        tracing::info!(kinds = ?kinds, "reconciling these kinds");
        futures::join!(
            async {
                if let Some(run) = clusters {
                    run.await;
                }
            },
            async {
                if let Some(run) = replications {
                    run.await;
                }
            },
            async {
                if let Some(run) = backups {
                    run.await;
                }
            }
        );
    });
    plumbing::runtime::process(controllers)
}
