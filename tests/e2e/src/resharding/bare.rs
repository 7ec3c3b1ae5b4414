//! A Valkey cluster with no operator acting on it: ValkeyNodes the test writes itself, run by the
//! node-controller alone (as the node-controller's own tests do), formed and resharded by the
//! test or by `valkey-cli`. Each node runs what a member of the operator's cluster runs (its
//! ValkeyNode spec, copied), less the operator's credentials: the comparison is of the way slots
//! move, not of the servers.

use std::time::Duration;

use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use valkey_api::v1alpha1::ValkeyNode;

use super::view::{self, ClusterView};
use crate::operator::{ControllerProcess, install_crds, wait_node};
use crate::{E2eError, Poll, Result, TestNamespace, check, valkey_cmd, wait_until};

/// A new node: its pod scheduled, the process started, its probes passed.
const NODE_READY: Duration = Duration::from_secs(120);

/// One server of the bare cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub ip: String,
}

pub struct BareCluster {
    pub ns: TestNamespace,
    _node_controller: ControllerProcess,
    /// The spec every node is created with.
    spec: Value,
    pub bus_port: u16,
    /// The servers in the cluster, in shard order (shard `i` is `members[i]`).
    pub members: Vec<Member>,
    created: u32,
}

/// The ValkeyNode spec of a bare node from a member of the operator's cluster: the same image,
/// resources, storage and settings, without what ties it to that cluster (its credentials
/// Secret, its ACL file, its placement among that cluster's pods) and with a bus port of its own.
pub fn bare_spec(member: &ValkeyNode, bus_port: u16) -> Result<Value> {
    let mut spec = serde_json::to_value(&member.spec)
        .map_err(|e| E2eError::Check(format!("ValkeyNode spec: {e}")))?;
    let object = spec
        .as_object_mut()
        .ok_or_else(|| E2eError::Check("a ValkeyNode spec that is not an object".into()))?;
    for field in [
        "credentials",
        "tls",
        "affinity",
        "podLabels",
        "podAnnotations",
        "allowedRevision",
    ] {
        object.remove(field);
    }
    let config = object
        .entry("config")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| E2eError::Check("config that is not a map".into()))?;
    // The ACL file and the replication login come from the operator's Secret; without them the
    // default user has every right and no password, as on a server a person starts.
    config.remove("aclfile");
    config.remove("include");
    config.insert("cluster-port".into(), json!(bus_port.to_string()));
    Ok(spec)
}

impl BareCluster {
    /// A namespace with the node-controller alone; no node yet.
    pub async fn start(prefix: &str, spec: Value, bus_port: u16) -> Result<Self> {
        install_crds().await?;
        let ns = TestNamespace::create(prefix).await?;
        let node_controller = ControllerProcess::start("node-controller", &ns, &[]).await?;
        Ok(Self {
            ns,
            _node_controller: node_controller,
            spec,
            bus_port,
            members: Vec::new(),
            created: 0,
        })
    }

    /// Creates one more ValkeyNode (not yet part of the cluster); returns its name.
    pub async fn create_node(&mut self) -> Result<String> {
        let name = format!("bare-{}", self.created);
        self.created += 1;
        let node: ValkeyNode = serde_json::from_value(json!({
            "apiVersion": "valkey.io/v1alpha1",
            "kind": "ValkeyNode",
            "metadata": {"name": name},
            "spec": self.spec,
        }))
        .map_err(|e| E2eError::Check(format!("ValkeyNode {name}: {e}")))?;
        self.ns
            .api::<ValkeyNode>()
            .create(&PostParams::default(), &node)
            .await?;
        Ok(name)
    }

