//! The Kubernetes side of the replication mode: the ValkeyReplication controller, a second parent
//! of ValkeyNodes in the cluster-controller binary. Each pass ([`reconcile`]) claims the
//! replication's Lease, makes sure its Secrets (the floor's stage, [`crate::parent`]) and member nodes exist
//! as the spec says, lets the engine observe Valkey and decide one step, records a newly chosen
//! primary before acting, carries out the step, points the Services at the primary, and reports
//! status and Events.
//!
//! It touches ValkeyReplications, ValkeyNodes, Services, the Secrets it manages, Events and
//! Leases, and nothing else.
//!
//! | stage | module | Kubernetes? |
//! | --- | --- | --- |
//! | what a pass shares and keeps per replication | [`context`] ([`crate::parent::context`]) | holds the client |
//! | the replication's Lease, the step's retry | [`reconcile`] ([`crate::parent::pass`]) | yes |
//! | Secrets, the operator's users; TLS | [`crate::parent::secrets`], [`crate::parent::tls`] (shared) | yes |
//! | the replication's nodes and Services, from the caches | [`observe`] ([`crate::parent::members`]) | no (cache) |
//! | every member's ValkeyNode, the engine's spec | [`desired`] ([`crate::parent::node`]) | no |
//! | member nodes, Kubernetes actions | [`crate::parent::apply`] (shared) | yes |
//! | every member's users, applied live | [`crate::parent::access`] (shared) | no (Valkey) |
//! | the read/write and read-only Services | [`services`] | yes |
//! | the Sentinels' nodes and Service (`spec.sentinel`) | [`sentinels`] | no (built; applied in `reconcile`) |
//! | status and Events | [`report`] ([`status`] computes) | yes |

pub mod context;
pub mod desired;
#[cfg(test)]
pub mod fixtures;
pub mod observe;
pub mod reconcile;
pub mod report;
pub mod restore;
pub mod sentinels;
pub mod services;
pub mod status;
pub mod validate;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use crate::parent::Settings;
use crate::parent::kind_caches::KindCaches;
use crate::parent::secret_cache::{SecretCache, read_by, readers};
use context::Context;

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "valkey-replication-controller";

/// Sets up the ValkeyReplication controller (its watch caches exist when this returns) and
/// returns it, to run until shutdown or lost leadership, with the caches it fills that the
/// backup controller reads.
pub fn start(
    handles: &plumbing::Handles,
    settings: Settings,
) -> (
    impl std::future::Future<Output = ()> + '_,
    KindCaches<ValkeyReplication>,
) {
    let replications =
        handles.cache::<DeserializeGuard<ValkeyReplication>>(watcher::Config::default());
    let of_replications = watcher::Config::default().labels(REPLICATION_LABEL);
    let nodes = handles.cache::<ValkeyNode>(of_replications.clone());
    let services = handles.cache::<Service>(of_replications.clone());
    let budgets = handles.cache::<PodDisruptionBudget>(of_replications);
    // As for clusters (see `parent::secret_cache`).
    let secrets = handles.metadata_cache::<Secret>(watcher::Config::default());
    let claims = plumbing::leader::Claims::new(
        handles.client.clone(),
        plumbing::leader::claim_identity(handles.namespace.as_deref()),
        "replication",
    );
    let ctx = Context::new(
        handles.client.clone(),
        handles.events.clone(),
        context::Watched {
            nodes: nodes.store(),
            services: services.store(),
            budgets: budgets.store(),
            secrets: SecretCache::watched(handles.client.clone(), secrets.store()),
        },
        settings,
        claims.clone(),
        handles.metrics.clone(),
    );
    let caches = KindCaches {
        parents: replications.store(),
        nodes: nodes.store(),
    };
    let run = handles.run_as(
        CONTROLLER,
        replications,
        |c| {
            let replications = c.store();
            c.owns_stream(nodes.touched())
                .owns_stream(services.touched())
                .owns_stream(budgets.touched())
                .watches_stream(secrets.touched(), move |secret| {
                    readers(&replications, &secret, |r: &ValkeyReplication| {
                        read_by(&r.name_any(), &r.spec.auth, &r.spec.tls)
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
