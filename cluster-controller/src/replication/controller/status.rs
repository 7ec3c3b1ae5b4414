//! The engine's decision, as the ValkeyReplication's status: a one-word state, a CamelCase
//! reason, a sentence, the primary, the replicas in step, and the Ready / Progressing / Degraded
//! conditions every parent reports. Pure: the same pass gives the same status, so a steady
//! replication writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use valkey_api::v1alpha1::{ReplicationState, ValkeyReplicationStatus};

use crate::parent::conditions::{Problem, Summary, summary_conditions};
use crate::parent::progress::{self, WorkLeft};
use crate::replication::engine::{Decision, Health, Reason};

/// What a pass concluded, which the status is computed from ([`compute`]): the engine's
/// decision, or a problem a person must know of that stops progress.
#[derive(Debug, Clone)]
pub enum PassConclusion<'a> {
    /// The engine decided; its decision is what the status says.
    Decided {
        decision: &'a Decision,
        health: &'a Health,
    },
    /// Something stops progress (a Secret, a member whose pod cannot run, a failing action);
    /// `health` when the engine could look.
    Problem {
        problem: Problem,
        health: Option<&'a Health>,
    },
}

/// The status after a pass. `primary` is the member that is primary after it (the one a
/// promotion chose, the one a switchover moved to), which the Services follow.
pub fn compute(
    previous: Option<&ValkeyReplicationStatus>,
    generation: Option<i64>,
    conclusion: &PassConclusion<'_>,
    primary: Option<&str>,
    password_secret: Option<&str>,
    now: &Time,
) -> ValkeyReplicationStatus {
    let was_ready_once = previous
        .and_then(|s| s.state)
        .is_some_and(|state| state != ReplicationState::Initializing);
    let in_progress = if was_ready_once {
        ReplicationState::Reconciling
    } else {
        ReplicationState::Initializing
    };
    let (state, reason, message, ready, progressing, degraded) = match conclusion {
        PassConclusion::Decided {
            decision: Decision::Steady(()),
            health,
        } => (
            ReplicationState::Ready,
            Reason::Healthy.status(),
            steady_message(primary, health),
            true,
            false,
            false,
        ),
        PassConclusion::Decided {
            decision: decision @ (Decision::Act { .. } | Decision::Wait { .. }),
            ..
        } => (
            in_progress,
            decision.reason().status(),
            decision.message().to_owned(),
            false,
            true,
            false,
        ),
        PassConclusion::Decided {
            decision: decision @ Decision::Blocked { .. },
            ..
        } => (
            if decision.reason() == Reason::NoSafeCandidate {
                ReplicationState::Failed
            } else {
                ReplicationState::Degraded
            },
            decision.reason().status(),
            decision.message().to_owned(),
            false,
            false,
            true,
        ),
        PassConclusion::Problem { problem, .. } => (
            ReplicationState::Degraded,
            problem.reason,
            problem.message.clone(),
            false,
            false,
            true,
        ),
    };
    let conditions = summary_conditions(
        previous.and_then(|s| s.conditions.clone()),
        &Summary {
            reason,
            message: &message,
            ready,
            progressing,
            degraded,
        },
        generation,
        now,
    );
    let health = match conclusion {
        PassConclusion::Decided { health, .. } => Some(*health),
        PassConclusion::Problem { health, .. } => *health,
    }
    // A pass in which no member answered learnt nothing about Valkey: the last count stands.
    .filter(|h| h.answering > 0);
    ValkeyReplicationStatus {
        state: Some(state),
        reason: Some(reason.as_str().to_owned()),
        message: Some(message),
        primary: primary
            .map(str::to_owned)
            .or_else(|| previous.and_then(|s| s.primary.clone())),
        ready_replicas: health.map_or_else(
            || previous.map_or(0, |s| s.ready_replicas),
            |h| i32::try_from(h.replicas_in_step).unwrap_or(i32::MAX),
        ),
        // Only rolls take long in a replication: members restarted of members to restart.
        progress: match health {
            Some(h) => progress::next(
                previous.and_then(|s| s.progress.as_ref()),
                WorkLeft {
                    members_to_restart: usize::try_from(h.members_to_restart).unwrap_or(usize::MAX),
                    ..WorkLeft::default()
                },
            ),
            None => previous.and_then(|s| s.progress.clone()),
        },
        // The backup controller's own (its field manager's): a pass over the members never
        // applies it, so never takes it away.
        last_successful_backup: None,
        password_secret_name: password_secret.map(str::to_owned),
        conditions: Some(conditions),
        observed_generation: generation,
    }
}

