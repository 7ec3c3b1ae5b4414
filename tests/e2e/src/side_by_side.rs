//! The pause a failover costs clients, measured the same way on any operator's Valkey cluster:
//! ours, or another operator's running on the same test cluster (`make bench`'s side-by-side
//! runs; `bench/README.md`, "Side by side"). Nothing here knows either operator: the cluster is
//! the pods of one namespace, read through the Kubernetes API (pods, their IPs, Ready) and
//! through Valkey (`CLUSTER NODES`).
//!
//! One run: a writer writes through a cluster client (the chaos writer: `SET` then `WAIT 1`),
//! the pod of the primary that serves slot 0 is deleted (a graceful delete, as a drain or a
//! `kubectl delete pod` makes it), and the run ends once every pod is Ready again, every node
//! agrees on a cluster with a primary and a replica per shard, and the writer has 50 more
//! acknowledgements. The figures: the longest gap between two acknowledged writes from the fault
//! on, the pauses (gaps of [`PAUSE`] or more), and the acknowledged writes read back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use redis::cluster_async::ClusterConnection;
use serde::{Deserialize, Serialize};

use crate::chaos::writer::{Connect, PAUSE, ReplicatedWriter};
use crate::cluster::missing_on;
use crate::{Poll, Result, pod_ip, pod_ready, wait_until};

/// How long the cluster may take to heal after the fault.
const HEAL: Duration = Duration::from_secs(300);
/// Acknowledgements before the fault, and after the cluster healed.
const WRITES_AROUND: usize = 50;

/// The cluster under test: the pods of a namespace (and a label selector, when given).
#[derive(Clone, Debug)]
pub struct Target {
    pub namespace: String,
    pub selector: Option<String>,
    /// The `default` user's password, when the cluster has one.
    pub password: Option<String>,
}

/// One run's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// The deleted pod, and the one that served slot 0 once the cluster healed.
    pub deleted_pod: String,
    pub primary_after: String,
    /// The longest time between two acknowledged writes from the fault on, seconds.
    pub longest_gap_seconds: f64,
    /// Every gap of at least [`PAUSE`] from the fault on, seconds.
    pub pauses_seconds: Vec<f64>,
    /// From the fault to the cluster healed (pods Ready, every node agreeing), seconds.
    pub healed_seconds: f64,
    pub acknowledged: usize,
    pub acknowledged_lost: usize,
    pub replicated: usize,
    pub replicated_lost: usize,
}

/// Every run of one operator, and their medians.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figures {
    pub operator: String,
    pub runs: Vec<Run>,
    pub median_longest_gap_seconds: f64,
    pub median_healed_seconds: f64,
}

impl Figures {
    pub fn of(operator: &str, runs: Vec<Run>) -> Self {
        Self {
            operator: operator.to_owned(),
            median_longest_gap_seconds: median(runs.iter().map(|r| r.longest_gap_seconds)),
            median_healed_seconds: median(runs.iter().map(|r| r.healed_seconds)),
            runs,
        }
    }
}

/// The middle value (the lower of the two middle ones for an even count); 0 for none.
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut all: Vec<f64> = values.collect();
    all.sort_by(f64::total_cmp);
    all.get(all.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

/// One failover with a writer running.
pub async fn run(client: &kube::Client, target: &Target) -> Result<Run> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
    let before = healthy(&pods, target, None).await?;
    let conn = connect(&before.seeds, target.password.clone()).await?;
    let reconnect: Connect = {
        let (pods, target) = (pods.clone(), target.clone());
        Arc::new(move || {
            let (pods, target) = (pods.clone(), target.clone());
            Box::pin(async move {
                let seeds = ready_ips(&pods, &target).await.ok()?;
                connect(&seeds, target.password.clone()).await.ok()
            })
        })
    };
    let writer = ReplicatedWriter::start("side", conn, reconnect);
    until_acknowledged(&writer, WRITES_AROUND).await?;

    let doomed = before.slot_zero_pod.clone();
    let fault = Instant::now();
    pods.delete(&doomed, &DeleteParams::default()).await?;
    let after = healthy(&pods, target, Some(before.pods)).await?;
    let healed = fault.elapsed();
    let at_heal = writer.acked().await;
    until_acknowledged(&writer, at_heal + WRITES_AROUND).await?;
    let acks = writer.stop().await;

    // A gap that ended after the fault is one the fault caused or lengthened.
    let from_fault: Vec<Duration> = acks
        .gaps
        .iter()
        .filter(|(ended, _)| *ended > fault)
        .map(|(_, gap)| *gap)
        .collect();
    let mut check_conn = connect(&after.seeds, target.password.clone()).await?;
    let acknowledged_lost = missing_on(&mut check_conn, acks.plain.iter()).await?.len();
    let replicated_lost = missing_on(&mut check_conn, acks.replicated.iter())
        .await?
        .len();
    Ok(Run {
        deleted_pod: doomed,
        primary_after: after.slot_zero_pod,
        longest_gap_seconds: from_fault
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64(),
        pauses_seconds: from_fault
            .iter()
            .filter(|gap| **gap >= PAUSE)
            .map(Duration::as_secs_f64)
            .collect(),
        healed_seconds: healed.as_secs_f64(),
        acknowledged: acks.plain.len(),
        acknowledged_lost,
        replicated: acks.replicated.len(),
        replicated_lost,
    })
}

