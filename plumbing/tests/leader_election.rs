//! Leader election against a real API server (`KUBECONFIG`, e.g. the local control plane):
//! `cargo test -p plumbing --test leader_election -- --ignored --test-threads=1`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use plumbing::leader::{LeaderElector, LeaderState, Leadership, LeaseTiming};
use tokio::time::{Instant, sleep};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const NAMESPACE: &str = "default";
const DEADLINE: Duration = Duration::from_secs(30);

fn fast_timing() -> LeaseTiming {
    LeaseTiming {
        lease_duration: Duration::from_secs(4),
        renew_interval: Duration::from_millis(1000),
        renew_deadline: Duration::from_millis(2500),
        retry_interval: Duration::from_millis(300),
        request_timeout: Duration::from_millis(2000),
    }
}

fn unique_name(prefix: &str) -> String {
    let nanos = Timestamp::now().as_nanosecond();
    format!("{prefix}-{:x}", nanos % 0xffff_ffff)
}

async fn candidate(
    client: &kube::Client,
    lease: &str,
    identity: &str,
) -> Result<Leadership, Box<dyn std::error::Error>> {
    Ok(
        LeaderElector::new(client.clone(), NAMESPACE, lease, identity)
            .with_timing(fast_timing())?
            .spawn(),
    )
}

/// Polls `check` until it holds or the deadline passes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) -> TestResult {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for: {what}").into());
        }
        sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn holder(api: &Api<Lease>, name: &str) -> Result<Option<String>, kube::Error> {
    Ok(api.get(name).await?.spec.and_then(|s| s.holder_identity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn one_leader_then_quick_handover_on_release() -> TestResult {
    let client = kube::Client::try_default().await?;
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = unique_name("plumbing-handover");
    let a = candidate(&client, &lease, "a").await?;
    let b = candidate(&client, &lease, "b").await?;

    eventually("one candidate leads", || a.is_leader() || b.is_leader()).await?;
    // For several renew periods, never both.
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders at once");
        sleep(Duration::from_millis(20)).await;
    }
    let (leader, standby, leader_id) = if a.is_leader() {
        (a, b, "a")
    } else {
        (b, a, "b")
    };
    assert_eq!(holder(&api, &lease).await?.as_deref(), Some(leader_id));
    assert_eq!(standby.state(), LeaderState::Standby);

    let released_at = Instant::now();
    leader.release().await;
    eventually("the standby takes over", || standby.is_leader()).await?;
    let handover = released_at.elapsed();
    println!("handover after release: {handover:?}");
    // Released, not expired: the standby must not have waited for the lease duration.
    assert!(
        handover < fast_timing().lease_duration,
        "handover took {handover:?}"
    );

    standby.release().await;
    assert_eq!(holder(&api, &lease).await?, None);
    api.delete(&lease, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn expired_lease_is_taken_only_after_a_full_local_observation() -> TestResult {
    let client = kube::Client::try_default().await?;
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = unique_name("plumbing-expired");
    // A holder that renewed long ago and is gone.
    let stale = Lease {
        metadata: ObjectMeta {
            name: Some(lease.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("crashed".into()),
            lease_duration_seconds: Some(4),
            renew_time: Some(MicroTime(Timestamp::from_second(1_000_000)?)),
            ..Default::default()
        }),
    };
    api.create(&PostParams::default(), &stale).await?;

    let started = Instant::now();
    let c = candidate(&client, &lease, "c").await?;
    eventually("the candidate takes the expired lease", || c.is_leader()).await?;
    let waited = started.elapsed();
    println!("took the expired lease after {waited:?}");
    assert!(
        waited >= fast_timing().lease_duration,
        "took it after only {waited:?}"
    );
    let spec = api.get(&lease).await?.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("c"));
    assert_eq!(spec.lease_transitions, Some(1));

    c.release().await;
    api.delete(&lease, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Kubernetes API server (KUBECONFIG)"]
async fn leader_notices_a_takeover_and_reports_lost() -> TestResult {
    let client = kube::Client::try_default().await?;
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = unique_name("plumbing-lost");
    let d = candidate(&client, &lease, "d").await?;
    tokio::time::timeout(DEADLINE, d.acquired()).await??;

    // Someone else overwrites the holder (as a skewed or misbehaving replica would).
    let mut current = api.get(&lease).await?;
    if let Some(spec) = current.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(MicroTime(Timestamp::now()));
    }
    api.replace(&lease, &PostParams::default(), &current)
        .await?;

    tokio::time::timeout(DEADLINE, d.lost_owned()).await?;
    assert_eq!(d.state(), LeaderState::Lost);
    d.release().await;
    // A lost leader must not clear someone else's hold.
    assert_eq!(holder(&api, &lease).await?.as_deref(), Some("intruder"));
    api.delete(&lease, &DeleteParams::default()).await?;
    Ok(())
}
