//! One active controller per object, whatever the releases: before a pass acts on an object it
//! holds that object's claim. Two releases whose watch scopes overlap (one watching every
//! namespace, another one of them, or two installs of the same scope) each run their own elected
//! leader, so leader election alone would let two controllers drive one object; with the claim,
//! the second one leaves the object alone and says who holds it.
//!
//! A claim is recorded once, and kept alive per process rather than per object:
//! - **The object's Lease** (beside it, owned by it) names its holder. It is written when the
//!   claim is taken, and not renewed.
//! - **The claimant's heartbeat**: one Lease per controller process, kind and namespace in which it
//!   holds claims ([`heartbeat_name`]), renewed every third of [`CLAIM_DURATION`]. A fleet at rest
//!   costs that one small write per namespace and third of a minute, not one per object.
//! - **Taking a held claim over** needs the holder to be gone: its heartbeat (and the object's
//!   Lease, which an older release renews itself) expired by its renewTime, and both seen
//!   unchanged for a whole duration on the taker's own clock. Every write carries the
//!   resourceVersion read, so two claimants never both win.
//! - **The holder stops acting** once its heartbeat has gone two thirds of the duration without a
//!   successful write (no other claimant can take over sooner), and after such a lapse it confirms
//!   each claim again with a write of the object's Lease before it acts on the object: if someone
//!   took it meanwhile, that write fails and the holder leaves the object.
//!
//! A claimant's identity is stable across restarts of the same process (its pod name, or host,
//! and its watch scope): a restarted controller takes its objects back at once, while a different
//! one waits for the holder's heartbeat to expire (a takeover after the holder died costs one
//! duration, 45 s, plus the next pass).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use super::decide::{Decision, decide, expiry_confirmed, lease_duration};
use super::record::{self, POD_NAME_ENV};

/// How long a claimant's heartbeat lasts without renewal.
pub const CLAIM_DURATION: Duration = Duration::from_secs(45);

/// The label every heartbeat Lease carries, so that the heartbeats of processes gone without a
/// goodbye (killed, their node lost) can be found and deleted: a heartbeat owns nothing and
/// nothing owns it, and each new pod of a Deployment is a new claimant.
pub const HEARTBEAT_LABEL: &str = "valkey.io/claimant-heartbeat";

/// How long a heartbeat stays expired before any claimant deletes it. Far longer than the
/// duration: deleting a heartbeat never lets a claim be taken sooner (a missing heartbeat must be
/// seen missing for a whole duration, like an expired one), so this only bounds the litter.
pub const STALE_HEARTBEAT_AFTER: Duration = Duration::from_secs(15 * 60);

/// The outcome of claiming an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This controller holds the object: it may act on it.
    Held,
    /// Another controller holds it; look again after `retry_in`.
    HeldByOther { holder: String, retry_in: Duration },
}

/// The claims of one controller (one kind) of one process. Clones share the claims: the
/// controller's passes use one, its shutdown [`Claims::release`]s through another.
#[derive(Clone)]
pub struct Claims {
    client: kube::Client,
    identity: String,
    /// The kind of object claimed (`cluster`, `replication`, `backup`): part of the heartbeat's
    /// name, so the controllers of one process keep one heartbeat each.
    kind: String,
    duration: Duration,
    /// Per Lease (namespace/name): the resourceVersion last read and since when.
    observed: Arc<Mutex<HashMap<String, Seen>>>,
    /// Per namespace: this process's heartbeat there.
    beats: Arc<Mutex<HashMap<String, Beat>>>,
    /// Per object Lease (namespace/name): the heartbeat epoch in which this process last
    /// confirmed the claim. Valid while the namespace's epoch has not moved on.
    held: Arc<Mutex<HashMap<String, u64>>>,
}

/// A Lease's resourceVersion as last read, and since when it has had it.
type Seen = (Option<String>, Instant);

