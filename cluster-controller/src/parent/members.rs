//! Reading ValkeyNodes back: a node as the engine's [`Member`], the restart gate an existing node
//! keeps, and the member whose pod cannot run. Pure.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use valkey_api::contract::{POD_CANNOT_RUN_REASONS, READY_CONDITION, VALKEY_PORT};
use valkey_api::v1alpha1::{StatusReason, ValkeyNode};

use super::conditions::Problem;
use super::labels::position;
use crate::engine::Member;

/// The parent's gate for an existing node: keep what it has; pin a node that has none to the
/// revision it runs, so that a later spec change waits for the engine's `AllowRestart`. A node
/// whose pod cannot run (unschedulable, image, crash loop) has nothing to protect and would never
/// be rolled by the engine, which rolls only a healthy cluster: it takes a new spec at once.
/// A node that is merely not ready this moment (a restart, a slow probe) keeps its gate: letting
/// it go would restart it beside the member the engine is rolling.
pub fn allowed_revision(existing: Option<&ValkeyNode>) -> Option<String> {
    let node = existing?;
    if stuck_condition(node).is_some() {
        return None;
    }
    node.spec
        .allowed_revision
        .clone()
        .filter(|r| !r.is_empty())
        .or_else(|| node.status.as_ref()?.current_revision.clone())
}

/// The node's Ready condition, when it says the pod cannot run.
fn stuck_condition(node: &ValkeyNode) -> Option<&Condition> {
    let status = node.status.as_ref().filter(|s| !s.ready)?;
    let ready =
        plumbing::conditions::find_condition(status.conditions.as_deref()?, READY_CONDITION)?;
    (ready.status == "False" && POD_CANNOT_RUN_REASONS.contains(&ready.reason.as_str()))
        .then_some(ready)
}

/// The first member whose pod cannot run, as a problem for the cluster's status.
pub fn stuck_member<'a>(nodes: impl IntoIterator<Item = &'a ValkeyNode>) -> Option<Problem> {
    let mut sorted: Vec<&ValkeyNode> = nodes.into_iter().collect();
    sorted.sort_by_key(|n| n.name_any());
    sorted.into_iter().find_map(|node| {
        // The node's reason is one of POD_CANNOT_RUN_REASONS, every one a word of the vocabulary.
        let ready = stuck_condition(node)?;
        Some(Problem {
            reason: StatusReason::from_name(&ready.reason)?,
            message: format!("ValkeyNode {}: {}", node.name_any(), ready.message),
        })
    })
}

/// The first member whose server refused a live setting of the cluster's config, as a problem
/// for the cluster's status (with Valkey's words, from the node's ConfigApplied condition).
pub fn refused_config<'a>(nodes: impl IntoIterator<Item = &'a ValkeyNode>) -> Option<Problem> {
    let mut sorted: Vec<&ValkeyNode> = nodes.into_iter().collect();
    sorted.sort_by_key(|n| n.name_any());
    sorted.into_iter().find_map(|node| {
        let refused = node
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| {
                c.type_ == valkey_api::contract::CONFIG_APPLIED_CONDITION
                    && c.status == "False"
                    && c.reason != valkey_api::contract::CONFIG_AWAITS_RESTART
            })?;
        Some(Problem {
            // A word the vocabulary lacks (a newer node-controller's) is still a refusal.
            reason: StatusReason::from_name(&refused.reason).unwrap_or(StatusReason::ConfigRefused),
            message: format!("ValkeyNode {}: {}", node.name_any(), refused.message),
        })
    })
}

/// The engine's view of a ValkeyNode; `None` for a node whose labels do not place it.
pub fn member(node: &ValkeyNode) -> Option<Member> {
    let (shard, index) = position(node.meta().labels.as_ref())?;
    Some(member_at(node, shard, index))
}

/// Where a member tells clients it is (its ValkeyNode's client-only announce settings): the
/// address, and the port when one other than [`VALKEY_PORT`] is announced (a NodePort).
fn announced(node: &ValkeyNode) -> Option<SocketAddr> {
    let config = node.spec.config.as_ref()?;
    let ip = config.get(super::external::ANNOUNCE)?.parse().ok()?;
    let port = config
        .get(super::external::ANNOUNCE_PORTS[0])
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .unwrap_or(VALKEY_PORT);
    Some(SocketAddr::new(ip, port))
}

