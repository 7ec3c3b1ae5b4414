//! The ValkeyCluster kind: the ValkeyCluster controller, a pipeline on the floor every parent
//! kind shares ([`crate::parent`]). Each pass
//! ([`reconcile`]) reads the ValkeyCluster and its ValkeyNodes, makes sure the Secrets and the
//! member nodes exist as the spec says, lets the engine observe Valkey and take one step, carries
//! out the step when it is a Kubernetes one (release a node's restart, delete a drained node),
//! and reports status and Events.
//!
//! It touches ValkeyClusters, ValkeyNodes, the Secrets, Services and PodDisruptionBudgets it
//! manages, Events and Leases, and nothing else: the ValkeyNode API is its only contract with the node-controller.
//!
//! | stage | module (on the floor's) | Kubernetes? |
//! | --- | --- | --- |
//! | what a pass shares and keeps per cluster | [`context`] ([`crate::parent::context`]) | holds the client |
//! | the cluster's Lease, the step's retry | [`reconcile`] ([`crate::parent::pass`]) | yes |
//! | Secrets: the clients' password, the operator's users | [`secrets`] ([`crate::parent::secrets`], [`crate::parent::auth`] builds them) | yes |
//! | the cluster's ValkeyNodes, from the cache | [`observe`] ([`crate::parent::members`] reads them) | no (cache) |
//! | every member's ValkeyNode | [`desired`] ([`crate::parent::node`], [`crate::parent::labels`], [`crate::parent::placement`]) | no |
//! | the cluster bus's own port, recorded on the cluster | [`bus`] | yes |
//! | TLS: the certificate Secret the members serve, the CA to verify them | [`tls`] ([`crate::parent::tls`]; [`crate::tls`] issues) | yes |
//! | the cluster's NetworkPolicy | [`network`] | yes |
//! | the PodMonitor of its members' exporters | [`crate::parent::monitoring`] | yes |
//! | member nodes, client Services, disruption budgets, the engine's Kubernetes actions | [`apply`] ([`crate::parent::apply`]; [`serving`] and [`crate::parent::serving`] build) | yes |
//! | every member's users, applied live | [`crate::parent::access`] ([`crate::access`] does it) | no (Valkey) |
//! | status and Events | [`report`] ([`status`] computes; [`crate::parent::conditions`], [`crate::parent::progress`]) | yes |
//! | what can fail, what stops a pass | [`crate::parent::error`], [`crate::parent::stop`] | |

pub mod apply;
pub mod bus;
pub mod context;
pub mod desired;
pub mod external;
#[cfg(test)]
pub mod fixtures;
pub mod network;
pub mod observe;
pub mod reconcile;
pub mod report;
pub mod restore;
pub mod secrets;
pub mod serving;
pub mod status;
pub mod tls;
pub mod validate;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyCluster, ValkeyNode};

use crate::parent::Settings;
use crate::parent::kind_caches::KindCaches;
use crate::parent::labels::CLUSTER_LABEL;
use crate::parent::secret_cache::{SecretCache, read_by, readers};
use context::Context;

pub const CONTROLLER: &str = "valkey-cluster-controller";

/// Sets up the ValkeyCluster controller (its watch caches exist when this returns, so that
/// readiness waits for them) and returns it, to run until shutdown or lost leadership.
/// `backups`: the ValkeyBackups (when the API serves them), so that no slot move starts while
/// one of the cluster is captured. With it, the caches it fills that the backup controller reads.
pub fn start(
    handles: &plumbing::Handles,
    settings: Settings,
    backups: Option<Store<DeserializeGuard<ValkeyBackup>>>,
) -> (
    impl std::future::Future<Output = ()> + '_,
    KindCaches<ValkeyCluster>,
) {
    let clusters = handles.cache::<DeserializeGuard<ValkeyCluster>>(watcher::Config::default());
    let nodes = handles.cache::<ValkeyNode>(watcher::Config::default().labels(CLUSTER_LABEL));
    // Every Secret's metadata: a cluster's own Secrets and those its spec names (see
    // `parent::secret_cache` for why not a label-selected watch).
    let secrets = handles.metadata_cache::<Secret>(watcher::Config::default());
    let of_clusters = || watcher::Config::default().labels(CLUSTER_LABEL);
    // Every Service of a cluster: the client Services the applier keeps, and the external ones
    // (what a load balancer gives one wakes its cluster).
    let services = handles.cache::<Service>(of_clusters());
    let budgets = handles.cache::<PodDisruptionBudget>(of_clusters());
    let policies = handles.cache::<NetworkPolicy>(of_clusters());
    let claims = plumbing::leader::Claims::new(
        handles.client.clone(),
        plumbing::leader::claim_identity(handles.namespace.as_deref()),
        "cluster",
    );
    let ctx = Context::new(
        handles.client.clone(),
        handles.events.clone(),
        handles.metrics.clone(),
        context::Watched {
            nodes: nodes.store(),
            services: services.store(),
            budgets: budgets.store(),
            policies: policies.store(),
            secrets: SecretCache::watched(handles.client.clone(), secrets.store()),
        },
        settings,
        claims.clone(),
    );
    let ctx = Context { backups, ..ctx };
    let caches = KindCaches {
        parents: clusters.store(),
        nodes: nodes.store(),
    };
    let run = handles.run_as(
        CONTROLLER,
        clusters,
        |c| {
            let clusters = c.store();
            c.owns_stream(nodes.touched())
                .owns_stream(services.touched())
                .owns_stream(budgets.touched())
                .owns_stream(policies.touched())
                .watches_stream(secrets.touched(), move |secret| {
                    readers(&clusters, &secret, |cluster: &ValkeyCluster| {
                        read_by(&cluster.name_any(), &cluster.spec.auth, &cluster.spec.tls)
                    })
                })
        },
        ctx,
    );
    (
        claims.kept_during(handles.namespace.as_deref(), run),
        caches,
    )
}