fn steady_message(primary: Option<&str>, health: &Health) -> String {
    let primary = primary.unwrap_or("the primary");
    if health.replicas_wanted == 0 {
        format!("{primary} serves as a standalone server.")
    } else {
        format!(
            "{primary} is the primary; {} of {} replicas in step.",
            health.replicas_in_step, health.replicas_wanted
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::engine::Action;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap_or_else(|e| panic!("{e}")))
    }

    fn health(in_step: u32) -> Health {
        Health {
            primary: Some("orders-0".into()),
            replicas_wanted: 2,
            replicas_in_step: in_step,
            answering: 3,
            members_to_restart: 0,
        }
    }

    #[test]
    fn a_forming_replication_initializes_then_is_ready_and_then_reconciles() {
        let forming = Decision::wait(Reason::Forming, "waiting for orders-2");
        let h = health(0);
        let conclusion = PassConclusion::Decided {
            decision: &forming,
            health: &h,
        };
        let first = compute(
            None,
            Some(1),
            &conclusion,
            None,
            Some("orders-password"),
            &at(1),
        );
        assert_eq!(first.state, Some(ReplicationState::Initializing));
        let h = health(2);
        let steady = PassConclusion::Decided {
            decision: &Decision::Steady(()),
            health: &h,
        };
        let ready = compute(
            Some(&first),
            Some(1),
            &steady,
            Some("orders-0"),
            None,
            &at(2),
        );
        assert_eq!(
            (
                ready.state,
                ready.reason.as_deref(),
                ready.primary.as_deref(),
                ready.ready_replicas
            ),
            (
                Some(ReplicationState::Ready),
                Some("Healthy"),
                Some("orders-0"),
                2
            )
        );
        assert_eq!(
            ready,
            compute(
                Some(&ready),
                Some(1),
                &steady,
                Some("orders-0"),
                None,
                &at(60)
            ),
            "a steady replication writes nothing"
        );
        let failover = Decision::forced(
            Action::AllowRestart { member: "x".into() },
            Reason::FailingOver,
            "orders-0 is lost",
        );
        let h = health(1);
        let later = compute(
            Some(&ready),
            Some(1),
            &PassConclusion::Decided {
                decision: &failover,
                health: &h,
            },
            Some("orders-1"),
            None,
            &at(3),
        );
        assert_eq!(
            (
                later.state,
                later.reason.as_deref(),
                later.primary.as_deref()
            ),
            (
                Some(ReplicationState::Reconciling),
                Some("FailingOver"),
                Some("orders-1")
            )
        );
    }

    #[test]
    fn no_safe_candidate_is_failed_and_a_conflict_degraded() {
        let h = health(0);
        let stuck = Decision::blocked(Reason::NoSafeCandidate, "orders-0 is lost");
        let s = compute(
            None,
            Some(1),
            &PassConclusion::Decided {
                decision: &stuck,
                health: &h,
            },
            None,
            None,
            &at(1),
        );
        assert_eq!(s.state, Some(ReplicationState::Failed));
        let conflict = Decision::blocked(Reason::DataConflict, "orders-2 holds more");
        let s = compute(
            None,
            Some(1),
            &PassConclusion::Decided {
                decision: &conflict,
                health: &h,
            },
            None,
            None,
            &at(1),
        );
        assert_eq!(s.state, Some(ReplicationState::Degraded));
    }
}
