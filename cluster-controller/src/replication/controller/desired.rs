//! The desired ValkeyNode of every member a ValkeyReplication's spec wants, and what the spec
//! asks of the engine. Pure. What every parent's members share is built by
//! [`crate::parent::node::server_node`]; a replication brings its names, its labels, its
//! placement (a primary and its replicas kept apart) and its mode: every member starts as a
//! replica of nothing, the fence of this mode (see the engine).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Resource;
use valkey_api::contract::cluster::INDEX_LABEL;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use crate::access::rights::REPLICATION_USER;
use crate::parent::labels::FIELD_MANAGER;
use crate::parent::node::{DesiredMember, NodeAuth, NodeParts, server_node};
use crate::parent::placement::{self, Spread};
use crate::replication::engine::Spec;
use crate::replication::engine::server::{PARKED_HOST, PARKED_PORT};

/// How long a planned switchover may pause writes while its target catches up; past it Valkey
/// gives up the switchover and writes go on at the old primary.
const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// `<replication>-<index>`.
pub fn member_name(replication: &str, index: u32) -> String {
    format!("{replication}-{index}")
}

pub fn member_labels(replication: &str, index: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
        (
            "app.kubernetes.io/instance".to_owned(),
            replication.to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            FIELD_MANAGER.to_owned(),
        ),
        (REPLICATION_LABEL.to_owned(), replication.to_owned()),
        (INDEX_LABEL.to_owned(), index.to_string()),
    ])
}

/// What the spec asks of the engine.
pub fn spec(replication: &ValkeyReplication) -> Spec {
    Spec {
        replicas: u32::try_from(replication.spec.replicas.max(0)).unwrap_or(0),
        preferred: replication.spec.primary.clone(),
        failover_after: Duration::from_secs(
            u64::try_from(replication.spec.failover_after_seconds.max(1)).unwrap_or(10),
        ),
        fence_user: Some(REPLICATION_USER.to_owned()),
        switchover_timeout: SWITCHOVER_TIMEOUT,
        restored: None,
        sentinel: super::sentinels::watch(replication),
    }
}

/// How many replicas a primary must hear from to take a write (`spec.minReplicasToWrite`; see its
/// description for the default and why).
pub fn min_replicas_to_write(replication: &ValkeyReplication) -> i32 {
    let replicas = replication.spec.replicas.max(0);
    match replication.spec.min_replicas_to_write {
        Some(wanted) => wanted.clamp(0, replicas),
        None if replicas >= 2 => 1,
        None => 0,
    }
}

/// Within how many seconds: half of `spec.failoverAfterSeconds`, at least 1, so that a primary
/// cut off from its replicas refuses writes well before the operator may promote one.
pub fn min_replicas_max_lag(replication: &ValkeyReplication) -> i32 {
    (replication.spec.failover_after_seconds / 2).max(1)
}

/// Every member the spec wants, by index.
pub fn members(replication: &ValkeyReplication, auth: &NodeAuth) -> Vec<DesiredMember> {
    let wanted = spec(replication).replicas;
    (0..=wanted)
        .filter_map(|index| {
            let node = desired_node(replication, index, auth)?;
            Some(DesiredMember {
                shard: 0,
                index,
                name: node.metadata.name.clone()?,
                place: format!("member {index}"),
                node,
            })
        })
        .collect()
}