/// What a healthy cluster looked like.
struct Healthy {
    pods: usize,
    seeds: Vec<String>,
    /// The pod whose server serves slot 0 as primary.
    slot_zero_pod: String,
}

/// Waits until every pod that is not terminating is Ready (`pods` of them, when given: as many as
/// before the fault), and every node sees the same healthy cluster.
async fn healthy(pods: &Api<Pod>, target: &Target, pods_wanted: Option<usize>) -> Result<Healthy> {
    wait_until(
        HEAL,
        "the cluster healthy: every pod Ready, every node agreeing",
        || async {
            let list = pods.list(&list_params(target)).await?;
            let live: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            if let Some(count) = pods_wanted
                && live.len() != count
            {
                return Ok(Poll::NotYet(format!("{} pods of {count}", live.len())));
            }
            if let Some(p) = live.iter().find(|p| !pod_ready(p)) {
                return Ok(Poll::NotYet(format!("{} not Ready", p.name_any())));
            }
            let by_ip: BTreeMap<String, String> = live
                .iter()
                .filter_map(|p| Some((pod_ip(p)?, p.name_any())))
                .collect();
            if by_ip.len() != live.len() {
                return Ok(Poll::NotYet("a pod without an IP".into()));
            }
            let mut slot_zero = None;
            for ip in by_ip.keys() {
                let nodes = cluster_nodes(ip, target.password.as_deref()).await?;
                if let Err(why) = agrees(&nodes, &by_ip) {
                    return Ok(Poll::NotYet(format!("{ip}: {why}")));
                }
                let serving = slot_zero_ip(&nodes);
                if slot_zero.is_some() && slot_zero != serving {
                    return Ok(Poll::NotYet("the nodes disagree on slot 0".into()));
                }
                slot_zero = serving;
            }
            let Some(slot_zero_pod) = slot_zero.and_then(|ip| by_ip.get(&ip).cloned()) else {
                return Ok(Poll::NotYet("no node serves slot 0".into()));
            };
            Ok(Poll::Ready(Healthy {
                pods: live.len(),
                seeds: by_ip
                    .keys()
                    .map(|ip| format!("redis://{ip}:6379"))
                    .collect(),
                slot_zero_pod,
            }))
        },
    )
    .await
}

fn list_params(target: &Target) -> ListParams {
    match &target.selector {
        Some(s) => ListParams::default().labels(s),
        None => ListParams::default(),
    }
}

async fn ready_ips(pods: &Api<Pod>, target: &Target) -> Result<Vec<String>> {
    let list = pods.list(&list_params(target)).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .filter_map(pod_ip)
        .map(|ip| format!("redis://{ip}:6379"))
        .collect())
}

async fn connect(seeds: &[String], password: Option<String>) -> Result<ClusterConnection> {
    crate::cluster::connect(seeds.to_vec(), password).await
}

async fn until_acknowledged(writer: &ReplicatedWriter, count: usize) -> Result<()> {
    wait_until(HEAL, &format!("{count} acknowledged writes"), || async {
        let acked = writer.acked().await;
        Ok(if acked >= count {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!("{acked} acknowledged"))
        })
    })
    .await
}

async fn cluster_nodes(ip: &str, password: Option<&str>) -> Result<String> {
    let mut conn = match password {
        Some(p) => crate::valkey_as(ip, "default", p).await?,
        None => crate::valkey(ip, 6379).await?,
    };
    crate::valkey_cmd(&mut conn, &["CLUSTER", "NODES"]).await
}

/// One line of `CLUSTER NODES`: its address's IP, flags, primary id, link state and slots.
struct Line<'a> {
    id: &'a str,
    ip: &'a str,
    flags: Vec<&'a str>,
    primary: &'a str,
    connected: bool,
    slots: Vec<&'a str>,
}

