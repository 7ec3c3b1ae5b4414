//! The election loop: campaign until this replica leads, then renew until it loses the Lease or
//! is asked to step down.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};

use super::decide::{AcquireReason, Decision, decide, expiry_confirmed, lease_duration};
use super::record;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("invalid leader election timing: {0}")]
    InvalidTiming(&'static str),
    #[error("request on Lease {name} failed: {source}")]
    Kube {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Lease {name} changed between read and write")]
    Conflict { name: String },
    #[error("leader election ended before this replica led")]
    NotAcquired,
}

/// The periods of the election. Defaults: a 15 s lease renewed every 5 s; a leader that cannot
/// renew for 10 s gives up, 5 s before any standby could take over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// leaseDurationSeconds written into the Lease.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_interval: Duration,
    /// A leader that has not renewed for this long stops leading.
    pub renew_deadline: Duration,
    /// How often a standby polls, and how soon a failed renewal is retried.
    pub retry_interval: Duration,
    /// Upper bound of one read-and-write step against the API.
    pub request_timeout: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
            retry_interval: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl LeaseTiming {
    /// The leader must give up before a standby may take over, and must try to renew before
    /// giving up; leaseDurationSeconds is written in whole seconds.
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.lease_duration.as_secs() == 0 || self.lease_duration.subsec_nanos() != 0 {
            return Err(LeaderError::InvalidTiming(
                "lease duration must be a whole number of seconds",
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(LeaderError::InvalidTiming(
                "renew deadline must be shorter than the lease duration",
            ));
        }
        if self.renew_interval >= self.renew_deadline {
            return Err(LeaderError::InvalidTiming(
                "renew interval must be shorter than the renew deadline",
            ));
        }
        if self.retry_interval.is_zero() || self.request_timeout.is_zero() {
            return Err(LeaderError::InvalidTiming(
                "retry interval and request timeout must be positive",
            ));
        }
        Ok(())
    }
}

/// Where this replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderState {
    /// Campaigning: another replica leads, or the Lease could not be read yet.
    Standby,
    /// This replica holds the Lease and may reconcile.
    Leading,
    /// This replica led and lost the Lease; it must stop reconciling and exit. Final.
    Lost,
    /// The elector was stopped (after releasing the Lease if it held it). Final.
    Stopped,
}

/// Campaigns for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
    observed: Observed,
}

/// The resourceVersion last read and when this process first saw it.
struct Observed {
    resource_version: Option<String>,
    since: Instant,
}

enum Step {
    Leading,
    Standby { holder: Option<String> },
}

