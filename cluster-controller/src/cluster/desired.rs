//! The desired ValkeyNode of every member a ValkeyCluster's spec wants: names, labels,
//! placement, cluster mode; the rest of each node (the settings every member runs with,
//! credentials) is the floor's [`server_node`]. Pure, and built once per pass: the apply stage
//! adds each node's restart gate, the engine's `AllowRestart` moves it.

use std::collections::BTreeMap;
use valkey_api::v1alpha1::StatusReason;

use kube::Resource;
use valkey_api::v1alpha1::{SlotsLostPolicy, ValkeyCluster, ValkeyNode};

use super::bus;
use crate::engine::{Desired, LostSlotsPolicy};
use crate::parent::conditions::Problem;
use crate::parent::labels::{member_labels, member_name};
use crate::parent::node::{DesiredMember, NodeAuth, NodeParts, image_major_version, server_node};
use crate::parent::placement;
use crate::valkey::slots::SlotSet;

/// What the spec asks of the engine: how many shards, how many replicas each, whether the
/// servers keep their data, whether the cluster served slots before (`status.shards`), and
/// what the user allows when data is lost. `Err` names a malformed `spec.acceptLostSlots`.
pub fn for_engine(cluster: &ValkeyCluster) -> Result<Desired, Problem> {
    let accepted = match cluster.spec.accept_lost_slots.as_deref() {
        None | Some("") => None,
        Some(text) => Some(text.parse::<SlotSet>().map_err(|e| Problem {
            reason: StatusReason::InvalidSpec,
            message: format!(
                "spec.acceptLostSlots: {e}; write slot ranges from 0 to 16383 as the status \
                 names them, such as 0-99,200"
            ),
        })?),
    };
    Ok(Desired {
        persistent: cluster.spec.persistence.enabled,
        formed: formed(cluster),
        lost_slots: LostSlotsPolicy {
            refill: cluster.spec.on_slots_lost == SlotsLostPolicy::Refill,
            accepted: accepted.filter(|_| !acknowledgement_spent(cluster)),
        },
        ..size(cluster)
    })
}

/// Whether the cluster served its slots before (`status.formed`, or a status from before that
/// field that counted shards).
fn formed(cluster: &ValkeyCluster) -> bool {
    cluster
        .status
        .as_ref()
        .is_some_and(|s| s.formed == Some(true) || s.shards > 0)
}

/// Whether `spec.acceptLostSlots` as it is now was acted on and the cluster was whole again
/// since: it acknowledged one loss, and allows nothing more.
fn acknowledgement_spent(cluster: &ValkeyCluster) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.accepted_loss.as_ref())
        .is_some_and(|a| a.spent && cluster.spec.accept_lost_slots.as_deref() == Some(&a.slots))
}

/// [`for_engine`], or with a malformed `spec.acceptLostSlots` read as accepting no loss: what the
/// engine's safety rules go by while the spec cannot be read whole.
pub fn for_engine_or_safest(cluster: &ValkeyCluster) -> Desired {
    for_engine(cluster).unwrap_or_else(|_| Desired {
        persistent: cluster.spec.persistence.enabled,
        formed: formed(cluster),
        lost_slots: LostSlotsPolicy {
            refill: cluster.spec.on_slots_lost == SlotsLostPolicy::Refill,
            accepted: None,
        },
        ..size(cluster)
    })
}

/// How many shards, how many replicas each.
fn size(cluster: &ValkeyCluster) -> Desired {
    Desired::new(
        cluster.spec.shards.max(1) as u32,
        cluster.spec.replicas.max(0) as u32,
    )
}

/// Every member the spec wants, shard by shard.
pub fn members(cluster: &ValkeyCluster, auth: &NodeAuth) -> Vec<DesiredMember> {
    members_of(cluster, auth, size(cluster).shards)
}

/// Every member of `shards` shards (the spec's, or a restore's while it is not served: see
/// [`super::restore::shards_now`]), shard by shard.
pub fn members_of(cluster: &ValkeyCluster, auth: &NodeAuth, shards: u32) -> Vec<DesiredMember> {
    Desired::new(shards, size(cluster).replicas)
        .slots_of_members()
        .filter_map(|(shard, index)| {
            let node = desired_node(cluster, shard, index, auth, None)?;
            Some(DesiredMember {
                shard,
                index,
                name: node.metadata.name.clone()?,
                place: format!("shard {shard}, member {index}"),
                node,
            })
        })
        .collect()
}

/// Settings every member of a cluster runs with: cluster mode; the rest is every server's.
fn cluster_mode(cluster: &ValkeyCluster) -> BTreeMap<String, String> {
    let mut config = BTreeMap::from([
        ("cluster-enabled".to_owned(), "yes".to_owned()),
        ("cluster-config-file".to_owned(), "nodes.conf".to_owned()),
        // Fail over within seconds rather than Valkey's default 15 s.
        ("cluster-node-timeout".to_owned(), "5000".to_owned()),
        // The operator places replicas per shard; Valkey must not move them between shards.
        (
            "cluster-allow-replica-migration".to_owned(),
            "no".to_owned(),
        ),
    ]);
    // Valkey 9 can hand a primary's slots to its replica as part of a graceful shutdown, so a
    // deleted or evicted primary pod costs no failover timeout. Older servers refuse the value.
    if image_major_version(&cluster.spec.image).is_some_and(|major| major >= 9) {
        config.insert("shutdown-on-sigterm".to_owned(), "failover".to_owned());
    }
    // The cluster's own bus port (see [`bus`]): a node of another cluster cannot join it.
    config.extend(bus::settings(bus::port(cluster)));
    config
}

