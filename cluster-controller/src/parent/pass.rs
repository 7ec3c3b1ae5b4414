//! Pieces of a pass every parent kind takes the same way: holding the object's Lease (or leaving
//! the object alone while another controller holds it), and when to look again after the
//! engine's step, with what a step that keeps failing means for the status.

use std::fmt::Display;
use std::time::Duration;
use valkey_api::v1alpha1::StatusReason;

use kube::runtime::controller::Action as Requeue;
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use plumbing::leader::Claim;

use super::conditions::Problem;
use super::context::ParentMemory;
use super::error::{Error, api_error};
use crate::engine::EngineError;

/// The longest wait before retrying a Valkey action that keeps failing.
pub(crate) const MAX_ACTION_RETRY: Duration = Duration::from_secs(30);

/// Failures in a row of a Valkey action before the cluster is reported Degraded: one or two are
/// the normal noise of pods restarting; three mean a person should look.
const ACTION_FAILURES_BEFORE_DEGRADED: u32 = 3;

/// Holds `object`'s Lease `lease`, or says when to look again while another controller holds
/// it (announced once, with a Warning Event naming the holder). Any parent kind.
pub async fn claim_for<K: Resource<DynamicType = ()>>(
    claims: &plumbing::leader::Claims,
    events: &plumbing::events::EventPublisher,
    object: &K,
    lease: String,
    memory: &ParentMemory,
) -> Result<Option<Requeue>, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let owner = object
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid(format!("the {} has no uid", K::kind(&()))))?;
    let claim = claims
        .claim(&namespace, &lease, owner)
        .await
        .map_err(api_error(format!("claiming Lease {lease}")))?;
    match claim {
        Claim::Held => {
            memory.note_holder(None);
            Ok(None)
        }
        Claim::HeldByOther { holder, retry_in } => {
            if memory.note_holder(Some(&holder)) {
                let message = format!(
                    "Another cluster-controller ({holder}) holds Lease {lease} of this {}; this one ({}) leaves it alone. Two releases watch this namespace: uninstall one, or narrow its watchNamespaces.",
                    K::kind(&()),
                    claims.identity()
                );
                tracing::warn!(lease = %lease, %holder, "{message}");
                events
                    .warning(object, "AnotherControllerActive", "Reconcile", &message)
                    .await;
            }
            Ok(Some(Requeue::requeue(retry_in)))
        }
    }
}

/// When to look again after a pass of any parent, and what a failing step means for its status:
/// `requeue` when the pass's step (if any) worked, which clears the count of failures; after a
/// failed Valkey action, the object's back-off (never more than [`MAX_ACTION_RETRY`]), and from
/// the third failure in a row the problem to report.
pub fn after_step(
    failures: &plumbing::backoff::Backoff,
    key: &ObjectKey,
    failed: Option<(&(dyn Display + Sync), &EngineError)>,
    requeue: Duration,
) -> (Duration, Option<Problem>) {
    match failed {
        Some((action, error)) => {
            let retry = failures.failed(key).min(MAX_ACTION_RETRY);
            let times = failures.failures(key);
            tracing::info!(%error, times, retry_in = ?retry, "the step failed; the next pass looks again");
            (retry, failing_problem(action, error, times))
        }
        None => {
            failures.succeeded(key);
            (requeue, None)
        }
    }
}

/// How soon to look again after a pass that created or changed a member's spec: only the next
/// pass, which reads the members' new generations back, can report the parent's current one.
pub const AFTER_MEMBER_CHANGE: Duration = Duration::from_secs(1);

/// The generation of a parent its status says it observed after a pass. A pass that created or
/// changed a member's spec judged the members as they were before (their readiness, their
/// revisions, for their previous spec: none has seen the new one yet), so it cannot vouch for the
/// parent's current generation: its status still speaks for `last_observed`. Otherwise it would
/// say Ready for a change that has not started, and whoever waits for `observedGeneration ==
/// generation` and Ready (kstatus, Argo CD, Flux, a script) would take the change for done. The
/// status it writes is true of that earlier generation (the members are in step with it), so a
/// change that needs no restart keeps Ready as it was, and announces nothing.
pub fn reported_generation(
    generation: Option<i64>,
    last_observed: Option<i64>,
    members_changed: bool,
) -> Option<i64> {
    if members_changed {
        last_observed
    } else {
        generation
    }
}

/// When to look again after a pass that wants `requeue`: soon after one that changed a member's
/// spec (see [`reported_generation`]), whatever the engine decided. The member watch usually
/// brings that pass sooner.
pub fn requeue_after(requeue: Duration, members_changed: bool) -> Duration {
    if members_changed {
        requeue.min(AFTER_MEMBER_CHANGE)
    } else {
        requeue
    }
}

/// What the status says about an action that failed `times` in a row: nothing for the first
/// failures (the normal noise of pods restarting), then Valkey's words. No count in the words: a
/// status that changed on every failure would be written, and its own watch event would start the
/// next pass at once, a hot loop the back-off could not stop.
pub(crate) fn failing_problem(
    action: &dyn Display,
    error: &EngineError,
    times: u32,
) -> Option<Problem> {
    (times >= ACTION_FAILURES_BEFORE_DEGRADED).then(|| Problem {
        reason: StatusReason::ActionFailing,
        message: format!(
            "{action} keeps failing: {error}. The operator retries, at most every {}s.",
            MAX_ACTION_RETRY.as_secs()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass that changed a member's spec speaks for the generation the last status spoke for
    /// (none before the first), and looks again soon; any other pass speaks for the current one.
    #[test]
    fn a_pass_that_changed_a_members_spec_does_not_speak_for_the_new_generation() {
        assert_eq!(reported_generation(Some(3), Some(2), true), Some(2));
        assert_eq!(reported_generation(Some(1), None, true), None);
        assert_eq!(reported_generation(Some(3), Some(2), false), Some(3));
        let steady = Duration::from_secs(15);
        assert_eq!(requeue_after(steady, true), AFTER_MEMBER_CHANGE);
        assert_eq!(requeue_after(steady, false), steady);
        let act = Duration::from_millis(500);
        assert_eq!(
            requeue_after(act, true),
            act,
            "never later than the engine asked"
        );
    }
}
