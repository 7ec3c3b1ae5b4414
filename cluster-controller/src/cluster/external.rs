//! A ValkeyCluster's external access, on the floor's [`crate::parent::external`]: a Service of
//! type LoadBalancer per member (`<member>-external`, selecting that member's pod alone), the
//! address each member announces to clients, and the names its certificate must carry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use valkey_api::contract::NODE_LABEL;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::parent::conditions::Problem;
use crate::parent::error::{Error, api_error};
use crate::parent::external::{self, EXTERNAL_LABEL};
use crate::parent::labels::{CLUSTER_LABEL, FIELD_MANAGER};
use crate::parent::node::DesiredMember;
use crate::parent::serving::{Owner, service_as_wanted};

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
            )
        })
        .collect()
}

/// Applies the members' external Services (those that differ from the cache), deletes those no
/// member needs any more, and gives each desired member the address it announces. Returns what
/// a person should know while an address is missing.
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    desired: &mut [DesiredMember],
    existing: &[Arc<ValkeyNode>],
) -> Result<Option<Problem>, Error> {
    let wanted = wanted(cluster, desired, existing);
    let current = services(&ctx.services, cluster);
    let api: Api<Service> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for want in &wanted {
        let name = want.name_any();
        if current
            .get(&name)
            .is_some_and(|c| service_as_wanted(c, want))
        {
            continue;
        }
        api.patch(&name, &params, &Patch::Apply(want))
            .await
            .map_err(api_error(format!("applying Service {name}")))?;
    }
    for name in current.keys().filter(|name| {
        !wanted
            .iter()
            .any(|w| w.metadata.name.as_ref() == Some(name))
    }) {
        match api.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(api_error(format!("deleting Service {name}"))(e)),
        }
    }
    Ok(external::announce(
        desired,
        cluster.spec.external_access.as_ref(),
        &current,
        existing,
    ))
}