/// The ValkeyNode member `(shard, index)` of `cluster` should be. `allowed_revision` is the
/// parent's gate on pod restarts (see `spec.allowedRevision`), decided by the caller.
pub fn desired_node(
    cluster: &ValkeyCluster,
    shard: u32,
    index: u32,
    auth: &NodeAuth,
    allowed_revision: Option<String>,
) -> Option<ValkeyNode> {
    let cluster_name = cluster.meta().name.as_deref()?;
    let settings = cluster.spec.server_settings();
    let parts = NodeParts {
        name: member_name(cluster_name, shard, index),
        namespace: cluster.meta().namespace.clone(),
        labels: member_labels(cluster_name, shard, index),
        owner: cluster.controller_owner_ref(&())?,
        affinity: placement::Spread::shard(cluster_name, shard, |spread| {
            placement::affinity(settings.affinity.as_ref(), settings.placement, &spread)
        }),
        mode: cluster_mode(cluster),
    };
    Some(server_node(&settings, parts, auth, allowed_revision))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of acceptLostSlots acknowledges one loss: spent (acted on, and the cluster whole
    /// again), it allows nothing more until it changes or is set again; and a cluster whose
    /// status says it formed stays formed though no shard serves slots now.
    #[test]
    fn a_spent_acknowledgement_allows_nothing_more() {
        let mut c = crate::cluster::fixtures::cluster(crate::cluster::fixtures::CLUSTER);
        c.spec.accept_lost_slots = Some("0-5460".into());
        let accepted = |c: &ValkeyCluster| for_engine(c).map(|d| d.lost_slots.accepted.is_some());
        assert_eq!(accepted(&c), Ok(true));
        c.status = Some(valkey_api::v1alpha1::ValkeyClusterStatus {
            formed: Some(true),
            accepted_loss: Some(valkey_api::v1alpha1::AcceptedLoss {
                slots: "0-5460".into(),
                spent: false,
            }),
            ..Default::default()
        });
        assert_eq!(accepted(&c), Ok(true), "in use");
        assert!(
            for_engine(&c).is_ok_and(|d| d.formed),
            "formed, with 0 shards"
        );
        if let Some(record) = c.status.as_mut().and_then(|s| s.accepted_loss.as_mut()) {
            record.spent = true;
        }
        assert_eq!(accepted(&c), Ok(false), "spent");
        c.spec.accept_lost_slots = Some("0-5461".into());
        assert_eq!(
            accepted(&c),
            Ok(true),
            "another value acknowledges another loss"
        );
    }
    use crate::cluster::fixtures::{CLUSTER, cluster};

    /// `spec.metrics` becomes every member's exporter; off (the default), no member has one, so
    /// their pods stay as they were.
    #[test]
    fn metrics_give_every_member_an_exporter_and_none_by_default() {
        let auth = NodeAuth::of("cache");
        assert!(
            members(&cluster(CLUSTER), &auth)
                .iter()
                .all(|m| m.node.spec.exporter.is_none())
        );
        let metered = cluster(&format!(
            "{CLUSTER}  metrics: {{enabled: true, image: \"oliver006/redis_exporter:v1.62.0\"}}\n"
        ));
        let all = members(&metered, &auth);
        assert_eq!(all.len(), 6);
        for member in &all {
            let exporter = member.node.spec.exporter.clone();
            assert_eq!(
                exporter.map(|e| e.image),
                Some("oliver006/redis_exporter:v1.62.0".to_owned()),
                "{}",
                member.name
            );
        }
    }

    #[test]
    fn a_member_node_names_its_place_and_carries_the_cluster_settings() {
        let auth = NodeAuth::of("cache");
        let node =
            desired_node(&cluster(CLUSTER), 1, 0, &auth, None).unwrap_or_else(|| panic!("no node"));
        assert_eq!(node.metadata.name.as_deref(), Some("cache-1-0"));
        let owner = node
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .unwrap_or_else(|| panic!("no owner"));
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ValkeyCluster", Some(true))
        );
        let config = node.spec.config.clone().unwrap_or_default();
        assert_eq!(
            config.get("cluster-enabled").map(String::as_str),
            Some("yes")
        );
        assert_eq!(
            config.get("cluster-node-timeout").map(String::as_str),
            Some("2000"),
            "the user's tunables win"
        );
        assert_eq!(config.get("maxmemory").map(String::as_str), Some("100mb"));
        assert_eq!(
            config.get("appendonly").map(String::as_str),
            Some("yes"),
            "persistence is on by default"
        );
        assert_eq!(
            config.get("save"),
            None,
            "with persistence, Valkey's save points"
        );
        assert_eq!(
            config.get("aclfile").map(String::as_str),
            Some("/etc/valkey/credentials/users.acl")
        );
        assert_eq!(
            config.get("protected-mode").map(String::as_str),
            Some("no"),
            "the ACL and the NetworkPolicy decide who connects"
        );
        let pod_labels = node.spec.pod_labels.clone().unwrap_or_default();
        assert_eq!(
            pod_labels.get("valkey.io/shard").map(String::as_str),
            Some("1"),
            "placement labels win"
        );
        assert_eq!(pod_labels.get("team").map(String::as_str), Some("data"));
        let credentials = node
            .spec
            .credentials
            .clone()
            .unwrap_or_else(|| panic!("no credentials"));
        assert_eq!(
            (
                credentials.secret_name.as_str(),
                credentials.username.as_str()
            ),
            ("cache-acl", "healthcheck")
        );
        assert_eq!(
            credentials.files.as_deref(),
            Some(&["users.acl".to_owned(), "replication.conf".to_owned()][..]),
            "pods mount the ACL file and the replication login, not the operator's passwords"
        );
    }

    /// Without persistence a server keeps no file it could reload: an in-place restart must not
    /// bring back an old snapshot as if it were its data. A user's own save points win.
    #[test]
    fn without_persistence_no_snapshot_is_left_to_reload() {
        let cache = |yaml: &str| {
            let node = desired_node(
                &cluster(&format!("{yaml}  persistence: {{enabled: false}}\n")),
                0,
                0,
                &NodeAuth::of("cache"),
                None,
            )
            .unwrap_or_else(|| panic!("no node"));
            node.spec.config.unwrap_or_default()
        };
        let config = cache(CLUSTER);
        assert_eq!(config.get("save").map(String::as_str), Some(""));
        assert_eq!(
            config.get("rdb-del-sync-files").map(String::as_str),
            Some("yes")
        );
        assert_eq!(config.get("appendonly"), None);
        let own = cache(&CLUSTER.replace("config: {", "config: {save: \"900 1\", "));
        assert_eq!(own.get("save").map(String::as_str), Some("900 1"));
    }

    /// A replica's first sync does not wait Valkey's default 5 s for company; a user's own delay
    /// wins.
    #[test]
    fn a_replicas_full_sync_starts_at_once_unless_the_user_says_otherwise() {
        let config_of = |yaml: &str| {
            desired_node(&cluster(yaml), 0, 1, &NodeAuth::of("c"), None)
                .unwrap_or_else(|| panic!("no node"))
                .spec
                .config
                .unwrap_or_default()
        };
        assert_eq!(
            config_of(CLUSTER)
                .get("repl-diskless-sync-delay")
                .map(String::as_str),
            Some("0")
        );
        let own =
            config_of(&CLUSTER.replace("config: {", "config: {repl-diskless-sync-delay: \"5\", "));
        assert_eq!(
            own.get("repl-diskless-sync-delay").map(String::as_str),
            Some("5")
        );
    }

    #[test]
    fn valkey_9_hands_over_on_shutdown() {
        assert_eq!(image_major_version("valkey/valkey:9.1"), Some(9));
        assert_eq!(
            image_major_version("registry:5000/valkey/valkey:8.0.1"),
            Some(8)
        );
        assert_eq!(image_major_version("registry:5000/valkey/valkey"), None);
        assert_eq!(image_major_version("valkey/valkey:latest"), None);
        assert_eq!(
            image_major_version("valkey/valkey:9.0-alpine@sha256:00"),
            Some(9)
        );
        let node = desired_node(&cluster(CLUSTER), 0, 0, &NodeAuth::of("cache"), None)
            .unwrap_or_else(|| panic!("no node"));
        let config = node.spec.config.unwrap_or_default();
        assert_eq!(
            config.get("shutdown-on-sigterm").map(String::as_str),
            Some("failover")
        );
    }

    #[test]
    fn an_open_cluster_keeps_the_operators_users_and_the_same_node_spec() {
        let secure = cluster(CLUSTER);
        let mut open = secure.clone();
        open.spec.auth.enabled = false;
        let node = |c: &ValkeyCluster| {
            desired_node(c, 0, 0, &NodeAuth::of("cache"), None).unwrap_or_else(|| panic!("no node"))
        };
        // Turning authentication off or on changes users, which reach servers live: no restart.
        assert_eq!(node(&open).spec, node(&secure).spec);
        let config = node(&open).spec.config.unwrap_or_default();
        assert!(config.contains_key("aclfile") && config.contains_key("include"));
    }

    #[test]
    fn every_wanted_member_is_built_once_in_shard_order() {
        let members = members(&cluster(CLUSTER), &NodeAuth::of("cache"));
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cache-0-0",
                "cache-0-1",
                "cache-1-0",
                "cache-1-1",
                "cache-2-0",
                "cache-2-1"
            ]
        );
        assert!(
            members
                .iter()
                .all(|m| m.node.spec.allowed_revision.is_none())
        );
        let gated = members[0].gated(Some("r1".into()));
        assert_eq!(gated.spec.allowed_revision.as_deref(), Some("r1"));
    }
}
