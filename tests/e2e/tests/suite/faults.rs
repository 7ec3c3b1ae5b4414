//! Faults that struck while something else was wrong, each a case the operator once got wrong:
//! the data-safety rules must run whatever else fails, and nothing may serve before it is judged.

use std::time::Duration;

use e2e::cluster::{ClusterFixture, wait_writes};
use e2e::{E2eError, Poll, Result, check, faults, wait_until};
use kube::api::DeleteParams;
use valkey_api::v1alpha1::{ClusterState, Role};

const READY: Duration = Duration::from_secs(300);

/// The Secret a cluster's `auth.passwordSecret` names is deleted (Degraded:
/// PasswordSecretNotFound), then a primary without persistence restarts in place while a writer
/// runs. The rest of the pass cannot go on without the Secret, but the engine's safety rules run
/// all the same: the primary's replica, which holds the shard's data, takes over while the
/// Secret is still missing, and once it is back the cluster is Ready with every key written
/// before and every acknowledged write. (Nothing ran until the Secret came back; measured
/// before: 1,008 of 3,000 keys lost.)
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_back_empty_hands_over_while_a_secret_is_missing() -> Result<()> {
    let c = ClusterFixture::prepare("fault-nosecret", "nosecret").await?;
    c.ns.put_password("nosecret-pw", "first-password").await?;
    c.apply(
        "{shards: 2, replicas: 1, persistence: {enabled: false}, \
         auth: {passwordSecret: {name: nosecret-pw}}}",
    )
    .await?;
    c.wait_ready(READY).await?;
    let before = c.write_keys("pre", 3000).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 100, Duration::from_secs(60)).await?;

    // Found while the Secret is there: the test asks Valkey with the clients' password.
    let primary = c.member_with_role(Role::Primary).await?;
    c.ns.api::<k8s_openapi::api::core::v1::Secret>()
        .delete("nosecret-pw", &DeleteParams::default())
        .await?;
    c.wait_degraded("PasswordSecretNotFound", Duration::from_secs(60))
        .await?;
    let primary_name = primary.metadata.name.clone().unwrap_or_default();
    let pod = primary
        .status
        .and_then(|s| s.pod_name)
        .ok_or_else(|| E2eError::Check(format!("{primary_name} has no pod")))?;
    faults::kill(&c.ns.name, &pod, Some("valkey")).await?;

    // Its shard-mate takes over while the Secret is still missing.
    let shard = primary_name
        .rsplit_once('-')
        .map(|(shard, _)| shard.to_owned())
        .unwrap_or_default();
    let took_over = wait_until(
        Duration::from_secs(90),
        &format!("the replica of {primary_name} took over"),
        || async {
            let nodes = c.nodes().await?;
            let promoted = nodes.iter().find(|n| {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                name != primary_name
                    && name.rsplit_once('-').is_some_and(|(s, _)| s == shard)
                    && n.status.as_ref().and_then(|s| s.role) == Some(Role::Primary)
            });
            Ok(match promoted {
                Some(node) => Poll::Ready(node.metadata.name.clone().unwrap_or_default()),
                None => Poll::NotYet("no other member of the shard is primary".into()),
            })
        },
    )
    .await?;
    let status = c.api().get(&c.name).await?.status.unwrap_or_default();
    check(
        status.reason.as_deref() == Some("PasswordSecretNotFound"),
        format!(
            "{took_over} took over while the Secret was still missing; the status says {:?}",
            status.reason
        ),
    )?;
    let events = c.ns.events().await?;
    check(
        events.contains("PrimaryRestartedEmpty"),
        format!("the forced handover is announced: {events}"),
    )?;

    c.ns.put_password("nosecret-pw", "first-password").await?;
    let ready = c.wait_ready(READY).await?;
    check(
        ready.status.and_then(|s| s.state) == Some(ClusterState::Ready),
        "Ready once the Secret is back",
    )?;
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    let (mut all, refused) = writer.stop().await;
    eprintln!(
        "nosecret: {} writes acknowledged, {refused} refused",
        all.len()
    );
    all.extend(before);
    c.verify(&all).await?;
    Ok(())
}
