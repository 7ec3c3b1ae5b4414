//! The report stage: what the pass observed as the ValkeyNode's status (computed by
//! [`crate::status`]), written only when it changed, and Events for the transitions a person
//! cares about; and a spec the build refuses, as a condition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{ValkeyNode, ValkeyNodeStatus};

use super::context::Context;
use super::error::Error;
use crate::names::FIELD_MANAGER;
use crate::status;

/// Writes `status` when it differs from the node's, then announces what changed.
pub async fn write_status(
    ctx: &Context,
    node: &ValkeyNode,
    status: &ValkeyNodeStatus,
) -> Result<(), Error> {
    let previous = node.status.as_ref();
    if previous == Some(status) {
        return Ok(());
    }
    let api: Api<ValkeyNode> =
        Api::namespaced(ctx.client.clone(), &node.namespace().unwrap_or_default());
    plumbing::apply::apply_status(&api, FIELD_MANAGER, &node.name_any(), status)
        .await
        .map_err(Error::Status)?;
    ctx.remember_written(node, status);
    announce(ctx, node, previous, status).await;
    Ok(())
}

/// Events for the transitions a person cares about.
async fn announce(
    ctx: &Context,
    node: &ValkeyNode,
    previous: Option<&ValkeyNodeStatus>,
    status: &ValkeyNodeStatus,
) {
    let was_ready = previous.is_some_and(|s| s.ready);
    let ready_condition = status
        .conditions
        .as_deref()
        .and_then(|c| plumbing::conditions::find_condition(c, status::READY));
    let mut events = Vec::new();
    if status.ready && !was_ready {
        events.push((
            false,
            "Ready",
            format!(
                "Pod {} is ready and Valkey answers.",
                status.pod_name.as_deref().unwrap_or_default()
            ),
        ));
    }
    if !status.ready && was_ready {
        let message = ready_condition
            .map(|c| c.message.clone())
            .unwrap_or_default();
        events.push((true, "NotReady", message));
    }
    // The kernel killed the server for its memory limit: a Warning of its own, whether or not
    // the node was ready when it happened (the NotReady above quotes the same message).
    let ready_reason = |s: Option<&ValkeyNodeStatus>| {
        s.and_then(|s| s.conditions.as_deref())
            .and_then(|c| plumbing::conditions::find_condition(c, status::READY))
            .map(|c| c.reason.clone())
    };
    if let Some(now) = ready_condition.filter(|c| c.reason == status::OOM_KILLED.as_str())
        && ready_reason(previous).as_deref() != Some(status::OOM_KILLED.as_str())
    {
        events.push((true, status::OOM_KILLED.as_str(), now.message.clone()));
    }
    let was_role = previous.and_then(|s| s.role);
    if let (Some(before), Some(now)) = (was_role, status.role)
        && before != now
    {
        events.push((
            false,
            "RoleChanged",
            format!("Valkey now reports role {now} (was {before})."),
        ));
    }
    // A volume that cannot reach its size needs a person: one Warning when that starts.
    let pvc = |s: Option<&ValkeyNodeStatus>| {
        s.and_then(|s| s.conditions.as_deref())
            .and_then(|c| plumbing::conditions::find_condition(c, status::PVC_READY))
            .cloned()
    };
    if let Some(now) = pvc(Some(status))
        && let Some(reason) = [status::EXPANSION_NOT_SUPPORTED, status::RESIZE_FAILED]
            .into_iter()
            .map(|r| r.as_str())
            .find(|r| *r == now.reason)
        && pvc(previous).map(|c| c.reason).as_deref() != Some(reason)
    {
        events.push((true, reason, now.message));
    }
    for (warning, reason, note) in events {
        if warning {
            ctx.events.warning(node, reason, "Observe", &note).await;
        } else {
            ctx.events.normal(node, reason, "Observe", &note).await;
        }
    }
}

/// A spec the build stage refuses: Ready=False with the reason, one Warning event, no children touched.
pub async fn bad_spec(
    node: &ValkeyNode,
    ctx: &Context,
    reason: valkey_api::v1alpha1::StatusReason,
    message: &str,
) -> Result<(), Error> {
    let reason = reason.as_str();
    let mut status = node.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    plumbing::conditions::set_condition(
        &mut conditions,
        status::READY,
        plumbing::conditions::ConditionStatus::False,
        reason,
        message,
        node.meta().generation,
        &now,
    );
    status.conditions = Some(conditions);
    status.ready = false;
    status.observed_generation = node.meta().generation;
    if node.status.as_ref() != Some(&status) {
        let namespace = node.namespace().unwrap_or_default();
        let api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), &namespace);
        plumbing::apply::apply_status(&api, FIELD_MANAGER, &node.name_any(), &status)
            .await
            .map_err(Error::Status)?;
        ctx.remember_written(node, &status);
        ctx.events.warning(node, reason, "Render", message).await;
    }
    Ok(())
}
