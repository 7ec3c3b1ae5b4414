//! The engine's decision, as the ValkeyCluster's status: a one-word state, a CamelCase reason, a
//! sentence, the shard counts, and the Ready / Progressing / Degraded conditions. Pure: the same
//! decision gives the same status, so a steady cluster writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use valkey_api::v1alpha1::{AcceptedLoss, ClusterState, ValkeyClusterStatus};

use crate::engine::{Decision, Health, Reason};
use crate::parent::conditions::{Problem, Summary, summary_conditions};
use crate::parent::progress::{self, WorkLeft};

/// What a pass concluded, which the status is computed from ([`compute`]): the engine's
/// decision, or a problem a person must know of that stops progress.
#[derive(Debug, Clone)]
pub enum PassConclusion<'a> {
    /// The engine decided; its decision is what the status says.
    Decided {
        decision: &'a Decision,
        health: Option<Health>,
    },
    /// Something stops the engine's progress; `health` is how the cluster stood, when the engine
    /// could look.
    Problem {
        problem: Problem,
        health: Option<Health>,
    },
}

pub fn compute(
    previous: Option<&ValkeyClusterStatus>,
    generation: Option<i64>,
    conclusion: &PassConclusion<'_>,
    password_secret: Option<&str>,
    now: &Time,
) -> ValkeyClusterStatus {
    let was_ready_once =
        previous.is_some_and(|s| s.state.is_some_and(|st| st != ClusterState::Initializing));
    let (state, reason, message, ready, progressing, degraded) = match conclusion {
        PassConclusion::Decided {
            decision: Decision::Steady(h),
            ..
        } => (
            ClusterState::Ready,
            Reason::ClusterHealthy.status(),
            {
                let serving = format!(
                    "{} shards serve all {} slots; {} of {} replicas in sync.",
                    h.shards, h.slots_assigned, h.replicas_in_sync, h.replicas_wanted
                );
                // A planned failover that waits for the cluster to stay steady: no countdown,
                // so the status is not written again on every pass.
                match &h.spread_held {
                    Some(held) => format!("{serving} {held}."),
                    None => serving,
                }
            },
            true,
            false,
            false,
        ),
        PassConclusion::Decided {
            decision:
                Decision::Act {
                    reason, message, ..
                }
                | Decision::Wait { reason, message },
            ..
        } => (
            if was_ready_once {
                ClusterState::Reconciling
            } else {
                ClusterState::Initializing
            },
            reason.status(),
            message.clone(),
            false,
            true,
            false,
        ),
        PassConclusion::Decided {
            decision: Decision::Blocked { reason, message },
            ..
        } => (
            if reason.is_failure() {
                ClusterState::Failed
            } else {
                ClusterState::Degraded
            },
            reason.status(),
            message.clone(),
            false,
            false,
            true,
        ),
        PassConclusion::Problem { problem: p, .. } => (
            ClusterState::Degraded,
            p.reason,
            p.message.clone(),
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
        PassConclusion::Decided {
            decision: Decision::Steady(h),
            ..
        } => Some(h.clone()),
        PassConclusion::Decided { health, .. } | PassConclusion::Problem { health, .. } => {
            health.clone()
        }
    }
    // A pass in which no member answered learnt nothing about Valkey. Keeping the last counts
    // matters: the restart gate reads `shards` to tell a formed cluster from a new one, and a
    // formed cluster must never have every member released at once.
    .filter(|h| h.nodes > 0);
    ValkeyClusterStatus {
        state: Some(state),
        reason: Some(reason.as_str().to_owned()),
        message: Some(message),
        // Counts come from this pass's look at Valkey; without one, the last counts stand (they
        // describe Valkey, not the operator).
        shards: health
            .as_ref()
            .map_or_else(|| previous.map_or(0, |s| s.shards), |h| to_i32(h.shards)),
        ready_shards: health.as_ref().map_or_else(
            || previous.map_or(0, |s| s.ready_shards),
            |h| to_i32(h.ready_shards),
        ),
        // A pass that could not look at Valkey, or could not count the slots left (a migration
        // in flight), learnt nothing about the work left.
        progress: match health.as_ref().and_then(|h| Some((h, h.slots_to_move?))) {
            Some((h, slots_to_move)) => progress::next(
                previous.and_then(|s| s.progress.as_ref()),
                WorkLeft {
                    slots_to_move,
                    members_to_restart: h.members_to_restart,
                    shards_now: h.shards,
                    shards_wanted: h.shards_wanted,
                },
            ),
            None => previous.and_then(|s| s.progress.clone()),
        },
        // Once the cluster served its slots it stays formed, whatever it serves now: slots that
        // lose every copy later are lost data, never a formation to redo.
        formed: previous
            .is_some_and(|s| s.formed == Some(true) || s.shards > 0)
            .then_some(true)
            .or_else(|| {
                health
                    .as_ref()
                    .is_some_and(|h| h.shards > 0)
                    .then_some(true)
            }),
        // The caller records an acknowledgement acted on (see [`accepted_loss`]).
        accepted_loss: previous.and_then(|s| s.accepted_loss.clone()),
        // The backup controller's own (its field manager's): a pass over the members never
        // applies it, so never takes it away.
        last_successful_backup: None,
        password_secret_name: password_secret.map(str::to_owned),
        // The members' nodes: the caller sets them from the pass; otherwise they stand.
        node_ids: previous.and_then(|s| s.node_ids.clone()),
        conditions: Some(conditions),
        observed_generation: generation,
    }
}

/// The record of the acknowledgement of a loss (`spec.acceptLostSlots`, `accepted`) after a
/// pass: taken on it now (`acted`), it is in use; in use and the cluster whole again (`steady`),
/// it is spent, and that value allows nothing more; removed from the spec, it is forgotten (set
/// again, it acknowledges a new loss).
pub fn accepted_loss(
    previous: Option<&AcceptedLoss>,
    accepted: Option<&str>,
    acted: bool,
    steady: bool,
) -> Option<AcceptedLoss> {
    let accepted = accepted.filter(|a| !a.is_empty())?;
    match previous {
        _ if acted => Some(AcceptedLoss {
            slots: accepted.to_owned(),
            spent: false,
        }),
        Some(record) if steady && !record.spent => Some(AcceptedLoss {
            slots: record.slots.clone(),
            spent: true,
        }),
        previous => previous.cloned(),
    }
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parent::conditions::{DEGRADED, PROGRESSING, READY};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::Timestamp;
    use valkey_api::v1alpha1::StatusReason;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap_or_else(|e| panic!("{e}")))
    }

    fn health() -> Health {
        Health {
            shards: 3,
            ready_shards: 3,
            slots_assigned: 16384,
            replicas_wanted: 3,
            replicas_in_sync: 3,
            nodes: 6,
            slots_to_move: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn a_pass_that_cannot_count_the_slots_left_keeps_the_progress() {
        let d = Decision::Wait {
            reason: Reason::MigratingSlots,
            message: "moving slots".into(),
        };
        let moving = |left: Option<usize>| Health {
            shards: 5,
            shards_wanted: 5,
            slots_to_move: left,
            ..health()
        };
        let start = decided(None, &d, Some(moving(Some(6553))), 1);
        let in_flight = decided(Some(&start), &d, Some(moving(None)), 2);
        assert_eq!(
            in_flight.progress, start.progress,
            "a migration in flight must not read as nothing left"
        );
        let later = decided(Some(&in_flight), &d, Some(moving(Some(4368))), 3);
        let p = later.progress.unwrap_or_else(|| panic!("no progress"));
        assert_eq!((p.done, p.total), (2185, 6553));
    }

    /// The status after a pass that decided `decision`, at generation 1, without a password Secret.
    fn decided(
        previous: Option<&ValkeyClusterStatus>,
        decision: &Decision,
        health: Option<Health>,
        secs: i64,
    ) -> ValkeyClusterStatus {
        compute(
            previous,
            Some(1),
            &PassConclusion::Decided { decision, health },
            None,
            &at(secs),
        )
    }

    fn condition<'a>(s: &'a ValkeyClusterStatus, t: &str) -> &'a Condition {
        s.conditions
            .as_deref()
            .and_then(|c| plumbing::conditions::find_condition(c, t))
            .unwrap_or_else(|| panic!("no {t}"))
    }

    /// While a planned failover waits for the cluster to stay steady, the cluster is Ready and
    /// the status says what will move.
    #[test]
    fn a_held_spread_is_ready_and_says_what_will_move() {
        let d = Decision::Steady(Health {
            spread_held: Some(
                "c-0-0 shares node a with another primary; its replica c-0-1 on node b takes \
                 over with a planned failover once the cluster has been steady for 5m"
                    .into(),
            ),
            ..health()
        });
        let s = compute(
            None,
            Some(1),
            &PassConclusion::Decided {
                decision: &d,
                health: None,
            },
            None,
            &at(1),
        );
        assert_eq!(
            (s.state, s.reason.as_deref()),
            (Some(ClusterState::Ready), Some("ClusterHealthy"))
        );
        assert_eq!(condition(&s, READY).status, "True");
        let message = s.message.as_deref().unwrap_or_default();
        assert!(message.starts_with("3 shards serve all"), "{message}");
        assert!(
            message.ends_with("once the cluster has been steady for 5m."),
            "{message}"
        );
    }

    #[test]
    fn a_steady_cluster_is_ready_and_healthy() {
        let d = Decision::Steady(health());
        let s = compute(
            None,
            Some(1),
            &PassConclusion::Decided {
                decision: &d,
                health: None,
            },
            Some("c-password"),
            &at(1),
        );
        assert_eq!(
            (s.state, s.reason.as_deref()),
            (Some(ClusterState::Ready), Some("ClusterHealthy"))
        );
        assert_eq!((s.shards, s.ready_shards), (3, 3));
        assert_eq!(condition(&s, READY).status, "True");
        assert_eq!(condition(&s, DEGRADED).status, "False");
        let again = compute(
            Some(&s),
            Some(1),
            &PassConclusion::Decided {
                decision: &d,
                health: None,
            },
            Some("c-password"),
            &at(50),
        );
        assert_eq!(s, again, "a steady cluster writes nothing");
    }

    /// The pass that sends the members a new spec (generation 2) still sees them in step with the
    /// old one and finds the cluster steady: its status speaks for generation 1 and is the one
    /// already written (no write, no Ready that flaps, no second "became Ready"). The pass that
    /// reads the members' new generations back speaks for generation 2.
    #[test]
    fn a_pass_that_changed_the_members_specs_leaves_the_status_of_the_last_generation() {
        use crate::parent::pass::reported_generation;
        let d = Decision::Steady(health());
        let ready = decided(None, &d, None, 1);
        let conclusion = PassConclusion::Decided {
            decision: &d,
            health: None,
        };
        let last = ready.observed_generation;
        let changed = compute(
            Some(&ready),
            reported_generation(Some(2), last, true),
            &conclusion,
            None,
            &at(2),
        );
        assert_eq!(changed, ready);
        let read_back = compute(
            Some(&changed),
            reported_generation(Some(2), last, false),
            &conclusion,
            None,
            &at(3),
        );
        assert_eq!(read_back.observed_generation, Some(2));
        assert_eq!(condition(&read_back, READY).observed_generation, Some(2));
    }

    #[test]
    fn work_in_progress_initializes_then_reconciles() {
        let d = Decision::Wait {
            reason: Reason::Forming,
            message: "meeting".into(),
        };
        let first = decided(None, &d, None, 1);
        assert_eq!(first.state, Some(ClusterState::Initializing));
        assert_eq!(condition(&first, PROGRESSING).reason, "Forming");
        let ready = decided(Some(&first), &Decision::Steady(health()), None, 2);
        let moving = Decision::Wait {
            reason: Reason::MigratingSlots,
            message: "moving".into(),
        };
        let later = compute(
            Some(&ready),
            Some(2),
            &PassConclusion::Decided {
                decision: &moving,
                health: None,
            },
            None,
            &at(3),
        );
        assert_eq!(
            (later.state, later.reason.as_deref()),
            (Some(ClusterState::Reconciling), Some("MigratingSlots"))
        );
        assert_eq!(
            (later.shards, later.ready_shards),
            (3, 3),
            "counts stand until Valkey is read again"
        );
    }

    #[test]
    fn blocked_is_degraded_and_lost_slots_are_failed() {
        let d = Decision::Blocked {
            reason: Reason::DrainBlocked,
            message: "cannot drain".into(),
        };
        let s = decided(None, &d, None, 1);
        assert_eq!(s.state, Some(ClusterState::Degraded));
        assert_eq!(condition(&s, DEGRADED).reason, "DrainBlocked");
        let lost = Decision::Blocked {
            reason: Reason::SlotsLost,
            message: "gone".into(),
        };
        let s = decided(None, &lost, None, 1);
        assert_eq!(s.state, Some(ClusterState::Failed));
        let p = PassConclusion::Problem {
            problem: Problem {
                reason: StatusReason::PasswordSecretNotFound,
                message: "Secret x is missing".into(),
            },
            health: None,
        };
        let s = compute(None, Some(1), &p, None, &at(1));
        assert_eq!(
            (s.state, s.reason.as_deref()),
            (Some(ClusterState::Degraded), Some("PasswordSecretNotFound"))
        );
    }

    #[test]
    fn counts_follow_valkey_while_work_is_in_progress() {
        let ready = decided(None, &Decision::Steady(health()), None, 1);
        let hurt = Health {
            ready_shards: 2,
            replicas_in_sync: 2,
            ..health()
        };
        let waiting = Decision::Wait {
            reason: Reason::ReplicaSyncing,
            message: "c-1-1 is syncing".into(),
        };
        let s = decided(Some(&ready), &waiting, Some(hurt.clone()), 2);
        assert_eq!((s.shards, s.ready_shards), (3, 2));
        let stuck = compute(
            Some(&s),
            Some(1),
            &PassConclusion::Problem {
                problem: Problem {
                    reason: StatusReason::Unschedulable,
                    message: "c-1-1 cannot be scheduled".into(),
                },
                health: Some(Health {
                    ready_shards: 1,
                    ..hurt
                }),
            },
            None,
            &at(3),
        );
        assert_eq!((stuck.shards, stuck.ready_shards), (3, 1));
        assert_eq!(stuck.state, Some(ClusterState::Degraded));
    }

    #[test]
    fn a_pass_where_no_member_answered_keeps_the_last_counts() {
        let ready = decided(None, &Decision::Steady(health()), None, 1);
        let blind = Decision::Wait {
            reason: Reason::WaitingForNodes,
            message: "nobody answers".into(),
        };
        let s = compute(
            Some(&ready),
            Some(1),
            &PassConclusion::Decided {
                decision: &blind,
                health: Some(Health {
                    shards: 0,
                    ready_shards: 0,
                    slots_assigned: 0,
                    replicas_in_sync: 0,
                    nodes: 0,
                    ..health()
                }),
            },
            None,
            &at(2),
        );
        assert_eq!((s.shards, s.ready_shards), (3, 3));
    }

    /// Every member came back empty: the counts say 0 shards serve slots, but the cluster stays
    /// formed, so the slots are lost data (the engine waits for the user's word), never a
    /// formation to redo.
    #[test]
    fn a_formed_cluster_stays_formed_when_every_member_comes_back_empty() {
        let ready = decided(None, &Decision::Steady(health()), None, 1);
        assert_eq!(ready.formed, Some(true));
        let empty = Health {
            shards: 0,
            ready_shards: 0,
            slots_assigned: 0,
            ..health()
        };
        let wait = Decision::Wait {
            reason: Reason::Converging,
            message: "every member is new".into(),
        };
        let s = decided(Some(&ready), &wait, Some(empty), 2);
        assert_eq!(s.shards, 0, "the counts say what Valkey says");
        assert_eq!(s.formed, Some(true));
        let fresh = decided(None, &wait, Some(health()), 1);
        assert_eq!(
            decided(
                None,
                &wait,
                Some(Health {
                    shards: 0,
                    ..health()
                }),
                1
            )
            .formed,
            None
        );
        assert_eq!(fresh.formed, Some(true));
    }

    /// An acknowledgement of a loss is in use from the pass that acts on it until the cluster is
    /// whole again; then it is spent; removed from the spec, it is forgotten.
    #[test]
    fn an_acknowledged_loss_is_spent_once_the_cluster_is_whole() {
        let acted = accepted_loss(None, Some("0-99"), true, false);
        assert_eq!(
            acted,
            Some(AcceptedLoss {
                slots: "0-99".into(),
                spent: false
            })
        );
        let repairing = accepted_loss(acted.as_ref(), Some("0-99"), false, false);
        assert_eq!(repairing, acted, "in use while the repair goes on");
        let whole = accepted_loss(repairing.as_ref(), Some("0-99"), false, true);
        assert_eq!(whole.as_ref().map(|a| a.spent), Some(true));
        assert_eq!(
            accepted_loss(whole.as_ref(), Some("0-99"), false, true),
            whole,
            "spent stays spent"
        );
        assert_eq!(accepted_loss(whole.as_ref(), None, false, true), None);
        assert_eq!(accepted_loss(None, Some("0-99"), false, true), None);
    }
}