/// A heartbeat as this process last wrote it.
#[derive(Clone, Default)]
struct Beat {
    /// The Lease as the API server returned it after the last successful write.
    lease: Option<Lease>,
    /// When that write was sent.
    written: Option<Instant>,
    /// Moves on whenever the heartbeat went two thirds of the duration without a write: the
    /// claims confirmed in an earlier epoch must be confirmed again.
    epoch: u64,
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

/// The name of the heartbeat Lease of `identity`'s controller of `kind`: identities hold `/`
/// and may be long, so a stable hash of them (FNV-1a) names it.
pub fn heartbeat_name(kind: &str, identity: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in identity.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("valkey-claimant-{kind}-{hash:016x}")
}

impl Claims {
    pub fn new(client: kube::Client, identity: String, kind: &str) -> Self {
        Self {
            client,
            identity,
            kind: kind.to_owned(),
            duration: CLAIM_DURATION,
            observed: Arc::default(),
            beats: Arc::default(),
            held: Arc::default(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Holds the object Lease `name` in `namespace` (created owned by `owner`), or says who does.
    /// A claim confirmed since the heartbeat last lapsed costs no request.
    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
        owner: OwnerReference,
    ) -> Result<Claim, kube::Error> {
        let epoch = self.heartbeat(namespace).await?;
        let key = format!("{namespace}/{name}");
        if lock(&self.held).get(&key) == Some(&epoch) {
            return Ok(Claim::Held);
        }
        let claim = self.acquire(namespace, name, owner).await?;
        if claim == Claim::Held {
            lock(&self.held).insert(key, epoch);
        }
        Ok(claim)
    }

    /// Keeps this process's heartbeat in `namespace` alive; the epoch of its claims there.
    ///
    /// When the API fails, a heartbeat written less than two thirds of the duration ago still
    /// stands: no other claimant may take a claim before it has seen the heartbeat unchanged for
    /// a whole duration, so acting meanwhile is as safe as with one just written. (What protects
    /// the objects' data must not stop because the API does.)
    async fn heartbeat(&self, namespace: &str) -> Result<u64, kube::Error> {
        let beat = lock(&self.beats)
            .get(namespace)
            .cloned()
            .unwrap_or_default();
        let age = beat.written.map(|at| at.elapsed());
        if age.is_some_and(|age| age < self.duration / 3) {
            return Ok(beat.epoch);
        }
        let lapsed = age.is_none_or(|age| age >= self.duration * 2 / 3);
        let writing = Instant::now();
        match self.write_heartbeat(namespace, beat.lease.as_ref()).await {
            Ok(lease) => {
                let epoch = if lapsed { beat.epoch + 1 } else { beat.epoch };
                lock(&self.beats).insert(
                    namespace.to_owned(),
                    Beat {
                        lease: Some(lease),
                        written: Some(writing),
                        epoch,
                    },
                );
                Ok(epoch)
            }
            Err(error) if !lapsed => {
                tracing::warn!(namespace, %error, "the claims' heartbeat could not be renewed; the claims still stand (renewed recently)");
                Ok(beat.epoch)
            }
            Err(error) => Err(error),
        }
    }

    /// Writes the heartbeat: renewed from the Lease last written, else read (or created).
    async fn write_heartbeat(
        &self,
        namespace: &str,
        last: Option<&Lease>,
    ) -> Result<Lease, kube::Error> {
        let name = heartbeat_name(&self.kind, &self.identity);
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let now = Timestamp::now();
        if let Some(last) = last {
            match api
                .replace(&name, &PostParams::default(), &self.beat_body(last, now))
                .await
            {
                // Changed since (a restarted process of the same identity, or a person): read it.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                done => return done,
            }
        }
        match api.get_opt(&name).await? {
            Some(current) => {
                api.replace(
                    &name,
                    &PostParams::default(),
                    &self.beat_body(&current, now),
                )
                .await
            }
            None => {
                let mut body = record::created(&name, &self.identity, now, self.duration);
                body.metadata.labels =
                    Some([(HEARTBEAT_LABEL.to_owned(), self.kind.clone())].into());
                api.create(&PostParams::default(), &body).await
            }
        }
    }

    /// `current` renewed, held by this process.
    fn beat_body(&self, current: &Lease, now: Timestamp) -> Lease {
        record::taken(current, &self.identity, now, self.duration)
    }

    /// Reads the object's Lease and takes it when it is free, ours, or its holder is gone.
    async fn acquire(
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
        let Some(current) = lease else {
            let mut body = record::created(name, &self.identity, now, self.duration);
            body.metadata.owner_references = Some(vec![owner]);
            return written(api.create(&PostParams::default(), &body).await);
        };
        let holder = match decide(Some(&current), now, &self.identity, self.duration) {
            // Ours already (this process, or the same identity before a restart), or free.
            Decision::Renew | Decision::Acquire(super::decide::AcquireReason::Free) => None,
            Decision::Acquire(super::decide::AcquireReason::Expired { previous }) => {
                Some((previous, None))
            }
            Decision::Acquire(super::decide::AcquireReason::Missing) => None,
            // An older release renews the object's Lease itself: alive while it does.
            Decision::Wait { holder, expires_in } => Some((holder, Some(expires_in))),
        };
        if let Some((holder, object_alive_for)) = holder {
            if let Some(expires_in) = object_alive_for {
                return Ok(held_by_other(holder, expires_in));
            }
            // The object's Lease is old: the holder lives while its heartbeat does.
            let beat_name = heartbeat_name(&self.kind, &holder);
            let beat = api.get_opt(&beat_name).await?;
            let beat_since = self.observe(namespace, &beat_name, beat.as_ref());
            if let Some(beat) = &beat
                && let Decision::Wait { expires_in, .. } =
                    decide(Some(beat), now, &self.identity, self.duration)
            {
                return Ok(held_by_other(holder, expires_in.min(self.duration / 3)));
            }
            let unchanged = since.elapsed().min(beat_since.elapsed());
            let duration = beat
                .as_ref()
                .map_or(self.duration, |b| lease_duration(b, self.duration))
                .max(lease_duration(&current, self.duration));
            if !expiry_confirmed(unchanged, duration) {
                return Ok(held_by_other(holder, Duration::from_secs(5)));
            }
        }
        let body = record::taken(&current, &self.identity, now, self.duration);
        written(api.replace(name, &PostParams::default(), &body).await)
    }

    /// Runs a controller (`run`) whose passes hold these claims: first sweeps the stale
    /// heartbeats in `scope` (the watched namespace, or all), and deletes this process's own when
    /// `run` ends (shutdown or lost leadership).
    pub async fn kept_during<F: std::future::Future>(
        self,
        scope: Option<&str>,
        run: F,
    ) -> F::Output {
        match self.sweep_stale(scope).await {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::info!(deleted, kind = %self.kind, "stale claim heartbeats deleted")
            }
            Err(error) => {
                tracing::warn!(%error, kind = %self.kind, "stale claim heartbeats could not be swept; the next start tries again")
            }
        }
        let output = run.await;
        self.release().await;
        output
    }

    /// On a graceful stop: deletes this process's heartbeats, which no later process renews.
    /// The claims stay recorded on their objects; another claimant takes them a duration after
    /// it first sees the heartbeat gone (the restarted process of the same identity at once).
    pub async fn release(&self) {
        let namespaces: Vec<String> = lock(&self.beats).drain().map(|(ns, _)| ns).collect();
        let name = heartbeat_name(&self.kind, &self.identity);
        for namespace in namespaces {
            let api: Api<Lease> = Api::namespaced(self.client.clone(), &namespace);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(error) => {
                    tracing::warn!(namespace, %error, "the claims' heartbeat could not be deleted; it expires, and a later controller deletes it");
                }
            }
        }
    }