impl LeaderElector {
    /// `identity` must be unique per process: see [`super::default_identity`].
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing: LeaseTiming::default(),
            observed: Observed {
                resource_version: None,
                since: Instant::now(),
            },
        }
    }

    pub fn with_timing(mut self, timing: LeaseTiming) -> Result<Self, LeaderError> {
        timing.validate()?;
        self.timing = timing;
        Ok(self)
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Starts the election in a background task.
    pub fn spawn(self) -> Leadership {
        let (state_tx, state_rx) = watch::channel(LeaderState::Standby);
        let (stop_tx, stop_rx) = oneshot::channel();
        let request_timeout = self.timing.request_timeout;
        let identity = self.identity.clone();
        let task = tokio::spawn(self.run(state_tx, stop_rx));
        Leadership {
            state: state_rx,
            keepalive: None,
            stop: Some(stop_tx),
            task: Some(task),
            identity: Some(identity),
            release_timeout: request_timeout + Duration::from_secs(1),
        }
    }

    async fn run(mut self, state: watch::Sender<LeaderState>, mut stop: oneshot::Receiver<()>) {
        tracing::info!(lease = %self.name, identity = %self.identity, "campaigning for leadership");
        let Some(acquired_at) = self.campaign(&mut stop).await else {
            state.send_replace(LeaderState::Stopped);
            return;
        };
        tracing::info!(lease = %self.name, identity = %self.identity, "acquired leadership");
        state.send_replace(LeaderState::Leading);
        let end = self.hold(&mut stop, acquired_at).await;
        state.send_replace(end);
    }

    /// Steps until this replica leads; `None` when asked to stop first. A stop request never
    /// interrupts a step, so a write that won the Lease is known and released. (A step cut by
    /// the request timeout may have won unseen; the next step then finds its own identity and
    /// renews.)
    async fn campaign(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<Instant> {
        loop {
            let sent = Instant::now();
            match timeout(self.timing.request_timeout, self.step()).await {
                Ok(Ok(Step::Leading)) => {
                    if stop_requested(stop) {
                        self.release().await;
                        return None;
                    }
                    return Some(sent);
                }
                Ok(Ok(Step::Standby { holder })) => {
                    tracing::debug!(lease = %self.name, ?holder, "standing by");
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.name, %error, "election step failed")
                }
                Err(_) => tracing::warn!(lease = %self.name, "election step timed out"),
            }
            tokio::select! {
                biased;
                _ = &mut *stop => return None,
                _ = sleep(self.timing.retry_interval) => {}
            }
        }
    }

    /// Renews until stopped (then releases) or until renewal fails past the deadline or another
    /// replica is found holding the Lease. `last_write` is when the last successful step was
    /// sent: counting from the send, not the answer, keeps the deadline conservative.
    async fn hold(
        &mut self,
        stop: &mut oneshot::Receiver<()>,
        mut last_write: Instant,
    ) -> LeaderState {
        let mut next_attempt = last_write + self.timing.renew_interval;
        loop {
            let deadline = last_write + self.timing.renew_deadline;
            tokio::select! {
                biased;
                _ = &mut *stop => {
                    self.release().await;
                    return LeaderState::Stopped;
                }
                _ = sleep_until(deadline) => {
                    tracing::warn!(lease = %self.name, "could not renew before the deadline; leadership lost");
                    return LeaderState::Lost;
                }
                _ = sleep_until(next_attempt) => {}
            }
            let sent = Instant::now();
            match timeout_at(deadline, self.step()).await {
                Ok(Ok(Step::Leading)) => {
                    last_write = sent;
                    next_attempt = sent + self.timing.renew_interval;
                }
                Ok(Ok(Step::Standby { holder })) => {
                    tracing::warn!(lease = %self.name, ?holder, "another replica holds the Lease; leadership lost");
                    return LeaderState::Lost;
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.name, %error, "renewal failed; retrying");
                    next_attempt = Instant::now() + self.timing.retry_interval;
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "renewal timed out at the deadline; leadership lost");
                    return LeaderState::Lost;
                }
            }
        }
    }

    /// Reads the Lease and acts on [`decide`]. Every write carries the resourceVersion read, so
    /// of two candidates acting on the same read at most one succeeds.
    async fn step(&mut self) -> Result<Step, LeaderError> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.kube_error(e))?;
        self.observe(lease.as_ref());
        let now = Timestamp::now();
        let duration = self.timing.lease_duration;
        match (
            decide(lease.as_ref(), now, &self.identity, duration),
            lease.as_ref(),
        ) {
            (Decision::Wait { holder, .. }, _) => Ok(Step::Standby {
                holder: Some(holder),
            }),
            (_, None) => {
                let body = record::created(&self.name, &self.identity, now, duration);
                self.write(self.api.create(&PostParams::default(), &body).await)
            }
            (Decision::Renew, Some(current)) => {
                let body = record::renewed(current, now, duration);
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &body)
                    .await
                {
                    Ok(_) => Ok(Step::Leading),
                    // Someone wrote the Lease since the read; the next step reads who holds it.
                    Err(e) if is_conflict(&e) => Err(LeaderError::Conflict {
                        name: self.name.clone(),
                    }),
                    Err(e) => Err(self.kube_error(e)),
                }
            }
            (Decision::Acquire(AcquireReason::Expired { previous }), Some(current))
                if !expiry_confirmed(
                    self.observed.since.elapsed(),
                    lease_duration(current, duration),
                ) =>
            {
                Ok(Step::Standby {
                    holder: Some(previous),
                })
            }
            (Decision::Acquire(reason), Some(current)) => {
                tracing::debug!(lease = %self.name, ?reason, "taking the Lease");
                let body = record::taken(current, &self.identity, now, duration);
                self.write(
                    self.api
                        .replace(&self.name, &PostParams::default(), &body)
                        .await,
                )
            }
        }
    }

    /// A won write leads; a lost race (another candidate created or wrote first) stands by.
    fn write(&self, result: Result<Lease, kube::Error>) -> Result<Step, LeaderError> {
        match result {
            Ok(_) => Ok(Step::Leading),
            Err(e) if is_conflict(&e) => Ok(Step::Standby { holder: None }),
            Err(e) => Err(self.kube_error(e)),
        }
    }

    fn observe(&mut self, lease: Option<&Lease>) {
        let resource_version = lease.and_then(|l| l.metadata.resource_version.clone());
        if resource_version != self.observed.resource_version {
            self.observed = Observed {
                resource_version,
                since: Instant::now(),
            };
        }
    }

    /// Clears holderIdentity if this replica still holds the Lease; best effort, bounded.
    async fn release(&mut self) {
        let attempt = async {
            let Some(current) = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|e| self.kube_error(e))?
            else {
                return Ok(false);
            };
            let holder = current
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            if holder != Some(self.identity.as_str()) {
                return Ok(false);
            }
            let body = record::released(&current, Timestamp::now());
            self.api
                .replace(&self.name, &PostParams::default(), &body)
                .await
                .map_err(|e| self.kube_error(e))?;
            Ok::<_, LeaderError>(true)
        };
        match timeout(self.timing.request_timeout, attempt).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.name, "released the Lease"),
            Ok(Ok(false)) => {
                tracing::info!(lease = %self.name, "Lease not held; nothing to release")
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.name, %error, "could not release the Lease; it will expire")
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "releasing the Lease timed out; it will expire")
            }
        }
    }

    fn kube_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Kube {
            name: self.name.clone(),
            source,
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

/// A stop request, or a dropped [`Leadership`] handle, both mean stop.
fn stop_requested(stop: &mut oneshot::Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty))
}