/// The engine's view of a ValkeyNode at `(shard, index)` (a replication's members are shard 0):
/// its address, whether it is ready for the spec it has, its revisions and restart gate.
pub fn member_at(node: &ValkeyNode, shard: u32, index: u32) -> Member {
    let status = node.status.as_ref();
    let mut member = Member::new(shard, index, node.name_any());
    member.address = status
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, VALKEY_PORT));
    // Ready only for the spec the node-controller has seen: a stale status is not readiness.
    let current = status.is_some_and(|s| s.observed_generation == node.meta().generation);
    member.ready = current && status.is_some_and(|s| s.ready);
    member.current_revision = status.and_then(|s| s.current_revision.clone());
    member.desired_revision = status
        .filter(|_| current)
        .and_then(|s| s.desired_revision.clone());
    member.allowed_revision = node.spec.allowed_revision.clone().filter(|r| !r.is_empty());
    member.node_name = status.and_then(|s| s.node_name.clone());
    member.zone = status.and_then(|s| s.zone.clone());
    member.announced = announced(node);
    member
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::desired::desired_node;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use crate::parent::node::NodeAuth;

    #[test]
    fn members_are_read_back_from_their_nodes() {
        let mut node = desired_node(
            &cluster(CLUSTER),
            2,
            1,
            &NodeAuth::of("cache"),
            Some("r1".into()),
        )
        .unwrap_or_else(|| panic!("no node"));
        node.metadata.generation = Some(2);
        node.status = Some(serde_json::from_value(serde_json::json!({
            "ready": true, "podIP": "10.213.2.5", "currentRevision": "r1", "desiredRevision": "r2", "observedGeneration": 2
        })).unwrap_or_default());
        let m = member(&node).unwrap_or_else(|| panic!("no member"));
        assert_eq!((m.shard, m.index, m.ready), (2, 1, true));
        assert_eq!(
            m.address,
            Some("10.213.2.5:6379".parse().unwrap_or_else(|e| panic!("{e}")))
        );
        assert!(m.needs_restart());
        // A status written for an older spec is not readiness.
        node.metadata.generation = Some(3);
        let m = member(&node).unwrap_or_else(|| panic!("no member"));
        assert!(!m.ready && m.desired_revision.is_none());
    }

    #[test]
    fn a_member_that_cannot_run_is_named() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 1, &NodeAuth::of("cache"), None)
            .unwrap_or_else(|| panic!("no node"));
        assert_eq!(stuck_member(std::slice::from_ref(&node)), None);
        node.status = Some(serde_json::from_value(serde_json::json!({"ready": false, "conditions": [{
            "type": "Ready", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "message": "Pod valkey-cache-0-1-0 cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        }]})).unwrap_or_default());
        let problem = stuck_member(&[node]).unwrap_or_else(|| panic!("not stuck"));
        assert_eq!(problem.reason.as_str(), "Unschedulable");
        assert!(
            problem.message.starts_with("ValkeyNode cache-0-1: ")
                && problem.message.contains("anti-affinity")
        );
    }

    #[test]
    fn a_member_waiting_for_its_restart_has_refused_nothing() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::of("cache"), None)
            .unwrap_or_else(|| panic!("no node"));
        let with = |reason: &str| {
            serde_json::from_value(serde_json::json!({"ready": true, "conditions": [{
                "type": "ConfigApplied", "status": "False", "reason": reason,
                "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}))
            .unwrap_or_default()
        };
        node.status = Some(with(valkey_api::contract::CONFIG_AWAITS_RESTART));
        assert_eq!(refused_config(std::slice::from_ref(&node)), None);
        node.status = Some(with("ConfigRefused"));
        let problem =
            refused_config(std::slice::from_ref(&node)).unwrap_or_else(|| panic!("no problem"));
        assert_eq!(problem.reason.as_str(), "ConfigRefused");
    }

    #[test]
    fn a_node_without_a_gate_is_pinned_to_what_it_runs() {
        let mut node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::of("cache"), None)
            .unwrap_or_else(|| panic!("no node"));
        assert_eq!(allowed_revision(Some(&node)), None);
        node.status = Some(
            serde_json::from_value(serde_json::json!({"ready": true, "currentRevision": "r1"}))
                .unwrap_or_default(),
        );
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r1"));
        node.spec.allowed_revision = Some("r0".into());
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r0"));
        assert_eq!(allowed_revision(None), None);
    }

    #[test]
    fn a_node_not_ready_for_a_moment_keeps_its_gate_but_a_stuck_one_lets_go() {
        let mut node = desired_node(
            &cluster(CLUSTER),
            0,
            0,
            &NodeAuth::of("cache"),
            Some("r0".into()),
        )
        .unwrap_or_else(|| panic!("no node"));
        let status = |reason: &str| {
            serde_json::from_value(
                serde_json::json!({"ready": false, "currentRevision": "r0", "conditions": [{
                    "type": "Ready", "status": "False", "reason": reason, "message": "m",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"
                }]}),
            )
            .unwrap_or_default()
        };
        for transient in [
            "PodNotReady",
            "ValkeyNotResponding",
            "PodTerminating",
            "ContainerWaiting",
        ] {
            node.status = Some(status(transient));
            assert_eq!(
                allowed_revision(Some(&node)).as_deref(),
                Some("r0"),
                "{transient}"
            );
        }
        node.spec.allowed_revision = None;
        assert_eq!(allowed_revision(Some(&node)).as_deref(), Some("r0"));
        for stuck in ["CrashLoopBackOff", "Unschedulable", "ImagePullBackOff"] {
            node.status = Some(status(stuck));
            assert_eq!(allowed_revision(Some(&node)), None, "{stuck}");
        }
    }
}
