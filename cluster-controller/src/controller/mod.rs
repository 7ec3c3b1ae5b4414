//! The Kubernetes side of the cluster-controller: the ValkeyCluster controller. Each pass
//! ([`reconcile`]) reads the ValkeyCluster and its ValkeyNodes, makes sure the Secrets and the
//! member nodes exist as the spec says, lets the engine observe Valkey and take one step, carries
//! out the step when it is a Kubernetes one (release a node's restart, delete a drained node),
//! and reports status and Events.
//!
//! It touches ValkeyClusters, ValkeyNodes, the Secrets, Services and PodDisruptionBudgets it
//! manages, Events and Leases, and nothing else: the ValkeyNode API is its only contract with the node-controller.
//!
//! | stage | module | Kubernetes? |
//! | --- | --- | --- |
//! | what a pass shares and keeps per cluster | [`context`] | holds the client |
//! | Secrets: the clients' password, the operator's users | [`secrets`] ([`auth`] builds them) | yes |
//! | the cluster's ValkeyNodes, from the cache | [`observe`] ([`members`] reads them) | no (cache) |
//! | every member's ValkeyNode | [`desired`] ([`labels`], [`placement`]) | no |
//! | the cluster bus's own port, recorded on the cluster | [`bus`] | yes |
//! | TLS: the certificate Secret the members serve, the CA to verify them | [`tls`] ([`crate::tls`] issues) | yes |
//! | the cluster's NetworkPolicy | [`network`] | yes |
//! | the PodMonitor of its members' exporters (both kinds) | [`monitoring`] | yes |
//! | member nodes, client Services, disruption budgets, the engine's Kubernetes actions | [`apply`] ([`serving`] builds) | yes |
//! | every member's users, applied live | [`access`] ([`crate::access`] does it) | no (Valkey) |
//! | status and Events | [`report`] ([`status`] computes, [`progress`] counts) | yes |
//! | what can fail | [`error`] | |

pub mod access;
pub mod apply;
pub mod auth;
pub mod bus;
pub mod context;
pub mod desired;
pub mod error;
#[cfg(test)]
pub mod fixtures;
pub mod labels;
pub mod members;
pub mod monitoring;
pub mod network;
pub mod observe;
pub mod placement;
pub mod progress;
pub mod reconcile;
pub mod report;
pub mod secrets;
pub mod serving;
pub mod status;
pub mod stop;
pub mod tls;

use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use context::Context;
use labels::CLUSTER_LABEL;

pub const CONTROLLER: &str = "valkey-cluster-controller";

pub use context::Settings;

/// Sets up the ValkeyCluster controller (its watch caches exist when this returns, so that
/// readiness waits for them) and returns it, to run until shutdown or lost leadership.
pub fn start(
    handles: &plumbing::Handles,
    settings: Settings,
) -> impl std::future::Future<Output = ()> + '_ {
    let clusters = handles.cache::<DeserializeGuard<ValkeyCluster>>(watcher::Config::default());
    let nodes = handles.cache::<ValkeyNode>(watcher::Config::default().labels(CLUSTER_LABEL));
    let claims = plumbing::leader::Claims::new(
        handles.client.clone(),
        plumbing::leader::claim_identity(handles.namespace.as_deref()),
    );
    let ctx = Context::new(
        handles.client.clone(),
        handles.events.clone(),
        handles.metrics.clone(),
        nodes.store(),
        settings,
        claims,
    );
    handles.run_as(
        CONTROLLER,
        clusters,
        |c| c.owns_stream(nodes.touched()),
        ctx,
    )
}