    /// Deletes the heartbeats of this kind that expired [`STALE_HEARTBEAT_AFTER`] ago or more,
    /// in `namespace` (all namespaces when `None`): those of processes gone without a goodbye.
    /// Run once when the controller starts.
    pub async fn sweep_stale(&self, namespace: Option<&str>) -> Result<usize, kube::Error> {
        let api: Api<Lease> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let selector = format!("{HEARTBEAT_LABEL}={}", self.kind);
        let now = Timestamp::now();
        let mut deleted = 0;
        for lease in api.list(&ListParams::default().labels(&selector)).await? {
            if !stale(&lease, now, self.duration) {
                continue;
            }
            let (Some(ns), Some(name)) = (&lease.metadata.namespace, &lease.metadata.name) else {
                continue;
            };
            // The resourceVersion read: a heartbeat renewed since is left alone.
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: lease.metadata.resource_version.clone(),
                    uid: None,
                }),
                ..Default::default()
            };
            match Api::<Lease>::namespaced(self.client.clone(), ns)
                .delete(name, &params)
                .await
            {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }

    /// Forgets what it read of a Lease whose object is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        lock(&self.observed).remove(&key);
        lock(&self.held).remove(&key);
    }

    /// Since when the Lease has had the resourceVersion it has now, as this process saw it.
    fn observe(&self, namespace: &str, name: &str, lease: Option<&Lease>) -> Instant {
        let version = lease.and_then(|l| l.metadata.resource_version.clone());
        let mut observed = lock(&self.observed);
        let entry = observed
            .entry(format!("{namespace}/{name}"))
            .or_insert_with(|| (version.clone(), Instant::now()));
        if entry.0 != version {
            *entry = (version, Instant::now());
        }
        entry.1
    }
}

