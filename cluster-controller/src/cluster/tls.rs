//! A ValkeyCluster's TLS, by the floor's [`crate::parent::tls`] stage.

use valkey_api::v1alpha1::ValkeyCluster;

use super::context::Context;
use crate::parent::conditions::Problem;
use crate::parent::context::ParentMemory;
use crate::parent::error::Error;
use crate::parent::tls::{DEFAULT_CERTIFICATE_LIFETIME, Served, ensure_for};

/// The TLS stage of a ValkeyCluster (see [`ensure_for`]).
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    memory: &ParentMemory,
) -> Result<Result<Option<Served>, Problem>, Error> {
    let (tools, parent) = super::secrets::cluster_parent(ctx, cluster);
    // A setting this version does not serve was refused by the validation stage.
    let tls = &cluster.spec.tls;
    let external = super::external::certificate_names(ctx, cluster);
    ensure_for(
        &tools,
        &parent,
        tls,
        DEFAULT_CERTIFICATE_LIFETIME,
        memory,
        &external,
    )
    .await
}