    /// Waits until the node is ready and returns it as a member (not yet in the cluster).
    pub async fn wait_node(&self, name: &str) -> Result<Member> {
        let node = wait_node(&self.ns, name, NODE_READY, "ready", |n| {
            n.status
                .as_ref()
                .is_some_and(|s| s.ready && s.pod_ip.is_some())
        })
        .await?;
        let ip = node
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| E2eError::Check(format!("{name} has no pod IP")))?;
        Ok(Member {
            name: name.to_owned(),
            ip,
        })
    }

    pub async fn delete_node(&self, name: &str) -> Result<()> {
        self.ns
            .api::<ValkeyNode>()
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }

    pub fn ips(&self) -> Vec<String> {
        self.members.iter().map(|m| m.ip.clone()).collect()
    }

    /// The first member: where `valkey-cli` and the checks connect.
    pub fn entry(&self) -> Result<&Member> {
        self.members
            .first()
            .ok_or_else(|| E2eError::Check("the bare cluster has no member".into()))
    }

    /// `CLUSTER MEET` of `member` from every member, so that it is known at once rather than
    /// when gossip gets round to it.
    pub async fn meet(&self, member: &Member) -> Result<()> {
        let port = self.bus_port.to_string();
        for m in &self.members {
            let mut conn = super::data::bulk_connection(&m.ip).await?;
            valkey_cmd(&mut conn, &["CLUSTER", "MEET", &member.ip, "6379", &port]).await?;
        }
        Ok(())
    }

    /// Forms the cluster from `members` with `layout` (each slot's shard, as the operator's
    /// cluster has them), the way the operator forms one: MEET, then ADDSLOTSRANGE on each.
    pub async fn form(&mut self, members: Vec<Member>, layout: &[Option<usize>]) -> Result<()> {
        let (first, rest) = members
            .split_first()
            .ok_or_else(|| E2eError::Check("no member to form a cluster of".into()))?;
        self.members = vec![first.clone()];
        for member in rest {
            self.meet(member).await?;
        }
        self.members = members.clone();
        for (shard, member) in members.iter().enumerate() {
            let slots: Vec<u16> = layout
                .iter()
                .enumerate()
                .filter(|(_, owner)| **owner == Some(shard))
                .filter_map(|(slot, _)| u16::try_from(slot).ok())
                .collect();
            let mut args = vec!["CLUSTER".to_owned(), "ADDSLOTSRANGE".to_owned()];
            for (a, b) in view::ranges(&slots) {
                args.extend([a.to_string(), b.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut conn = super::data::bulk_connection(&member.ip).await?;
            valkey_cmd(&mut conn, &args).await?;
        }
        wait_agreed(&self.ips(), layout, Duration::from_secs(60)).await?;
        // Every slot served is not yet a cluster that serves: each server says so itself.
        wait_serving(&self.ips()).await
    }
}

/// Waits until every server at `ips` reports `cluster_state:ok`, looking every 50 ms (it may be
/// on a way's clock).
pub async fn wait_serving(ips: &[String]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    'poll: loop {
        for ip in ips {
            let mut conn = super::data::bulk_connection(ip).await?;
            let info = valkey_cmd(&mut conn, &["CLUSTER", "INFO"]).await?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                if tokio::time::Instant::now() > deadline {
                    return Err(E2eError::Check(format!(
                        "{ip} has not called the cluster up within 60 s"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'poll;
            }
        }
        return Ok(());
    }
}

/// Whether every server at `ips` sees exactly these servers, no slot open, and each slot owned
/// by the shard `expected` names (shard `i` is `ips[i]`). `Err` is the first disagreement.
pub async fn agreed(ips: &[String], expected: &[Option<usize>]) -> Result<Result<(), String>> {
    for ip in ips {
        let view: ClusterView = view::read(ip).await?;
        let known: Vec<&str> = view.nodes.iter().map(|n| n.ip.as_str()).collect();
        if known.len() != ips.len() || ips.iter().any(|ip| !known.contains(&ip.as_str())) {
            return Ok(Err(format!("{ip} knows {known:?}")));
        }
        if let Some(open) = view.nodes.iter().find(|n| n.open) {
            return Ok(Err(format!("{ip} sees a slot open on {}", open.ip)));
        }
        let owners = view.shard_owners(ips);
        if owners != expected {
            let first = owners
                .iter()
                .zip(expected)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Ok(Err(format!(
                "{ip} sees slot {first} on shard {:?}, not {:?}",
                owners[first], expected[first]
            )));
        }
    }
    Ok(Ok(()))
}

/// Waits until [`agreed`].
pub async fn wait_agreed(
    ips: &[String],
    expected: &[Option<usize>],
    within: Duration,
) -> Result<()> {
    wait_until(
        within,
        "every server agreeing on the slots",
        || async move {
            Ok(match agreed(ips, expected).await? {
                Ok(()) => Poll::Ready(()),
                Err(why) => Poll::NotYet(why),
            })
        },
    )
    .await
}

/// Each slot's shard, as the server at `ips[0]` sees it.
pub async fn layout(ips: &[String]) -> Result<Vec<Option<usize>>> {
    let first = ips
        .first()
        .ok_or_else(|| E2eError::Check("no server to read the slots from".into()))?;
    let owners = view::read(first).await?.shard_owners(ips);
    check(
        owners.iter().all(Option::is_some),
        format!("{first} sees slots served by no shard it was told of"),
    )?;
    Ok(owners)
}