fn lines(nodes: &str) -> Vec<Line<'_>> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?;
            let ip = address.split(':').next()?;
            Some(Line {
                id: fields.first()?,
                ip,
                flags: fields.get(2)?.split(',').collect(),
                primary: fields.get(3)?,
                connected: fields.get(7) == Some(&"connected"),
                slots: fields.get(8..).unwrap_or_default().to_vec(),
            })
        })
        .collect()
}

/// Whether one node's view is the healthy cluster of exactly these pods: one node per pod IP,
/// none failing or in a handshake, every link up, and every primary that serves slots with a
/// replica.
fn agrees(nodes: &str, pods: &BTreeMap<String, String>) -> std::result::Result<(), String> {
    let lines = lines(nodes);
    if lines.len() != pods.len() {
        return Err(format!("{} nodes known, {} pods", lines.len(), pods.len()));
    }
    for l in &lines {
        if !pods.contains_key(l.ip) {
            return Err(format!("node {} at {} is no pod's", l.id, l.ip));
        }
        if let Some(flag) = l
            .flags
            .iter()
            .find(|f| ["fail", "fail?", "handshake", "noaddr"].contains(f))
        {
            return Err(format!("node {} is {flag}", l.ip));
        }
        if !l.connected {
            return Err(format!("the link to {} is down", l.ip));
        }
    }
    for p in lines.iter().filter(|l| !l.slots.is_empty()) {
        if !lines.iter().any(|r| r.primary == p.id) {
            return Err(format!("primary {} has no replica", p.ip));
        }
    }
    Ok(())
}

/// The IP of the primary whose slot ranges start at 0.
fn slot_zero_ip(nodes: &str) -> Option<String> {
    lines(nodes)
        .into_iter()
        .find(|l| {
            l.flags.contains(&"master") && l.slots.iter().any(|s| *s == "0" || s.starts_with("0-"))
        })
        .map(|l| l.ip.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEALTHY: &str = "\
a1 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-5460
a2 10.0.0.2:6379@16379 master - 0 0 2 connected 5461-10922
a3 10.0.0.3:6379@16379 master - 0 0 3 connected 10923-16383
b1 10.0.0.4:6379@16379 slave a1 0 0 1 connected
b2 10.0.0.5:6379@16379 slave a2 0 0 2 connected
b3 10.0.0.6:6379@16379 slave a3 0 0 3 connected
";

    fn pods(n: usize) -> BTreeMap<String, String> {
        (1..=n)
            .map(|i| (format!("10.0.0.{i}"), format!("pod-{i}")))
            .collect()
    }

    #[test]
    fn a_healthy_view_agrees_and_names_slot_zero() {
        assert_eq!(agrees(HEALTHY, &pods(6)), Ok(()));
        assert_eq!(slot_zero_ip(HEALTHY).as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn a_failed_node_a_missing_replica_or_a_stranger_do_not() {
        let failed = HEALTHY.replace("slave a1 0 0 1 connected", "slave,fail a1 0 0 1 connected");
        assert!(agrees(&failed, &pods(6)).unwrap_err().contains("fail"));
        let orphan: String = HEALTHY.lines().take(5).map(|l| format!("{l}\n")).collect();
        assert!(
            agrees(&orphan, &pods(5))
                .unwrap_err()
                .contains("no replica")
        );
        assert!(
            agrees(HEALTHY, &pods(5))
                .unwrap_err()
                .contains("6 nodes known")
        );
        let moved = HEALTHY.replace("10.0.0.6", "10.0.0.9");
        assert!(agrees(&moved, &pods(6)).unwrap_err().contains("no pod's"));
        let down = HEALTHY.replace("0 0 2 connected 5461", "0 0 2 disconnected 5461");
        assert!(agrees(&down, &pods(6)).unwrap_err().contains("link"));
    }

    #[test]
    fn slot_zero_follows_a_failover() {
        let after = HEALTHY
            .replace(
                "myself,master - 0 0 1 connected 0-5460",
                "slave b1 0 0 1 connected",
            )
            .replace(
                "slave a1 0 0 1 connected",
                "master - 0 0 4 connected 0-5460",
            );
        assert_eq!(slot_zero_ip(&after).as_deref(), Some("10.0.0.4"));
    }

    #[test]
    fn the_median_is_the_middle_run() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0].into_iter()), 1.0);
        assert_eq!(median(std::iter::empty()), 0.0);
    }
}
