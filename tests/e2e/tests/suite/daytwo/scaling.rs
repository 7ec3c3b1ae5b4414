//! Items 3 and 6: a disruption budget per shard that the API server enforces on evictions, and
//! client Services for seed discovery.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::ClusterFixture;
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams};

const FORM: Duration = Duration::from_secs(240);

/// The pod of member `<cluster>-<shard>-<index>`.
fn pod_of(c: &ClusterFixture, shard: u32, index: u32) -> String {
    format!("valkey-{}-{shard}-{index}-0", c.name)
}

/// Waits until the budget of `shard` allows exactly one disruption (the disruption controller
/// has counted its healthy pods).
async fn wait_budget_allows_one(c: &ClusterFixture, shard: u32) -> Result<PodDisruptionBudget> {
    let name = format!("{}-shard-{shard}", c.name);
    let api = c.ns.api::<PodDisruptionBudget>();
    wait_until(
        Duration::from_secs(60),
        &format!("{name} allows one disruption"),
        || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                Ok(match api.get_opt(&name).await? {
                    Some(b)
                        if b.status.as_ref().is_some_and(|s| {
                            s.disruptions_allowed == Some(1) && s.current_healthy == Some(2)
                        }) =>
                    {
                        Poll::Ready(b)
                    }
                    other => Poll::NotYet(format!("{:?}", other.and_then(|b| b.status))),
                })
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn budgets_refuse_a_second_eviction_and_services_name_every_member() -> Result<()> {
    let c = ClusterFixture::start("d2-scale", "grow", "{shards: 3, replicas: 1}").await?;
    c.wait_ready(FORM).await?;

    // Client Services: a ClusterIP and a headless one naming every ready member.
    let services = c.ns.api::<Service>();
    let cluster_ip = services.get(&c.name).await?;
    let headless = services.get(&format!("{}-headless", c.name)).await?;
    let spec = |s: &Service| s.spec.clone().unwrap_or_default();
    check(
        spec(&cluster_ip).cluster_ip.is_some_and(|ip| ip != "None")
            && spec(&headless).cluster_ip.as_deref() == Some("None"),
        format!("services: {:?} / {:?}", spec(&cluster_ip), spec(&headless)),
    )?;
    let slices = c.ns.api::<EndpointSlice>();
    let headless_name = format!("{}-headless", c.name);
    wait_until(
        Duration::from_secs(60),
        "the headless Service names 6 members",
        || {
            let (slices, headless_name) = (slices.clone(), headless_name.clone());
            async move {
                let list = slices
                    .list(
                        &ListParams::default()
                            .labels(&format!("kubernetes.io/service-name={headless_name}")),
                    )
                    .await?;
                let ready = list
                    .items
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .count();
                Ok(if ready == 6 {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{ready} ready endpoints"))
                })
            }
        },
    )
    .await?;

    // A budget per shard, selecting that shard's pods; one eviction passes, the second member
    // of the same shard is refused while the first is out.
    let budgets =
        c.ns.api::<PodDisruptionBudget>()
            .list(&ListParams::default())
            .await?;
    let selectors: BTreeMap<String, BTreeMap<String, String>> = budgets
        .items
        .iter()
        .filter_map(|b| {
            Some((
                b.metadata.name.clone()?,
                b.spec.as_ref()?.selector.as_ref()?.match_labels.clone()?,
            ))
        })
        .collect();
    for shard in 0..3 {
        let want = BTreeMap::from([
            ("valkey.io/cluster".to_owned(), c.name.clone()),
            ("valkey.io/shard".to_owned(), shard.to_string()),
        ]);
        check(
            selectors.get(&format!("{}-shard-{shard}", c.name)) == Some(&want),
            format!("budgets: {selectors:?}"),
        )?;
    }
    // One eviction passes: shard 2's replica.
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(e2e::client_without_retries().await?, &c.ns.name);
    wait_budget_allows_one(&c, 2).await?;
    pods.evict(&pod_of(&c, 2, 1), &EvictParams::default())
        .await?;
    // While one member of shard 1 is out (paused: NotReady for as long as the test wants, where
    // an evicted pod may be back and Ready again within a second or two), the eviction of the
    // other is refused. Without the client's retries: a refusal (429) must be seen, not retried
    // until the budget allows it again.
    wait_budget_allows_one(&c, 1).await?;
    let out = e2e::faults::pause(&c.ns.name, &pod_of(&c, 1, 1)).await?;
    let budget = format!("{}-shard-1", c.name);
    let budgets = c.ns.api::<PodDisruptionBudget>();
    wait_until(
        Duration::from_secs(60),
        &format!("{budget} allows no disruption"),
        || {
            let (budgets, budget) = (budgets.clone(), budget.clone());
            async move {
                let status = budgets.get(&budget).await?.status;
                Ok(match status.as_ref().and_then(|s| s.disruptions_allowed) {
                    Some(0) => Poll::Ready(()),
                    _ => Poll::NotYet(format!("{status:?}")),
                })
            }
        },
    )
    .await?;
    let refused = pods.evict(&pod_of(&c, 1, 0), &EvictParams::default()).await;
    let budget_then = budgets.get(&budget).await?.status;
    out.undo().await?;
    match refused {
        Err(kube::Error::Api(status)) if status.code == 429 => {
            eprintln!("second eviction refused: {}", status.message);
        }
        other => {
            return Err(E2eError::Check(format!(
                "the eviction of shard 1's other member was not refused: {other:?}; budget \
                 then: {budget_then:?}"
            )));
        }
    }
    // Shard 2, its evicted member back, allows one again: budgets hold back only their own shard.
    wait_budget_allows_one(&c, 2).await?;
    c.wait_ready(FORM).await?;
    Ok(())
}