/// The ValkeyNode member `index` should be, without a restart gate.
pub fn desired_node(
    replication: &ValkeyReplication,
    index: u32,
    auth: &NodeAuth,
) -> Option<ValkeyNode> {
    let name = replication.meta().name.as_deref()?;
    let settings = replication.spec.server_settings();
    let together = [(REPLICATION_LABEL, name)];
    let spread = Spread {
        together: &together,
        first: None,
    };
    let parts = NodeParts {
        name: member_name(name, index),
        namespace: replication.meta().namespace.clone(),
        labels: member_labels(name, index),
        owner: replication.controller_owner_ref(&())?,
        affinity: placement::affinity(settings.affinity.as_ref(), settings.placement, &spread),
        mode: BTreeMap::from([
            // Every member starts as a replica of nothing: the engine's fence.
            (
                "replicaof".to_owned(),
                format!("{PARKED_HOST} {PARKED_PORT}"),
            ),
            // The primary pings its replicas every second, so that a replica that heard
            // nothing for spec.failoverAfterSeconds proves the primary silent (Valkey's 10 s
            // default would make a live, idle primary look lost).
            ("repl-ping-replica-period".to_owned(), "1".to_owned()),
            (
                "min-replicas-to-write".to_owned(),
                min_replicas_to_write(replication).to_string(),
            ),
            (
                "min-replicas-max-lag".to_owned(),
                min_replicas_max_lag(replication).to_string(),
            ),
        ]),
    };
    Some(server_node(&settings, parts, auth, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::controller::fixtures::{REPLICATION, replication};

    /// `spec.metrics` reaches every member as its exporter, exactly as for a cluster (both go
    /// through `server_node`); off, the members have none.
    #[test]
    fn metrics_give_every_member_an_exporter_and_none_when_off() {
        let auth = NodeAuth::of("orders");
        let plain = members(&replication(REPLICATION), &auth);
        assert!(plain.iter().all(|m| m.node.spec.exporter.is_none()));
        let metered = replication(&format!(
            "{REPLICATION}  metrics: {{enabled: true, resources: {{limits: {{memory: 64Mi}}}}}}\n"
        ));
        let members = members(&metered, &auth);
        assert_eq!(members.len(), 3);
        for member in &members {
            let exporter = member
                .node
                .spec
                .exporter
                .clone()
                .unwrap_or_else(|| panic!("{} has no exporter", member.name));
            assert_eq!(exporter.image, "oliver006/redis_exporter:v1.45.0");
            assert!(exporter.resources.is_some_and(|r| r.limits.is_some()));
        }
    }

    /// A primary cut off from its replicas refuses writes before the operator may promote one:
    /// on by default with two replicas or more, off with one (each of its restarts would stop
    /// every write), at most `replicas`; the lag is half of failoverAfterSeconds.
    #[test]
    fn a_primary_cut_from_its_replicas_refuses_writes_before_a_promotion() {
        let setting = |change: &dyn Fn(&mut ValkeyReplication), key: &str| {
            let mut r = replication(REPLICATION);
            change(&mut r);
            members(&r, &NodeAuth::of("orders"))[0]
                .node
                .spec
                .config
                .clone()
                .unwrap_or_default()
                .get(key)
                .cloned()
        };
        let two_replicas = |_: &mut ValkeyReplication| {};
        assert_eq!(
            setting(&two_replicas, "min-replicas-to-write").as_deref(),
            Some("1")
        );
        assert_eq!(
            setting(&two_replicas, "min-replicas-max-lag").as_deref(),
            Some("5")
        );
        let one = |r: &mut ValkeyReplication| r.spec.replicas = 1;
        assert_eq!(setting(&one, "min-replicas-to-write").as_deref(), Some("0"));
        let off = |r: &mut ValkeyReplication| {
            r.spec.min_replicas_to_write = Some(0);
            r.spec.failover_after_seconds = 3;
        };
        assert_eq!(setting(&off, "min-replicas-to-write").as_deref(), Some("0"));
        assert_eq!(setting(&off, "min-replicas-max-lag").as_deref(), Some("1"));
        let both = |r: &mut ValkeyReplication| r.spec.min_replicas_to_write = Some(2);
        assert_eq!(
            setting(&both, "min-replicas-to-write").as_deref(),
            Some("2")
        );
    }

    #[test]
    fn every_member_starts_as_a_replica_of_nothing_and_keeps_apart_from_the_others() {
        let r = replication(REPLICATION);
        let members = members(&r, &NodeAuth::of("orders"));
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["orders-0", "orders-1", "orders-2"]);
        let node = &members[1].node;
        let config = node.spec.config.clone().unwrap_or_default();
        assert_eq!(
            config.get("replicaof").map(String::as_str),
            Some("127.0.0.1 0")
        );
        assert!(!config.contains_key("cluster-enabled"));
        assert_eq!(config.get("appendonly").map(String::as_str), Some("yes"));
        assert_eq!(
            config.get("maxmemory").map(String::as_str),
            Some("64mb"),
            "the user's"
        );
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("valkey.io/replication").map(String::as_str),
            Some("orders")
        );
        assert_eq!(labels.get("valkey.io/index").map(String::as_str), Some("1"));
        let terms = node
            .spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|p| {
                p.preferred_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default();
        assert_eq!(terms.len(), 2, "apart by node, then by zone: {terms:?}");
        let owner = node.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| o.kind.as_str()),
            Some("ValkeyReplication")
        );
        let s = spec(&r);
        assert_eq!((s.replicas, s.failover_after), (2, Duration::from_secs(10)));
    }
}
