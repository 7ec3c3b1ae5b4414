//! When a pass looks at its node again, with no watch event to wake it.
//!
//! A ready node is re-read every [`READY`]: Valkey announces a failover (its role) through no
//! Kubernetes event. A node that is not ready is re-read every [`NOT_READY`] while it has been
//! so for less than [`NOT_READY_FOR_LONG`]: a pod starting, a server loading its data, a failover,
//! a short cut, where the time to heal is what matters. Once it has been not ready for longer,
//! every [`NOT_READY_LONG`]: what would make it ready now wakes the pass by itself (the pod
//! starting or its readiness changing, its IP, a Secret, a spec change), and a pass over a server
//! that does not answer waits for its connect timeout, so a fleet of such nodes re-read every 5 s
//! kept hundreds of passes in flight at rest. What only a re-read notices (a cut between this
//! controller and a pod whose own readiness probe still passes) is noticed within
//! [`NOT_READY_LONG`] then.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use plumbing::conditions::find_condition;
use valkey_api::v1alpha1::ValkeyNodeStatus;

use crate::status;

/// How often a ready node is re-read.
pub const READY: Duration = Duration::from_secs(10);
/// How often a node that went not ready a short while ago is re-read.
pub const NOT_READY: Duration = Duration::from_secs(5);
/// How long a node is not ready before it is re-read every [`NOT_READY_LONG`] only.
pub const NOT_READY_FOR_LONG: Duration = Duration::from_secs(60);
/// How often a node that has been not ready for long is re-read.
pub const NOT_READY_LONG: Duration = Duration::from_secs(30);

/// When to look at a node again after a pass that left it with `status`, at `now`. The time it
/// went not ready is its Ready condition's last transition, which the status keeps while the
/// condition holds the same value (a restarted controller reads it back).
pub fn after(status: &ValkeyNodeStatus, now: &Time) -> Duration {
    if status.ready {
        return READY;
    }
    let since = status
        .conditions
        .as_deref()
        .and_then(|conditions| find_condition(conditions, status::READY))
        .map(|ready| ready.last_transition_time.0);
    let not_ready_for = since.and_then(|since| {
        let elapsed = now.0.duration_since(since);
        Duration::try_from(elapsed).ok()
    });
    match not_ready_for {
        Some(long) if long >= NOT_READY_FOR_LONG => NOT_READY_LONG,
        _ => NOT_READY,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap_or_else(|e| panic!("{e}")))
    }

    fn status(ready: bool, ready_since: Option<i64>) -> ValkeyNodeStatus {
        ValkeyNodeStatus {
            ready,
            conditions: ready_since.map(|since| {
                vec![Condition {
                    type_: status::READY.into(),
                    status: if ready { "True" } else { "False" }.into(),
                    reason: "ServerUnreachable".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: at(since),
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_ready_node_is_read_again_every_ten_seconds() {
        assert_eq!(after(&status(true, Some(0)), &at(1_000)), READY);
    }

    #[test]
    fn a_node_not_ready_for_a_short_while_is_read_again_soon() {
        assert_eq!(after(&status(false, Some(1_000)), &at(1_000)), NOT_READY);
        assert_eq!(after(&status(false, Some(1_000)), &at(1_059)), NOT_READY);
    }

    #[test]
    fn a_node_not_ready_for_long_is_read_again_less_often() {
        assert_eq!(
            after(&status(false, Some(1_000)), &at(1_060)),
            NOT_READY_LONG
        );
        assert_eq!(after(&status(false, Some(0)), &at(86_400)), NOT_READY_LONG);
    }

    #[test]
    fn without_a_ready_condition_or_with_a_clock_behind_it_a_node_is_read_again_soon() {
        // No condition yet (a first pass), or a transition in the future (a clock that went
        // back): nothing says the node has been not ready for long.
        assert_eq!(after(&status(false, None), &at(1_000)), NOT_READY);
        assert_eq!(after(&status(false, Some(2_000)), &at(1_000)), NOT_READY);
    }
}
