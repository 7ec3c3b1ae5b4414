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
    /// Per Lease: when this process last wrote it as its holder (created, renewed, taken).
    written: Mutex<HashMap<String, Instant>>,
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
            written: Mutex::new(HashMap::new()),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Holds the Lease `name` in `namespace` (created owned by `owner`), or says who does.
    ///
    /// When the API fails, a Lease this process wrote as its holder less than two thirds of the
    /// duration ago is still held: no other claimant may take it before it has seen the Lease
    /// unchanged for a whole duration, so acting on the object meanwhile is as safe as with a
    /// Lease just read. (What protects the object's data must not stop because the API does.)
    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
        owner: OwnerReference,
    ) -> Result<Claim, kube::Error> {
        let key = format!("{namespace}/{name}");
        match self.claim_now(namespace, name, owner).await {
            Ok(claim) => Ok(claim),
            Err(error) if self.written_within(&key, self.duration * 2 / 3) => {
                tracing::warn!(lease = %key, %error, "the Lease could not be read or renewed; it is still held (renewed recently)");
                Ok(Claim::Held)
            }
            Err(error) => Err(error),
        }
    }

    /// Whether this process wrote the Lease `key` as its holder within `within`.
    fn written_within(&self, key: &str, within: Duration) -> bool {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .is_some_and(|at| at.elapsed() < within)
    }

    fn note_written(&self, key: &str, at: Instant) {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_owned(), at);
    }

    async fn claim_now(
        &self,
        namespace: &str,
        name: &str,
        owner: OwnerReference,
    ) -> Result<Claim, kube::Error> {
        let key = format!("{namespace}/{name}");
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let lease = api.get_opt(name).await?;
        let since = self.observe(namespace, name, lease.as_ref());
        let now = Timestamp::now();
        let held_by_other = |holder: String, retry_in: Duration| Claim::HeldByOther {
            holder,
            retry_in: retry_in.max(Duration::from_secs(1)),
        };
        // Timed from before the write: the Lease says it was renewed no earlier than this.
        let writing = Instant::now();
        let written = |result: Result<Lease, kube::Error>| match result {
            Ok(_) => {
                self.note_written(&key, writing);
                Ok(Claim::Held)
            }
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
        let key = format!("{namespace}/{name}");
        self.lock().remove(&key);
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key);
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

    /// The API failing does not take a claim away from its holder while no other claimant could
    /// have taken it (two thirds of the duration after its last write); after that it does.
    #[tokio::test]
    async fn a_claim_written_recently_survives_a_failing_api() {
        use crate::testing::mock_client;
        use http::{Method, StatusCode};
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, "me/all-namespaces".into());
        let owner = OwnerReference {
            api_version: "valkey.io/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "cache".into(),
            uid: "0000-1".into(),
            controller: Some(true),
            ..Default::default()
        };
        const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/prod/leases";
        let failure = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
        let script = tokio::spawn(async move {
            api.expect(Method::GET, &format!("{LEASE}/cache-claim"))
                .await
                .not_found();
            api.expect(Method::POST, LEASE).await.echo();
            for _ in 0..2 {
                api.expect(Method::GET, &format!("{LEASE}/cache-claim"))
                    .await
                    .answer(StatusCode::INTERNAL_SERVER_ERROR, &failure);
            }
            api.done().await;
        });
        let claim = || claims.claim("prod", "cache-claim", owner.clone());
        assert_eq!(claim().await.ok(), Some(Claim::Held));
        assert_eq!(
            claim().await.ok(),
            Some(Claim::Held),
            "written just now: still held"
        );
        // As if the last write were a whole duration ago.
        let long_ago = Instant::now()
            .checked_sub(CLAIM_DURATION)
            .unwrap_or_else(Instant::now);
        claims.note_written("prod/cache-claim", long_ago);
        assert!(claim().await.is_err(), "too long ago: the failure stands");
        script.await.unwrap_or_else(|e| panic!("{e}"));
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
