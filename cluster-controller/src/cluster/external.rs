//! A ValkeyCluster's external access, on the floor's [`crate::parent::external`]: a Service of
//! type LoadBalancer or NodePort per member (`<member>-external`, selecting that member's pod alone), the
//! address each member announces to clients, and the names its certificate must carry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use valkey_api::contract::NODE_LABEL;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::parent::conditions::Problem;
use crate::parent::error::Error;
use crate::parent::external::{self, EXTERNAL_LABEL};
use crate::parent::labels::CLUSTER_LABEL;
use crate::parent::node::DesiredMember;
use crate::parent::serving::Owner;

/// The cluster's external Services in the cache, by name: its label, owned by it.
pub fn services(services: &Store<Service>, cluster: &ValkeyCluster) -> BTreeMap<String, Service> {
    let namespace = cluster.namespace();
    let name = cluster.name_any();
    let uid = cluster.uid().unwrap_or_default();
    services
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace() == namespace
                && s.labels().get(CLUSTER_LABEL) == Some(&name)
                && s.labels().get(EXTERNAL_LABEL).map(String::as_str) == Some("true")
                && s.owner_references().iter().any(|o| o.uid == uid)
        })
        .map(|s| (s.name_any(), (*s).clone()))
        .collect()
}

/// What the operator's certificate must name for clients outside.
pub fn certificate_names(ctx: &Context, cluster: &ValkeyCluster) -> Vec<String> {
    external::certificate_names(
        cluster.spec.external_access.as_ref(),
        &services(&ctx.services, cluster),
        &super::observe::member_nodes(&ctx.nodes, cluster),
    )
}

/// The external Service of every member that is wanted or still exists, as the spec asks.
pub fn wanted(
    cluster: &ValkeyCluster,
    desired: &[DesiredMember],
    existing: &[Arc<ValkeyNode>],
) -> Vec<Service> {
    let (Some(access), Some(owner)) = (
        cluster.spec.external_access.as_ref(),
        Owner::of(cluster, CLUSTER_LABEL),
    ) else {
        return Vec::new();
    };
    let members: BTreeSet<String> = desired
        .iter()
        .map(|m| m.name.clone())
        .chain(existing.iter().map(|n| n.name_any()))
        .collect();
    members
        .into_iter()
        .map(|member| {
            let selector = BTreeMap::from([
                (CLUSTER_LABEL.to_owned(), cluster.name_any()),
                (NODE_LABEL.to_owned(), member.clone()),
            ]);
            external::service(
                &owner,
                external::member_service_name(&member),
                selector,
                access,
                &member,
            )
        })
        .collect()
}

/// Applies the members' external Services through the pass's applier (only what changed),
/// deletes those no member needs any more, and gives each desired member the address it
/// announces. Returns what a person should know while an address is missing.
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &plumbing::ObjectKey,
    desired: &mut [DesiredMember],
    existing: &[Arc<ValkeyNode>],
) -> Result<Option<Problem>, Error> {
    let wanted = wanted(cluster, desired, existing);
    let current = services(&ctx.services, cluster);
    for want in &wanted {
        ctx.applier
            .apply(&ctx.client, key, &ctx.services, want)
            .await?;
    }
    // By name among this cluster's external Services: a label alone would also match its client
    // Services or another cluster's external ones.
    for name in current.keys().filter(|name| {
        !wanted
            .iter()
            .any(|w| w.metadata.name.as_ref() == Some(name))
    }) {
        ctx.applier
            .delete(&ctx.client, key, &ctx.services, name)
            .await?;
    }
    Ok(external::announce(
        desired,
        cluster.spec.external_access.as_ref(),
        &current,
        existing,
    ))
}
