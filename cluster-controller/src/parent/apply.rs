//! Applying a parent's member ValkeyNodes, for any parent kind: every node as wanted (a node
//! already as wanted is not written), a member's restart released, a drained member deleted.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use plumbing::events::EventPublisher;
use valkey_api::v1alpha1::ValkeyNode;

use super::error::{Error, api_error};
use super::labels::FIELD_MANAGER;
use super::members;
use super::node::DesiredMember;
use crate::engine::Member;

/// A reference to a member's ValkeyNode, as the related object of an Event.
pub fn node_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(ValkeyNode::api_version(&()).into_owned()),
        kind: Some(ValkeyNode::kind(&()).into_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

/// Applies every member node `desired` names for `parent` (any parent kind): a node already as
/// wanted is not written; an existing one keeps its restart gate unless its pod cannot run, and
/// while `forming` (no data yet) no node is gated. A new node is announced with an Event. True
/// when a node was created or changed.
pub async fn apply_members<K: Resource<DynamicType = ()>>(
    api: &Api<ValkeyNode>,
    events: &EventPublisher,
    parent: &K,
    desired: &[DesiredMember],
    existing: &[Arc<ValkeyNode>],
    forming: bool,
) -> Result<bool, Error> {
    let mut applied = false;
    for member in desired {
        let current = existing
            .iter()
            .find(|n| n.name_any() == member.name)
            .map(AsRef::as_ref);
        let gate = if forming {
            None
        } else {
            members::allowed_revision(current)
        };
        let want = member.gated(gate);
        if current.is_some_and(|c| c.spec == want.spec) {
            continue;
        }
        if !forming
            && current.is_some_and(|c| c.spec.allowed_revision.is_some())
            && want.spec.allowed_revision.is_none()
        {
            tracing::info!(
                node = %member.name,
                "the node's pod cannot run; it takes the new spec without waiting its turn"
            );
        }
        apply_node(api, &want).await?;
        applied = true;
        if current.is_none() {
            events
                .normal_related(
                    parent,
                    node_reference(&parent.namespace().unwrap_or_default(), &member.name),
                    "NodeCreated",
                    "Create",
                    &format!("Created ValkeyNode {} ({}).", member.name, member.place),
                )
                .await;
        }
    }
    Ok(applied)
}

/// Applies one ValkeyNode as this controller wants it.
pub(crate) async fn apply_node(api: &Api<ValkeyNode>, node: &ValkeyNode) -> Result<(), Error> {
    let name = node.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(node),
    )
    .await
    .map_err(api_error(format!("applying ValkeyNode {name}")))?;
    Ok(())
}

/// Releases one member's restart: its `allowedRevision` becomes its desired revision.
pub(crate) async fn allow_restart(
    api: &Api<ValkeyNode>,
    desired: &[DesiredMember],
    existing: &[Arc<ValkeyNode>],
    members: &[Member],
    member: &str,
) -> Result<(), Error> {
    let (Some(node), Some(m)) = (
        existing.iter().find(|n| n.name_any() == member),
        members.iter().find(|m| m.name == member),
    ) else {
        return Ok(());
    };
    let Some(revision) = m.desired_revision.clone() else {
        return Ok(());
    };
    let node = match desired.iter().find(|d| d.name == member) {
        Some(wanted) => wanted.gated(Some(revision)),
        // A member on its way out keeps its spec; only the gate moves.
        None => leaving_node_gated(node, revision),
    };
    apply_node(api, &node).await
}

/// What this controller applies of a node the spec no longer wants, with its gate moved.
fn leaving_node_gated(node: &ValkeyNode, revision: String) -> ValkeyNode {
    let mut node = node.clone();
    node.spec.allowed_revision = Some(revision);
    node.metadata = ObjectMeta {
        name: node.metadata.name.clone(),
        namespace: node.metadata.namespace.clone(),
        labels: node.metadata.labels.clone(),
        owner_references: node.metadata.owner_references.clone(),
        ..Default::default()
    };
    node.status = None;
    node
}

pub(crate) async fn delete_node(api: &Api<ValkeyNode>, member: &str) -> Result<(), Error> {
    match api.delete(member, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_error(format!("deleting ValkeyNode {member}"))(e)),
    }
}