/// Whether a heartbeat expired [`STALE_HEARTBEAT_AFTER`] ago or more (one never renewed counts
/// from its creation; one with no time at all is stale).
fn stale(lease: &Lease, now: Timestamp, default_duration: Duration) -> bool {
    let spec = lease.spec.as_ref();
    let Some(renewed) = spec
        .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()))
        .map(|t| t.0)
    else {
        return true;
    };
    let expired_for = now.duration_since(renewed).unsigned_abs();
    renewed < now && expired_for >= lease_duration(lease, default_duration) + STALE_HEARTBEAT_AFTER
}

/// The maps hold no invariant a panicking holder could break.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ApiServer, mock_client};
    use http::{Method, StatusCode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use serde_json::json;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/prod/leases";
    const ME: &str = "me/all-namespaces";

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "valkey.io/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "cache".into(),
            uid: "0000-1".into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn lease(
        name: &str,
        holder: &str,
        renewed_seconds_ago: i64,
        version: &str,
    ) -> serde_json::Value {
        let renewed = Timestamp::now()
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(
                renewed_seconds_ago,
            ))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("prod".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(45),
                acquire_time: Some(MicroTime(renewed)),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        };
        serde_json::to_value(lease).unwrap_or_default()
    }

    fn beat() -> String {
        heartbeat_name("cluster", ME)
    }

    /// The first claim in a namespace: the heartbeat created, the object's Lease created.
    async fn first_claim(api: &mut ApiServer) {
        api.expect(Method::GET, &format!("{LEASES}/{}", beat()))
            .await
            .not_found();
        api.expect(Method::POST, LEASES).await.echo();
        api.expect(Method::GET, &format!("{LEASES}/cache-claim"))
            .await
            .not_found();
        api.expect(Method::POST, LEASES).await.echo();
    }

    #[test]
    fn heartbeat_names_are_stable_and_tell_identities_and_kinds_apart() {
        assert_eq!(heartbeat_name("cluster", ME), heartbeat_name("cluster", ME));
        assert_ne!(heartbeat_name("cluster", ME), heartbeat_name("backup", ME));
        assert_ne!(
            heartbeat_name("cluster", ME),
            heartbeat_name("cluster", "you/all-namespaces")
        );
        assert!(heartbeat_name("cluster", ME).len() <= 63);
    }

    /// At rest a held claim costs nothing: the second pass sends no request at all.
    #[tokio::test]
    async fn a_claim_held_costs_no_request_until_the_heartbeat_is_due() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let script = tokio::spawn(async move {
            first_claim(&mut api).await;
            api.done().await;
        });
        let claim = || claims.claim("prod", "cache-claim", owner());
        assert_eq!(claim().await.ok(), Some(Claim::Held));
        for _ in 0..5 {
            assert_eq!(claim().await.ok(), Some(Claim::Held));
        }
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Another live claimant's object is left alone: its heartbeat was renewed just now.
    #[tokio::test]
    async fn a_claim_whose_holder_beats_is_left_alone() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let other = "other/all-namespaces";
        let script = tokio::spawn(async move {
            api.expect(Method::GET, &format!("{LEASES}/{}", beat()))
                .await
                .not_found();
            api.expect(Method::POST, LEASES).await.echo();
            api.expect(Method::GET, &format!("{LEASES}/cache-claim"))
                .await
                .answer(StatusCode::OK, &lease("cache-claim", other, 600, "7"));
            let theirs = heartbeat_name("cluster", other);
            api.expect(Method::GET, &format!("{LEASES}/{theirs}"))
                .await
                .answer(StatusCode::OK, &lease(&theirs, other, 3, "9"));
            api.done().await;
        });
        let claim = claims.claim("prod", "cache-claim", owner()).await.ok();
        assert!(
            matches!(&claim, Some(Claim::HeldByOther { holder, .. }) if holder == other),
            "{claim:?}"
        );
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// A holder whose heartbeat expired is taken over only once this claimant has seen it
    /// unchanged for a whole duration itself (clock skew cannot cut a live holder short).
    #[tokio::test]
    async fn an_expired_holder_is_taken_over_only_after_a_whole_duration_seen_unchanged() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let other = "other/all-namespaces";
        let theirs = heartbeat_name("cluster", other);
        let script = tokio::spawn({
            let theirs = theirs.clone();
            async move {
                api.expect(Method::GET, &format!("{LEASES}/{}", beat()))
                    .await
                    .not_found();
                api.expect(Method::POST, LEASES).await.echo();
                for _ in 0..2 {
                    api.expect(Method::GET, &format!("{LEASES}/cache-claim"))
                        .await
                        .answer(StatusCode::OK, &lease("cache-claim", other, 600, "7"));
                    api.expect(Method::GET, &format!("{LEASES}/{theirs}"))
                        .await
                        .answer(StatusCode::OK, &lease(&theirs, other, 120, "9"));
                }
                let taken = api
                    .expect(Method::PUT, &format!("{LEASES}/cache-claim"))
                    .await;
                assert_eq!(
                    taken.body["spec"]["holderIdentity"], ME,
                    "the object's Lease names the taker"
                );
                assert_eq!(
                    taken.body["metadata"]["resourceVersion"], "7",
                    "written on the version read"
                );
                taken.echo();
                api.done().await;
            }
        });
        let first = claims.claim("prod", "cache-claim", owner()).await.ok();
        assert!(
            matches!(first, Some(Claim::HeldByOther { .. })),
            "{first:?}"
        );
        // As if both had been seen unchanged for a whole duration.
        let long_ago = Instant::now()
            .checked_sub(CLAIM_DURATION)
            .unwrap_or_else(Instant::now);
        for name in ["cache-claim", theirs.as_str()] {
            lock(&claims.observed).insert(
                format!("prod/{name}"),
                (
                    Some(if name == "cache-claim" { "7" } else { "9" }.into()),
                    long_ago,
                ),
            );
        }
        assert_eq!(
            claims.claim("prod", "cache-claim", owner()).await.ok(),
            Some(Claim::Held)
        );
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// The API failing does not take the claims away while no other claimant could have taken
    /// them (two thirds of the duration after the heartbeat's last write); after that it does,
    /// and once the heartbeat is written again each claim is confirmed with a write before it
    /// counts as held.
    #[tokio::test]
    async fn a_lapsed_heartbeat_stops_the_claims_until_each_is_confirmed_again() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let failure = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
        let script = tokio::spawn(async move {
            first_claim(&mut api).await;
            // Due, renewal fails twice: recent enough the first time, too old the second.
            for _ in 0..2 {
                api.expect(Method::PUT, &format!("{LEASES}/{}", beat()))
                    .await
                    .answer(StatusCode::INTERNAL_SERVER_ERROR, &failure);
            }
            // Back: the heartbeat written, and the claim confirmed by a write of its Lease.
            api.expect(Method::PUT, &format!("{LEASES}/{}", beat()))
                .await
                .echo();
            api.expect(Method::GET, &format!("{LEASES}/cache-claim"))
                .await
                .answer(StatusCode::OK, &lease("cache-claim", ME, 600, "8"));
            api.expect(Method::PUT, &format!("{LEASES}/cache-claim"))
                .await
                .echo();
            api.done().await;
        });
        let claim = || claims.claim("prod", "cache-claim", owner());
        assert_eq!(claim().await.ok(), Some(Claim::Held));
        let ago = |d: Duration| Instant::now().checked_sub(d).unwrap_or_else(Instant::now);
        let set_written = |at: Instant| {
            if let Some(beat) = lock(&claims.beats).get_mut("prod") {
                beat.written = Some(at);
            }
        };
        set_written(ago(CLAIM_DURATION / 2));
        assert_eq!(
            claim().await.ok(),
            Some(Claim::Held),
            "renewed recently: still held"
        );
        set_written(ago(CLAIM_DURATION));
        assert!(claim().await.is_err(), "too long ago: the failure stands");
        assert_eq!(claim().await.ok(), Some(Claim::Held), "confirmed again");
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

    /// The heartbeat a process wrote carries the label that finds it, and a graceful stop
    /// deletes it.
    #[tokio::test]
    async fn a_graceful_stop_deletes_the_heartbeat() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let script = tokio::spawn(async move {
            api.expect(Method::GET, &format!("{LEASES}/{}", beat()))
                .await
                .not_found();
            let created = api.expect(Method::POST, LEASES).await;
            assert_eq!(
                created.body["metadata"]["labels"][HEARTBEAT_LABEL], "cluster",
                "{}",
                created.body
            );
            created.echo();
            api.expect(Method::GET, &format!("{LEASES}/cache-claim"))
                .await
                .not_found();
            api.expect(Method::POST, LEASES).await.echo();
            api.expect(Method::DELETE, &format!("{LEASES}/{}", beat()))
                .await
                .answer(
                    StatusCode::OK,
                    &json!({"kind": "Status", "status": "Success"}),
                );
            api.done().await;
        });
        assert_eq!(
            claims.claim("prod", "cache-claim", owner()).await.ok(),
            Some(Claim::Held)
        );
        claims.clone().release().await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Only heartbeats expired long ago are swept, each on the version read.
    #[tokio::test]
    async fn the_sweep_deletes_only_heartbeats_long_expired() {
        let (client, mut api) = mock_client();
        let claims = Claims::new(client, ME.into(), "cluster");
        let long_ago = i64::try_from((CLAIM_DURATION + STALE_HEARTBEAT_AFTER).as_secs() + 60)
            .unwrap_or(i64::MAX);
        let script = tokio::spawn(async move {
            let list = api.expect(Method::GET, LEASES).await;
            assert!(
                list.uri
                    .contains("labelSelector=valkey.io%2Fclaimant-heartbeat%3Dcluster"),
                "{}",
                list.uri
            );
            list.answer(
                StatusCode::OK,
                &json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "LeaseList",
                    "metadata": {},
                    "items": [
                        lease("alive", "a/all-namespaces", 10, "3"),
                        lease("expired-lately", "b/all-namespaces", 120, "4"),
                        lease("gone", "c/all-namespaces", long_ago, "5"),
                    ],
                }),
            );
            let delete = api.expect(Method::DELETE, &format!("{LEASES}/gone")).await;
            assert_eq!(
                delete.body["preconditions"]["resourceVersion"], "5",
                "{}",
                delete.body
            );
            delete.answer(
                StatusCode::OK,
                &json!({"kind": "Status", "status": "Success"}),
            );
            api.done().await;
        });
        assert_eq!(claims.sweep_stale(Some("prod")).await.ok(), Some(1));
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
