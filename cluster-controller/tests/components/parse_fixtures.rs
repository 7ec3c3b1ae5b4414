//! The parsers against replies captured from real Valkey 9.1 and 8.0 servers.

use crate::common;

use cluster_controller::valkey::cluster_info::{self, ClusterState};
use cluster_controller::valkey::cluster_nodes::{self, ClusterNodes, LinkState};
use cluster_controller::valkey::cluster_shards::{self, Health, ShardRole};
use cluster_controller::valkey::info::{self, LinkStatus, Role};
use cluster_controller::valkey::slot_migrations::{self, JobState, Operation};
use cluster_controller::valkey::slots::SlotSet;
use cluster_controller::valkey::{Version, supports_atomic_slot_migration};

fn nodes(name: &str) -> ClusterNodes {
    cluster_nodes::parse(&common::text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn slots(text: &str) -> SlotSet {
    text.parse().unwrap()
}

#[test]
fn cluster_nodes_healthy_with_replicas_and_hostnames() {
    let view = nodes("v9/cluster_nodes_primary");
    assert_eq!(view.nodes().len(), 7);
    let me = view.myself().unwrap();
    assert_eq!(me.ip.as_deref(), Some("127.0.0.61"));
    assert_eq!((me.port, me.bus_port), (7100, 17100));
    assert_eq!(me.hostname.as_deref(), Some("valkey-0.example.test"));
    assert!(me.is_primary() && me.flags.myself && me.is_healthy());
    assert_eq!(me.slots, slots("0-5460"));
    assert_eq!((me.ping_sent, me.pong_received), (0, 0));

    assert_eq!(view.primaries().count(), 4);
    assert_eq!(view.assigned_slots(), &SlotSet::all());
    for primary in view.primaries().filter(|p| !p.slots.is_empty()) {
        let replicas: Vec<_> = view.replicas_of(&primary.id).collect();
        assert_eq!(replicas.len(), 1, "{}", primary.id);
        assert!(replicas[0].is_replica() && replicas[0].link == LinkState::Connected);
    }
    let spare = view
        .nodes()
        .iter()
        .find(|n| n.hostname.as_deref() == Some("valkey-6.example.test"))
        .unwrap();
    assert!(spare.is_primary() && spare.slots.is_empty());
    assert!(
        view.nodes()
            .iter()
            .all(|n| n.migrating.is_empty() && n.importing.is_empty())
    );

    let replica_view = nodes("v9/cluster_nodes_replica");
    let me = replica_view.myself().unwrap();
    assert!(me.is_replica() && me.flags.myself);
    let primary = replica_view.owner_of(0).unwrap();
    assert_eq!(me.primary_id.as_ref(), Some(&primary.id));
    assert_eq!(primary.ip.as_deref(), Some("127.0.0.61"));
}

#[test]
fn cluster_nodes_without_hostnames_on_8() {
    let view = nodes("v8/cluster_nodes_primary");
    assert_eq!(view.nodes().len(), 4);
    assert!(
        view.nodes()
            .iter()
            .all(|n| n.hostname.is_none() && n.is_healthy())
    );
    assert_eq!(view.assigned_slots(), &SlotSet::all());
}

#[test]
fn cluster_nodes_suspected_failed_and_failed_over() {
    for version in ["v9", "v8"] {
        let pfail = nodes(&format!("{version}/cluster_nodes_pfail"));
        let suspect: Vec<_> = pfail.nodes().iter().filter(|n| n.flags.pfail).collect();
        assert_eq!(suspect.len(), 1, "{version}");
        assert!(!suspect[0].is_healthy() && suspect[0].link == LinkState::Disconnected);
        assert!(suspect[0].ping_sent > 0);

        let failed = nodes(&format!("{version}/cluster_nodes_failed_primary"));
        let dead = failed.get(&suspect[0].id).unwrap();
        assert!(dead.flags.fail && !dead.flags.pfail && dead.is_primary());
        assert!(
            !dead.slots.is_empty(),
            "{version}: a dead primary without replica keeps its slots"
        );
    }

    // 9.1: the replica of the killed primary took over its slots; the old primary is failed
    // and serves nothing.
    let after = nodes("v9/cluster_nodes_after_failover");
    let old = after.nodes().iter().find(|n| n.flags.fail).unwrap();
    assert!(old.is_primary() && old.slots.is_empty());
    let promoted = after
        .nodes()
        .iter()
        .find(|n| n.hostname.as_deref() == Some("valkey-4.example.test"))
        .unwrap();
    assert!(promoted.is_primary() && promoted.primary_id.is_none());
    assert_eq!(promoted.slots, slots("5461-10921"));
}

#[test]
fn cluster_nodes_handshake_and_noaddr() {
    let view = nodes("v9/cluster_nodes_handshake");
    let meeting: Vec<_> = view.nodes().iter().filter(|n| n.flags.handshake).collect();
    assert_eq!(meeting.len(), 1);
    assert_eq!(meeting[0].ip.as_deref(), Some("127.0.0.69"));
    assert!(meeting[0].hostname.is_none() && !meeting[0].is_healthy());

    let view = nodes("v8/cluster_nodes_noaddr");
    let lost = view.nodes().iter().find(|n| n.flags.noaddr).unwrap();
    assert_eq!((lost.ip.as_deref(), lost.port, lost.bus_port), (None, 0, 0));
    assert!(lost.flags.fail && lost.is_primary() && !lost.slots.is_empty());
}

#[test]
fn cluster_nodes_open_slot_markers_on_8() {
    let slot: u16 = common::text("v8/setslot_slot").trim().parse().unwrap();
    let source = nodes("v8/setslot_2_migrating_source");
    let target = nodes("v8/setslot_2_migrating_target");
    let (source_id, target_id) = (&source.myself().unwrap().id, &target.myself().unwrap().id);

    assert_eq!(
        source.myself().unwrap().migrating,
        [(slot, target_id.clone())]
    );
    assert_eq!(
        target.myself().unwrap().importing,
        [(slot, source_id.clone())]
    );
    let seen_by_source = source.slot_view(slot);
    assert_eq!(seen_by_source.owner.as_ref(), Some(source_id));
    assert_eq!(seen_by_source.migrating_to.as_ref(), Some(target_id));
    assert_eq!(seen_by_source.importing_from, None);
    let seen_by_target = target.slot_view(slot);
    assert_eq!(seen_by_target.owner.as_ref(), Some(source_id));
    assert_eq!(seen_by_target.importing_from.as_ref(), Some(source_id));
    // Markers are shown on `myself` only: the third primary sees nothing open.
    let other = nodes("v8/setslot_2_migrating_other").slot_view(slot);
    assert_eq!((other.migrating_to, other.importing_from), (None, None));

    // After SETSLOT NODE on the target, the slot is a lone range on it and cut out of the source.
    let done = nodes("v8/setslot_7_done_other");
    assert_eq!(done.owner_of(slot).map(|n| &n.id), Some(target_id));
    let src_line = done.get(source_id).unwrap();
    assert!(!src_line.slots.contains(slot) && src_line.slots.contains(slot - 1));
}

#[test]
fn info_primary_and_replica_on_both_versions() {
    for (version, expected) in [("v9", Version::new(9, 1, 2)), ("v8", Version::new(8, 0, 1))] {
        let primary = info::parse(&common::text(&format!("{version}/info_primary"))).unwrap();
        assert_eq!(primary.server_version().unwrap(), expected);
        assert_eq!(primary.redis_version().unwrap(), Version::new(7, 2, 4));
        assert_eq!(primary.role().unwrap(), Role::Primary);
        assert_eq!(primary.connected_replicas().unwrap(), 1);
        let replicas = primary.replicas().unwrap();
        assert_eq!(replicas.len(), 1);
        assert_eq!(replicas[0].state, "online");
        assert!(replicas[0].ip.starts_with("127.0.0.") && replicas[0].port == 7100);
        assert!(replicas[0].offset > 0);
        assert_eq!(primary.master_link_status().unwrap(), None);
        assert_eq!(primary.slave_repl_offset().unwrap(), None);
        assert_eq!(primary.master_sync_in_progress().unwrap(), None);
        assert!(!primary.loading().unwrap());
        assert!(primary.cluster_enabled().unwrap());
        assert!(primary.master_repl_offset().unwrap() > 0);
        assert!(
            primary
                .section("replication")
                .unwrap()
                .contains(&"role".to_string())
        );
        assert_eq!(
            supports_atomic_slot_migration(primary.server_version().unwrap()),
            version == "v9"
        );

        let replica = info::parse(&common::text(&format!("{version}/info_replica"))).unwrap();
        assert_eq!(replica.role().unwrap(), Role::Replica);
        assert_eq!(replica.master_link_status().unwrap(), Some(LinkStatus::Up));
        assert_eq!(replica.master_sync_in_progress().unwrap(), Some(false));
        assert!(replica.slave_repl_offset().unwrap().unwrap() > 0);
        assert!(replica.replicas().unwrap().is_empty());
        assert_eq!(
            replica
                .get("master_host")
                .map(|h| h.starts_with("127.0.0.")),
            Some(true)
        );
    }
    let promoted = info::parse(&common::text("v9/info_promoted_replica")).unwrap();
    assert_eq!(promoted.role().unwrap(), Role::Primary);
}

#[test]
fn cluster_info_ok_and_fail() {
    for version in ["v9", "v8"] {
        let ok = cluster_info::parse(&common::text(&format!("{version}/cluster_info_ok"))).unwrap();
        assert_eq!(ok.state, ClusterState::Ok);
        assert_eq!(
            (ok.slots_assigned, ok.slots_ok, ok.slots_fail),
            (16384, 16384, 0)
        );
        assert!(ok.known_nodes >= 4 && ok.size >= 3);
        assert!(ok.current_epoch >= ok.my_epoch);

        let fail =
            cluster_info::parse(&common::text(&format!("{version}/cluster_info_fail"))).unwrap();
        assert_eq!(fail.state, ClusterState::Fail);
        assert!(fail.slots_fail > 0);
        assert_eq!(
            fail.slots_ok + fail.slots_fail + fail.slots_pfail,
            fail.slots_assigned
        );
        assert!(fail.fields.contains_key("cluster_stats_messages_sent"));
    }
}

#[test]
fn cluster_shards_resp2_and_resp3_agree() {
    for version in ["v9", "v8"] {
        let [resp2, resp3] = common::both(&format!("{version}/cluster_shards"));
        let shards = cluster_shards::parse(&resp2).unwrap();
        assert_eq!(shards, cluster_shards::parse(&resp3).unwrap(), "{version}");
        let all = shards
            .iter()
            .fold(SlotSet::new(), |acc, s| acc.union(&s.slots));
        assert_eq!(all, SlotSet::all());
        for shard in &shards {
            // 9.x names each shard; 8.0 does not send the field.
            assert_eq!(shard.id.is_some(), version == "v9");
            let primary = shard.primary().unwrap();
            assert_eq!(primary.health, Health::Online);
            assert!(primary.ip.is_some() && primary.port == Some(7100));
        }
        let with_replica = shards.iter().filter(|s| s.nodes.len() == 2).count();
        assert_eq!(with_replica, if version == "v9" { 3 } else { 1 });
        assert!(
            shards
                .iter()
                .flat_map(|s| &s.nodes)
                .any(|n| n.role == ShardRole::Replica)
        );
    }
    let v9 = cluster_shards::parse(&common::value("v9/cluster_shards.resp3")).unwrap();
    assert!(
        v9.iter()
            .flat_map(|s| &s.nodes)
            .all(|n| n.hostname.is_some())
    );
    // The empty primary is a shard of its own with no slots.
    assert_eq!(v9.iter().filter(|s| s.slots.is_empty()).count(), 1);
}

#[test]
fn getslotmigrations_through_a_migration() {
    for name in ["none"] {
        for value in common::both(&format!("v9/getslotmigrations_{name}")) {
            assert!(slot_migrations::parse(&value).unwrap().is_empty());
        }
    }
    let [resp2, resp3] = common::both("v9/getslotmigrations_source_started");
    let started = slot_migrations::parse(&resp2).unwrap();
    assert_eq!(started, slot_migrations::parse(&resp3).unwrap());
    assert_eq!(started.len(), 1);
    let job = &started[0];
    assert_eq!(job.operation, Operation::Export);
    assert_eq!(job.slots, slots("0-99"));
    assert!(matches!(job.state, JobState::InProgress(_)));
    assert_eq!(job.message, None);
    assert_eq!(job.name.len(), 40);
    assert!(job.source_node.is_some() && job.target_node.is_some());
    assert!(job.create_time > 0 && job.last_update_time >= job.create_time);

    let target =
        slot_migrations::parse(&common::value("v9/getslotmigrations_target_started.resp3"))
            .unwrap();
    assert_eq!(target[0].operation, Operation::Import);
    assert_eq!(target[0].name, job.name, "one job name on both sides");
    assert!(!target[0].state.is_finished());

    for side in ["source", "target"] {
        for value in common::both(&format!("v9/getslotmigrations_{side}_success")) {
            let jobs = slot_migrations::parse(&value).unwrap();
            assert_eq!(jobs[0].state, JobState::Success);
            assert_eq!(jobs[0].name, job.name);
        }
    }
}

#[test]
fn getslotmigrations_cancelled_and_failed() {
    let cancelled = slot_migrations::parse(&common::value(
        "v9/getslotmigrations_source_cancelled.resp2",
    ))
    .unwrap();
    // Newest first: the cancelled two-range job, then the earlier success.
    assert_eq!(cancelled.len(), 2);
    assert_eq!(cancelled[0].state, JobState::Cancelled);
    assert_eq!(cancelled[0].slots, slots("100-149,170-199"));
    assert_eq!(cancelled[1].state, JobState::Success);
    assert!(cancelled[0].create_time >= cancelled[1].create_time);

    let failed =
        slot_migrations::parse(&common::value("v9/getslotmigrations_source_failed.resp3")).unwrap();
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[0].state, JobState::Failed);
    assert_eq!(failed[0].slots, slots("200-299"));
    assert!(
        failed[0]
            .message
            .as_deref()
            .unwrap()
            .contains("Connection lost")
    );
}
