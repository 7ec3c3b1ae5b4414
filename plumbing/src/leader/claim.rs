//! One active controller per object, whatever the releases: before a pass acts on an object it
//! holds that object's Lease (beside it, in its namespace, owned by it). Two releases whose watch
//! scopes overlap (one watching every namespace, another one of them, or two installs of the same
//! scope) each run their own elected leader, so leader election alone would let two controllers
//! drive one object; with the claim, the second one leaves the object alone and says who holds it.
//!
//! The same rules as the election ([`decide`]): a Lease is taken when missing, free, or expired
//! and seen unchanged for a full duration; every write carries the resourceVersion read. The
//! holder renews at most every third of the duration, so a steady object costs one small write
//! per renewal. A claimant's identity is stable across restarts of the same process (its pod name,
//! or host, and its watch scope): a restarted controller takes its objects back at once, while a
//! different one waits for the Lease to expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

use super::decide::{AcquireReason, Decision, decide, expiry_confirmed, lease_duration};
use super::record::{self, POD_NAME_ENV};

/// How long a claim lasts without renewal.
pub const CLAIM_DURATION: Duration = Duration::from_secs(45);

/// The outcome of claiming an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This controller holds the object: it may act on it.
    Held,
    /// Another controller holds it; look again after `retry_in`.
    HeldByOther { holder: String, retry_in: Duration },
}

/// The claims of one controller process.
pub struct Claims {
    client: kube::Client,
    identity: String,
    duration: Duration,
    /// Per Lease (namespace/name): the resourceVersion last read and since when.
    observed: Mutex<HashMap<String, (Option<String>, Instant)>>,
}

/// A claimant identity stable across restarts: `$POD_NAME` (or the host name) and the watch scope.
pub fn claim_identity(scope: Option<&str>) -> String {
    let base = std::env::var(POD_NAME_ENV)
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{base}/{}", scope.unwrap_or("all-namespaces"))
}

impl Claims {
    pub fn new(client: kube::Client, identity: String) -> Self {
        Self {
            client,
            identity,
            duration: CLAIM_DURATION,
            observed: Mutex::new(HashMap::new()),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Holds the Lease `name` in `namespace` (created owned by `owner`), or says who does.
    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
        owner: OwnerReference,
    ) -> Result<Claim, kube::Error> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let lease = api.get_opt(name).await?;
        let since = self.observe(namespace, name, lease.as_ref());
        let now = Timestamp::now();
        let held_by_other = |holder: String, retry_in: Duration| Claim::HeldByOther {
            holder,
            retry_in: retry_in.max(Duration::from_secs(1)),
        };
        let written = |result: Result<Lease, kube::Error>| match result {
            Ok(_) => Ok(Claim::Held),
            // Someone wrote it since the read: theirs for now; the next pass reads who.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(held_by_other(
                "another controller (it changed while being claimed)".into(),
                Duration::from_secs(2),
            )),
            Err(e) => Err(e),
        };
        match (
            decide(lease.as_ref(), now, &self.identity, self.duration),
            lease.as_ref(),
        ) {
            (Decision::Wait { holder, expires_in }, _) => Ok(held_by_other(holder, expires_in)),
            (_, None) => {
                let mut body = record::created(name, &self.identity, now, self.duration);
                body.metadata.owner_references = Some(vec![owner]);
                written(api.create(&PostParams::default(), &body).await)
            }
            (Decision::Renew, Some(current)) => {
                if !renewal_due(current, now, self.duration) {
                    return Ok(Claim::Held);
                }
                let body = record::renewed(current, now, self.duration);
                written(api.replace(name, &PostParams::default(), &body).await)
            }
            (Decision::Acquire(AcquireReason::Expired { previous }), Some(current))
                if !expiry_confirmed(since.elapsed(), lease_duration(current, self.duration)) =>
            {
                Ok(held_by_other(previous, Duration::from_secs(5)))
            }
            (Decision::Acquire(_), Some(current)) => {
                let body = record::taken(current, &self.identity, now, self.duration);
                written(api.replace(name, &PostParams::default(), &body).await)
            }
        }
    }

    /// Forgets what it read of a Lease whose object is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&format!("{namespace}/{name}"));
    }

    /// Since when the Lease has had the resourceVersion it has now, as this process saw it.
    fn observe(&self, namespace: &str, name: &str, lease: Option<&Lease>) -> Instant {
        let version = lease.and_then(|l| l.metadata.resource_version.clone());
        let mut observed = self.lock();
        let entry = observed
            .entry(format!("{namespace}/{name}"))
            .or_insert_with(|| (version.clone(), Instant::now()));
        if entry.0 != version {
            *entry = (version, Instant::now());
        }
        entry.1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<String>, Instant)>> {
        // The map holds no invariant a panicking holder could break.
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether the holder should renew now: its last renewal is older than a third of the duration.
fn renewal_due(lease: &Lease, now: Timestamp, duration: Duration) -> bool {
    let last = lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()));
    match last {
        None => true,
        Some(time) => {
            let age = now.duration_since(time.0);
            Duration::try_from(age).unwrap_or(Duration::ZERO) >= duration / 3
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn renewed_at(second: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(
                    Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH),
                )),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_holder_renews_only_every_third_of_the_duration() {
        let now = Timestamp::from_second(1000).unwrap_or(Timestamp::UNIX_EPOCH);
        assert!(!renewal_due(&renewed_at(990), now, CLAIM_DURATION));
        assert!(renewal_due(&renewed_at(985), now, CLAIM_DURATION));
        assert!(renewal_due(&Lease::default(), now, CLAIM_DURATION));
    }

    #[test]
    fn identities_name_the_process_and_its_scope() {
        assert!(claim_identity(Some("team-a")).ends_with("/team-a"));
        assert!(claim_identity(None).ends_with("/all-namespaces"));
        assert_eq!(
            claim_identity(Some("x")),
            claim_identity(Some("x")),
            "stable"
        );
    }
}
