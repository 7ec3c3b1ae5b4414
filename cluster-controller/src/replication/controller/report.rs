//! The report stage: the pass as the ValkeyReplication's status (computed by [`super::status`])
//! and as Events: the step taken and its member (a failover as a Warning: the operator acted in
//! Valkey's stead), what blocks the replication (once), a replication that became Ready.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use valkey_api::v1alpha1::{ReplicationState, ValkeyReplication, ValkeyReplicationStatus};

use super::context::Context;
use super::status::{self, PassConclusion};
use crate::parent::apply::node_reference;
use crate::parent::context::ParentMemory;
use crate::parent::error::Error;
use crate::parent::labels::FIELD_MANAGER;
use crate::replication::engine::Decision;

/// Events for the decision: the step (failed or not), or a block when its reason first shows.
pub async fn decision_events(
    ctx: &Context,
    replication: &ValkeyReplication,
    decision: &Decision,
    failed: bool,
) {
    match decision {
        Decision::Act {
            action,
            reason,
            message,
            forced,
            ..
        } => {
            let note = format!(
                "{action}: {message}{}",
                if failed { " (failed; retrying)" } else { "" }
            );
            let related = node_reference(
                &replication.namespace().unwrap_or_default(),
                action.member(),
            );
            if *forced {
                ctx.events
                    .warning(replication, reason.as_str(), action.verb(), &note)
                    .await;
            } else {
                ctx.events
                    .normal_related(replication, related, reason.as_str(), action.verb(), &note)
                    .await;
            }
        }
        Decision::Blocked { reason, message }
            if replication
                .status
                .as_ref()
                .and_then(|s| s.reason.as_deref())
                != Some(reason.as_str()) =>
        {
            ctx.events
                .warning(replication, reason.as_str(), "Reconcile", message)
                .await;
        }
        _ => {}
    }
}

/// The status this pass concludes, from the replication's current one, speaking for its
/// `generation` (see [`crate::parent::pass::reported_generation`]).
pub fn status_of(
    replication: &ValkeyReplication,
    generation: Option<i64>,
    conclusion: &PassConclusion<'_>,
    primary: Option<&str>,
    password_secret: Option<&str>,
) -> ValkeyReplicationStatus {
    status::compute(
        replication.status.as_ref(),
        generation,
        conclusion,
        primary,
        password_secret,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    )
}

/// Writes `new` when it differs from the replication's status (the returned copy of the
/// replication carries it), and announces a replication that became Ready.
///
/// Every primary this controller records is remembered (`memory`): the next pass may read the
/// replication from a cache that has not seen the write yet, and must not act on the older
/// record (after a switchover that would be the old primary, and the new one told to follow it).
pub async fn write_status(
    ctx: &Context,
    memory: &ParentMemory,
    replication: &ValkeyReplication,
    new: ValkeyReplicationStatus,
) -> Result<ValkeyReplication, Error> {
    let previous = replication.status.as_ref();
    // lastSuccessfulBackup is the backup controller's (never in `new`): not a change of ours.
    let ours = previous.map(|p| ValkeyReplicationStatus {
        last_successful_backup: None,
        ..p.clone()
    });
    if ours.as_ref() == Some(&new) {
        memory.note_primary_written(new.primary.as_deref());
        return Ok(replication.clone());
    }
    plumbing::conditions::log_status_change(
        previous.map(|p| (p.reason.as_deref(), p.message.as_deref())),
        &new.state,
        new.reason.as_deref(),
        new.message.as_deref(),
    );
    let api: Api<ValkeyReplication> = Api::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    );
    plumbing::apply::apply_status(&api, FIELD_MANAGER, &replication.name_any(), &new)
        .await
        .map_err(Error::Status)?;
    memory.note_primary_written(new.primary.as_deref());
    let became_ready = new.state == Some(ReplicationState::Ready)
        && previous.and_then(|p| p.state) != Some(ReplicationState::Ready);
    if became_ready {
        ctx.events
            .normal(
                replication,
                "ReplicationReady",
                "Reconcile",
                new.message.as_deref().unwrap_or_default(),
            )
            .await;
    }
    let mut updated = replication.clone();
    updated.status = Some(new);
    Ok(updated)
}
