//! Item 3: primaries that a failover leaves on one Kubernetes node are spread again by the
//! operator, with a planned failover, once the cluster has been healthy for the hold
//! (`--spread-after-steady-seconds`, short here); Ready meanwhile, saying what will move; the
//! data stays.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::{ClusterFixture, ready_pod_ip};
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use valkey_api::v1alpha1::ClusterState;

const FORM: Duration = Duration::from_secs(240);

/// Each member's Kubernetes node and, from Valkey itself, whether it is a primary.
async fn members(c: &ClusterFixture) -> Result<BTreeMap<String, (String, bool)>> {
    let mut out = BTreeMap::new();
    for node in c.nodes().await? {
        let (Some(ip), Some(host)) = (
            ready_pod_ip(&node),
            node.status.as_ref().and_then(|s| s.node_name.clone()),
        ) else {
            continue;
        };
        let info = c.command_on(&ip, &["INFO", "replication"]).await?;
        let primary = info.lines().any(|l| l.trim() == "role:master");
        out.insert(node.name_any(), (host, primary));
    }
    Ok(out)
}

fn primaries_share_a_node(members: &BTreeMap<String, (String, bool)>) -> bool {
    let hosts: Vec<&String> = members
        .values()
        .filter(|(_, p)| *p)
        .map(|(h, _)| h)
        .collect();
    hosts
        .iter()
        .enumerate()
        .any(|(i, h)| hosts[..i].contains(h))
}

#[tokio::test(flavor = "multi_thread")]
async fn primaries_crowded_on_one_node_by_a_failover_are_spread_again() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
    // Two schedulable nodes hold the whole 2x1 cluster: each shard keeps its two members apart,
    // so each node runs one member of each shard. A tainted node is no choice: the simulated
    // nodes other tests of the pool start (tainted NoSchedule) would take the pick and
    // leave every member on the other node.
    let client = kube::Client::try_default().await?;
    let mut hosts: Vec<String> = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|n| {
            n.spec.as_ref().is_none_or(|s| {
                s.unschedulable != Some(true)
                    && s.taints
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .all(|t| t.effect != "NoSchedule" && t.effect != "NoExecute")
            })
        })
        .map(|n| n.name_any())
        .collect();
    hosts.sort();
    hosts.truncate(2);
    check(
        hosts.len() == 2,
        format!("spreading needs two schedulable nodes; the cluster has {hosts:?}"),
    )?;
    let spec = format!(
        "{{shards: 2, replicas: 1, affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
         {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, \
         values: [{}, {}]}}]}}]}}}}}}}}",
        hosts[0], hosts[1]
    );
    let c = ClusterFixture::start_with(
        "d2-spread",
        "spread",
        &spec,
        &["--spread-after-steady-seconds", "20"],
    )
    .await?;
    c.wait_ready(FORM).await?;
    let keys = c.write_keys("spread", 500).await?;

    // Every member reports the zone of its node (copied onto the pod when it was bound).
    let node_zones = c.zones().await?;
    for node in c.nodes().await? {
        let reported = node.status.as_ref().and_then(|s| s.zone.clone());
        check(
            reported.is_some() && reported.as_ref() == node_zones.get(&node.name_any()),
            format!(
                "{} reports zone {reported:?}, its node is in {:?}",
                node.name_any(),
                node_zones.get(&node.name_any())
            ),
        )?;
    }

    // A failover the operator did not ask for: a replica on the node of the other shard's
    // primary takes over, and both primaries now run on one node.
    let before = members(&c).await?;
    let primary_hosts: Vec<&String> = before
        .values()
        .filter(|(_, p)| *p)
        .map(|(h, _)| h)
        .collect();
    let crowding = before
        .iter()
        .find(|(name, (host, primary))| {
            let shard_primary_host = before
                .iter()
                .find(|(other, (_, p))| *p && shard_of(other) == shard_of(name))
                .map(|(_, (h, _))| h);
            !primary && primary_hosts.contains(&host) && shard_primary_host != Some(host)
        })
        .map(|(name, _)| name.clone())
        .ok_or_else(|| {
            E2eError::Check(format!(
                "no replica shares a node with another shard's primary: {before:?}"
            ))
        })?;
    let replica = c
        .nodes()
        .await?
        .into_iter()
        .find(|n| n.name_any() == crowding)
        .and_then(|n| ready_pod_ip(&n))
        .ok_or_else(|| E2eError::Check(format!("{crowding} has no pod IP")))?;
    c.admin_command_on(&replica, &["CLUSTER", "FAILOVER"])
        .await?;
    wait_until(
        Duration::from_secs(60),
        &format!("{crowding} primary, sharing a node with the other primary"),
        || async {
            let now = members(&c).await?;
            Ok(if now.get(&crowding).is_some_and(|(_, p)| *p) {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{now:?}"))
            })
        },
    )
    .await?;

    // Whole again at once, and Ready while the move waits for the hold, saying what will move.
    c.wait_status(Duration::from_secs(60), "Ready, the spread held", |s| {
        s.state == Some(ClusterState::Ready)
            && s.message
                .as_deref()
                .is_some_and(|m| m.contains("once the cluster has been steady for 20s"))
    })
    .await?;

    // The operator hands one shard back with a planned failover: primaries on two nodes again.
    let spread = wait_until(
        Duration::from_secs(180),
        "primaries on two nodes again",
        || async {
            let now = members(&c).await?;
            let primaries = now.values().filter(|(_, p)| *p).count();
            Ok(if primaries == 2 && !primaries_share_a_node(&now) {
                Poll::Ready(now)
            } else {
                Poll::NotYet(format!("{now:?}"))
            })
        },
    )
    .await?;
    eprintln!("spread again: {spread:?}");
    c.wait_ready(FORM).await?;
    // The pass publishes its Events when it ends, after the failover it took and the looks that
    // followed it (a few hundred ms), so the roles above can be seen before its Event is.
    wait_until(
        Duration::from_secs(30),
        "a Normal SpreadingPrimaries Event",
        || async {
            let events = c.ns.events().await?;
            Ok(
                if events
                    .lines()
                    .any(|l| l.starts_with("Normal SpreadingPrimaries"))
                {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(events)
                },
            )
        },
    )
    .await?;
    c.verify(&keys).await
}

/// `<cluster>-<shard>-<index>` → shard.
fn shard_of(member: &str) -> Option<&str> {
    member.rsplit('-').nth(1)
}
