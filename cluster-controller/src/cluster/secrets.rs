//! A ValkeyCluster's Secrets, by the floor's [`crate::parent::secrets`] stage: the cluster as the
//! parent of its Secrets, with the ValkeyCluster controller's tools.

use valkey_api::v1alpha1::ValkeyCluster;

use super::context::Context;
use crate::parent::conditions::Problem;
use crate::parent::context::ParentMemory;
use crate::parent::error::Error;
use crate::parent::labels::CLUSTER_LABEL;
use crate::parent::secrets::{Auth, Parent, Tools, ensure_for};

/// The Secrets of a ValkeyCluster (see [`ensure_for`]).
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    memory: &ParentMemory,
) -> Result<Result<Auth, Problem>, Error> {
    let (tools, parent) = cluster_parent(ctx, cluster);
    ensure_for(&tools, &parent, memory).await
}

/// The ValkeyCluster controller's tools, and a ValkeyCluster as the parent of its Secrets.
pub fn cluster_parent<'a>(
    ctx: &'a Context,
    cluster: &'a ValkeyCluster,
) -> (Tools<'a>, Parent<'a, ValkeyCluster>) {
    let tools = Tools {
        client: &ctx.client,
        secrets: &ctx.secrets,
        events: &ctx.events,
        rotation_grace: ctx.settings.password_rotation_grace,
    };
    let status = cluster.status.as_ref();
    let parent = Parent {
        object: cluster,
        label: CLUSTER_LABEL,
        auth: &cluster.spec.auth,
        fence_clients: !cluster.spec.persistence.enabled,
        sentinel: false,
        reason: status.and_then(|s| s.reason.as_deref()),
        message: status.and_then(|s| s.message.as_deref()),
    };
    (tools, parent)
}
