//! What stops a pass before its engine may apply every rule: a problem a person must fix (a
//! Secret missing, a setting this version cannot serve, an unreadable spec), or the Kubernetes
//! API failing (an apply, a read). Either stops the stages that need what failed (a member's
//! ValkeyNode cannot be built without its Secrets), never the engine's data-safety rules: every
//! parent's pass runs those all the same, with the credentials it last knew (see each kind's
//! `protect`), so a primary back without its data still hands over while a Secret is missing.

use std::time::Duration;
use valkey_api::v1alpha1::StatusReason;

use plumbing::ObjectKey;
use plumbing::backoff::Backoff;

use super::conditions::Problem;
use super::error::Error;

/// How soon a pass stopped by a problem looks again (the safety rules with it).
pub const RETRY_PROBLEM: Duration = Duration::from_secs(15);
/// The longest wait after an API failure: the back-off grows, but never leaves the safety
/// rules unrun for longer.
const MAX_RETRY_AFTER_ERROR: Duration = Duration::from_secs(30);
/// API failures in a row of a parent's stages before its status says so: one or two are the
/// noise of an API server restarting.
const ERRORS_BEFORE_REPORTED: u32 = 3;

/// Why a pass could not get in step with the spec.
#[derive(Debug)]
pub struct Stop {
    /// What the status says; `None` for an API failure not yet worth a person's attention.
    pub problem: Option<Problem>,
    /// The failure behind it, counted and logged as a failed pass.
    pub error: Option<Box<Error>>,
    /// When to look again, unless the engine acted.
    pub requeue: Duration,
}

impl Stop {
    /// A problem a person must fix.
    pub fn problem(problem: Problem) -> Self {
        Self {
            problem: Some(problem),
            error: None,
            requeue: RETRY_PROBLEM,
        }
    }

    /// The API failed: retried after the parent's back-off (capped), and reported from the third
    /// failure in a row.
    pub fn error(error: Error, failures: &Backoff, key: &ObjectKey) -> Self {
        let requeue = failures.failed(key).min(MAX_RETRY_AFTER_ERROR);
        let problem = (failures.failures(key) >= ERRORS_BEFORE_REPORTED).then(|| Problem {
            reason: StatusReason::KubernetesApiFailing,
            message: format!(
                "{error}. The operator retries, at most every {}s; meanwhile it still protects \
                 the data (failovers, a primary back without its data) but changes nothing else.",
                MAX_RETRY_AFTER_ERROR.as_secs()
            ),
        });
        Self {
            problem,
            error: Some(Box::new(error)),
            requeue,
        }
    }
}

impl Stop {
    /// Counts and logs the API failure behind the stop, if any, as a failed pass of `controller`.
    pub fn announce(&self, metrics: &plumbing::Metrics, controller: &str) {
        if let Some(error) = &self.error {
            metrics.reconcile_failed(
                controller,
                plumbing::ReconcileError::metric_label(error.as_ref()),
            );
            tracing::warn!(%error, retry_in = ?self.requeue, "a stage failed; only the data-safety rules run this pass");
        }
    }
}

/// The stage's result as a [`Stop`]: a problem, or an API failure.
pub fn stopped<T>(
    result: Result<Result<T, Problem>, Error>,
    failures: &Backoff,
    key: &ObjectKey,
) -> Result<T, Stop> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(problem)) => Err(Stop::problem(problem)),
        Err(error) => Err(Stop::error(error, failures, key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_failures_are_retried_within_half_a_minute_and_reported_from_the_third() {
        let failures = Backoff::default();
        let key = ObjectKey::new("prod", "cache");
        let error = || Error::Invalid("reading Secret x: connection refused".into());
        let stops: Vec<Stop> = (0..8)
            .map(|_| Stop::error(error(), &failures, &key))
            .collect();
        assert!(stops.iter().all(|s| s.requeue <= MAX_RETRY_AFTER_ERROR));
        assert!(stops[..2].iter().all(|s| s.problem.is_none()));
        let third = stops[2].problem.as_ref().map(|p| p.reason.as_str());
        assert_eq!(third, Some("KubernetesApiFailing"));
        assert_eq!(
            stops[2].problem, stops[7].problem,
            "the same words each time: one status write"
        );
        failures.succeeded(&key);
        assert!(Stop::error(error(), &failures, &key).problem.is_none());
    }
}