/// The caller's view of the election.
///
/// Usage: await [`Leadership::acquired`] before starting the controller; stop reconciling when
/// [`Leadership::lost_owned`] resolves and exit the process (non-zero), so that it restarts as a
/// standby; on graceful shutdown, after the controller has drained, call
/// [`Leadership::release`] so a standby takes over at once. Dropping the handle also asks the
/// elector to release, best effort.
pub struct Leadership {
    state: watch::Receiver<LeaderState>,
    /// Keeps the channel open for [`Leadership::always`], which has no elector task.
    keepalive: Option<Arc<watch::Sender<LeaderState>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    identity: Option<String>,
    release_timeout: Duration,
}

impl Leadership {
    /// Leadership without election (`--leader-elect` off): leading from the start, never lost.
    pub fn always() -> Self {
        let (sender, state) = watch::channel(LeaderState::Leading);
        Self {
            state,
            keepalive: Some(Arc::new(sender)),
            stop: None,
            task: None,
            identity: None,
            release_timeout: Duration::ZERO,
        }
    }

    /// The elector's identity; `None` without election.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    pub fn state(&self) -> LeaderState {
        *self.state.borrow()
    }

    pub fn is_leader(&self) -> bool {
        self.state() == LeaderState::Leading
    }

    /// Follows every state change (for metrics and readiness).
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }

    /// Resolves once this replica leads; an error when the election ended first.
    pub async fn acquired(&self) -> Result<(), LeaderError> {
        let mut state = self.state.clone();
        match state.wait_for(|s| *s != LeaderState::Standby).await {
            Ok(s) if *s == LeaderState::Leading => Ok(()),
            _ => Err(LeaderError::NotAcquired),
        }
    }

    /// Resolves when this replica stops leading (lost, stopped, or the elector died). Never
    /// resolves without election. Fits `Controller::graceful_shutdown_on`.
    pub fn lost_owned(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut state = self.state.clone();
        let keepalive = self.keepalive.clone();
        async move {
            let _keepalive = keepalive;
            // A closed channel means the elector task is gone: no longer leading either.
            let _ = state
                .wait_for(|s| matches!(s, LeaderState::Lost | LeaderState::Stopped))
                .await;
        }
    }

    /// Steps down: clears holderIdentity if this replica holds the Lease and waits (bounded) for
    /// the elector to finish. Call after the controller has stopped reconciling.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take()
            && timeout(self.release_timeout, task).await.is_err()
        {
            tracing::warn!("leader elector did not stop in time");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_timing_is_valid_and_safe() {
        let timing = LeaseTiming::default();
        assert!(timing.validate().is_ok());
        assert_eq!(timing.lease_duration, Duration::from_secs(15));
        // A leader gives up with a margin before standbys may take over.
        assert!(timing.renew_deadline + timing.retry_interval < timing.lease_duration);
    }

    #[test]
    fn unsafe_timing_is_rejected() {
        let base = LeaseTiming::default();
        let deadline_too_long = LeaseTiming {
            renew_deadline: Duration::from_secs(15),
            ..base
        };
        assert!(deadline_too_long.validate().is_err());
        let renew_too_late = LeaseTiming {
            renew_interval: Duration::from_secs(10),
            ..base
        };
        assert!(renew_too_late.validate().is_err());
        let fractional = LeaseTiming {
            lease_duration: Duration::from_millis(15_500),
            ..base
        };
        assert!(fractional.validate().is_err());
        let no_retry = LeaseTiming {
            retry_interval: Duration::ZERO,
            ..base
        };
        assert!(no_retry.validate().is_err());
    }

    #[tokio::test]
    async fn without_election_always_leads_and_never_loses() -> Result<(), LeaderError> {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert_eq!(leadership.identity(), None);
        timeout(Duration::from_secs(5), leadership.acquired())
            .await
            .map_err(|_| LeaderError::NotAcquired)??;
        let lost = leadership.lost_owned();
        assert!(timeout(Duration::from_millis(50), lost).await.is_err());
        leadership.release().await;
        Ok(())
    }

    #[tokio::test]
    async fn lost_fires_when_the_state_says_so() {
        let (sender, state) = watch::channel(LeaderState::Leading);
        let leadership = Leadership {
            state,
            keepalive: None,
            stop: None,
            task: None,
            identity: Some("me".into()),
            release_timeout: Duration::ZERO,
        };
        let lost = tokio::spawn(leadership.lost_owned());
        sender.send_replace(LeaderState::Lost);
        assert!(timeout(Duration::from_secs(5), lost).await.is_ok());
        assert!(!leadership.is_leader());
        assert!(matches!(
            leadership.acquired().await,
            Err(LeaderError::NotAcquired)
        ));
    }

    #[test]
    fn conflicts_and_races_are_recognised() {
        let conflict = kube::Error::Api(Box::new(
            kube::core::Status::failure("changed", "Conflict").with_code(409),
        ));
        let exists = kube::Error::Api(Box::new(
            kube::core::Status::failure("exists", "AlreadyExists").with_code(409),
        ));
        let forbidden = kube::Error::Api(Box::new(
            kube::core::Status::failure("no", "Forbidden").with_code(403),
        ));
        assert!(is_conflict(&conflict));
        assert!(is_conflict(&exists));
        assert!(!is_conflict(&forbidden));
    }
}
