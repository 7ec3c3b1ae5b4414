//! The pure decision, from observations built out of the captured replies in `fixtures/`
//! (see `common/world.rs` for how the members' views are made from one capture).

use std::time::Duration;

use crate::common;

use cluster_controller::engine::{
    Action, Decision, Desired, NodeState, Observation, Reach, Reason, decide, health,
};
use cluster_controller::plan::migration::legacy::Intent;
use cluster_controller::valkey::{cluster_info, cluster_nodes, info, slot_migrations};

use common::world::*;

#[test]
fn a_healthy_capture_is_steady_and_costs_nothing() {
    let world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    match world.decide(THREE_BY_ONE) {
        Decision::Steady(health) => {
            assert_eq!(health.ready_shards, 3);
            assert_eq!(health.replicas_in_sync, 3);
            assert_eq!(health.slots_assigned, 16384);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn health_is_read_on_every_pass_not_only_when_steady() {
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    world.down("c-1-1");
    let decision = world.decide(THREE_BY_ONE);
    assert!(!matches!(decision, Decision::Steady(_)), "{decision}");
    let h = health(&THREE_BY_ONE, &world.members, &world.observed).expect("health");
    assert_eq!((h.shards, h.ready_shards), (3, 2), "{h:?}");
    assert_eq!(h.replicas_in_sync, 2);
    assert_eq!(h.slots_assigned, 16384);
    // A primary that is down still owns its slots in the others' views.
    world.down("c-2-0");
    let h = health(&THREE_BY_ONE, &world.members, &world.observed).expect("health");
    assert_eq!((h.shards, h.ready_shards), (3, 1), "{h:?}");
}

#[test]
fn a_node_of_no_member_is_forgotten_everywhere() {
    let world = World::new("v9", &v9_primary(), v9_members(), &[]);
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::Forget { on, node_id },
            reason: Reason::RemovingNodes,
            ..
        } => {
            assert_eq!(node_id.as_str(), "758b85124e23b8bc927ba859c3eba4f95a1f8844");
            assert_eq!(on.member, "c-0-0");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn members_not_created_yet_are_waited_for() {
    let world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    let decision = world.decide(Desired::new(4, 1));
    assert_eq!(decision.reason(), Reason::WaitingForNodes, "{decision}");
    assert!(
        decision.message().contains("shard 3 member 0"),
        "{decision}"
    );
    assert!(
        decision.message().contains("shard 3 member 1"),
        "{decision}"
    );
}

/// While a backup of the cluster is captured, no slot move starts (the backup would hold a slot
/// in two shards or in none); the wait names the backup.
#[test]
fn no_slot_move_starts_while_a_backup_runs() {
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let world = World::new("v9", &v9_primary(), members, &[]);
    let held = Desired {
        slot_moves_held: Some("nightly".into()),
        ..Desired::new(4, 0)
    };
    let decision = world.decide(held);
    assert_eq!(decision.reason(), Reason::BackupRunning, "{decision}");
    assert!(decision.message().contains("nightly"), "{decision}");
    assert!(
        matches!(
            world.decide(Desired::new(4, 0)),
            Decision::Act {
                action: Action::StartAtomicMigration { .. },
                ..
            }
        ),
        "without the backup the move starts"
    );
}

#[test]
fn a_new_shard_gets_slots_by_atomic_migration_on_valkey_9() {
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let world = World::new("v9", &v9_primary(), members, &[]);
    match world.decide(Desired::new(4, 1)) {
        Decision::Wait { reason, .. } => assert_eq!(reason, Reason::WaitingForNodes),
        other => panic!("{other}"),
    }
    // Without replicas wanted, the replicas are surplus, but slots move first.
    let decision = world.decide(Desired::new(4, 0));
    match decision {
        Decision::Act {
            action:
                Action::StartAtomicMigration {
                    source,
                    target,
                    ranges,
                    also,
                },
            reason: Reason::MigratingSlots,
            ..
        } => {
            assert_eq!(source.member, "c-0-0");
            assert_eq!(target.member, "c-3-0");
            // Shard 0 keeps 4096 of its 5461 slots and gives its highest.
            let moved: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            assert_eq!(moved, ["4096-5460"]);
            assert!(also.is_empty(), "shard 0 gives to the new shard only");
        }
        other => panic!("{other}"),
    }
}

/// A shard that leaves gives its slots to both that stay with one `CLUSTER MIGRATESLOTS`
/// naming each (a job per target, started together), not one job per pass.
#[test]
fn a_leaving_shard_starts_its_moves_to_every_target_in_one_command() {
    // Without the stranger the capture also holds (.67, met but no member), which would be
    // forgotten first.
    let world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    match world.decide(Desired::new(2, 1)) {
        Decision::Act {
            action:
                Action::StartAtomicMigration {
                    source,
                    target,
                    ranges,
                    also,
                },
            reason: Reason::Draining,
            ..
        } => {
            assert_eq!(source.member, "c-2-0");
            let mut targets = vec![target.member.clone()];
            targets.extend(also.iter().map(|m| m.target.member.clone()));
            targets.sort();
            assert_eq!(targets, ["c-0-0", "c-1-0"]);
            // Between them, every slot of shard 2 (10922-16383 in the capture), each once.
            let mut given: Vec<u16> = ranges
                .iter()
                .chain(also.iter().flat_map(|m| m.ranges.iter()))
                .flat_map(|r| r.start()..=r.end())
                .collect();
            given.sort_unstable();
            given.dedup();
            let (first, last, count) = (given.first(), given.last(), given.len());
            assert_eq!(
                (first, last, count),
                (Some(&10922), Some(&16383), 16384 - 10922),
                "slots given, first, last and how many"
            );
        }
        other => panic!("{other}"),
    }
}

/// On Valkey 8 a leaving shard drains into every shard that stays in one step: the legacy way
/// has no job Valkey runs by itself, so the step moves each pair's slots side by side rather than
/// one pair after another (a scale-in took 2.14 times a direct script's time that way).
#[test]
fn a_leaving_shard_drains_into_every_target_at_once_on_valkey_8() {
    let members = vec![
        member(0, 0, "127.0.0.71"),
        member(1, 0, "127.0.0.72"),
        member(2, 0, "127.0.0.73"),
    ];
    let capture = common::text("v8/cluster_nodes_primary");
    let world = World::new("v8", &capture, members, &["127.0.0.74"]);
    match world.decide(Desired::new(2, 0)) {
        Decision::Act {
            action: Action::MigrateSlots(m),
            reason: Reason::Draining,
            ..
        } => {
            assert_eq!(m.source.member, "c-2-0");
            let mut targets = vec![m.target.member.clone()];
            targets.extend(m.also.iter().map(|o| o.target.member.clone()));
            targets.sort();
            assert_eq!(targets, ["c-0-0", "c-1-0"], "every staying shard at once");
            assert!(
                m.also
                    .iter()
                    .all(|o| o.source.member == "c-2-0" && o.also.is_empty()),
                "the joined moves are the leaving shard's own, one level deep"
            );
            // Between them, every slot of shard 2 (10922-16383 in the capture), each once.
            let mut given: Vec<u16> = std::iter::once(&m)
                .chain(m.also.iter())
                .flat_map(|o| o.slots.iter())
                .collect();
            given.sort_unstable();
            let count = given.len();
            given.dedup();
            assert_eq!(count, given.len(), "no slot given twice");
            assert_eq!(
                (given.first(), given.last(), count),
                (Some(&10922), Some(&16383), 16384 - 10922),
                "slots given, first, last and how many"
            );
        }
        other => panic!("{other}"),
    }
}

/// `world` with `member`'s CLUSTER INFO saying `cluster_state:fail`.
fn with_cluster_state_fail(world: &mut World, member: &str) {
    let fail = cluster_info::parse(&common::text("v9/cluster_info_fail")).expect("cluster info");
    restate(world, member, Some(fail), None);
}

/// `world` with `member`'s observed state changed: its CLUSTER INFO and/or its migration jobs.
fn restate(
    world: &mut World,
    member: &str,
    cluster_info: Option<cluster_info::ClusterInfo>,
    jobs: Option<Vec<slot_migrations::SlotMigrationJob>>,
) {
    let Some(Reach::Up(state)) = world.observed.members.get(member) else {
        panic!("{member} observed");
    };
    let state = NodeState::new(
        state.address(),
        state.nodes().clone(),
        state.info().clone(),
        cluster_info.unwrap_or_else(|| state.cluster_info().clone()),
        state.keys(),
        jobs.unwrap_or_else(|| state.migrations().to_vec()),
    )
    .expect("state");
    world
        .observed
        .members
        .insert(member.into(), Reach::Up(Box::new(state)));
}

/// A new shard's primary that just joined reports `cluster_state:fail` for Valkey's rejoin delay
/// (up to 5 s): with every slot served and every slot owner healthy in its view, slots move to
/// it meanwhile; a source in that state is waited for, as is a target that sees a failing owner.
#[test]
fn slots_move_to_a_new_primary_while_valkey_holds_its_state_at_fail_for_the_rejoin_delay() {
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let mut world = World::new("v9", &v9_primary(), members.clone(), &[]);
    with_cluster_state_fail(&mut world, "c-3-0");
    let decision = world.decide(Desired::new(4, 0));
    assert!(
        matches!(
            decision,
            Decision::Act {
                action: Action::StartAtomicMigration { .. },
                ..
            }
        ),
        "{decision}"
    );

    let mut source_fails = World::new("v9", &v9_primary(), members.clone(), &[]);
    with_cluster_state_fail(&mut source_fails, "c-0-0");
    let decision = source_fails.decide(Desired::new(4, 0));
    assert_eq!(decision.reason(), Reason::Converging, "{decision}");

    // The new primary sees the second primary failing: it may be the one cut off.
    let failing = v9_primary().replace(
        "valkey-1.example.test master -",
        "valkey-1.example.test master,fail -",
    );
    assert_ne!(failing, v9_primary());
    let mut cut_off = World::new("v9", &v9_primary(), members, &[]);
    cut_off.observed.members.insert(
        "c-3-0".into(),
        Reach::Up(Box::new(node("v9", &failing, "127.0.0.67", &[]))),
    );
    with_cluster_state_fail(&mut cut_off, "c-3-0");
    let decision = cut_off.decide(Desired::new(4, 0));
    assert_eq!(decision.reason(), Reason::Converging, "{decision}");
}

/// `world` with the captured running export job on each of `sources`.
fn with_running_jobs(world: &mut World, sources: &[&str]) {
    let jobs = slot_migrations::parse(&common::value("v9/getslotmigrations_source_started.resp2"))
        .expect("jobs");
    for source in sources {
        restate(world, source, None, Some(jobs.clone()));
    }
}

#[test]
fn while_a_sources_job_runs_another_source_starts_its_own_beside_it() {
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let mut world = World::new("v9", &v9_primary(), members, &[]);
    with_running_jobs(&mut world, &["c-0-0"]);
    match world.decide(Desired::new(4, 0)) {
        Decision::Act {
            action: Action::StartAtomicMigration { source, target, .. },
            reason: Reason::MigratingSlots,
            ..
        } => {
            assert_eq!(source.member, "c-1-0", "the next idle source");
            assert_eq!(target.member, "c-3-0");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_running_migration_job_is_waited_for_when_every_source_is_busy() {
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let mut world = World::new("v9", &v9_primary(), members, &[]);
    with_running_jobs(&mut world, &["c-0-0", "c-1-0", "c-2-0"]);
    let decision = world.decide(Desired::new(4, 0));
    assert_eq!(decision.reason(), Reason::MigratingSlots, "{decision}");
    assert!(matches!(decision, Decision::Wait { .. }), "{decision}");
}

#[test]
fn a_dead_primary_with_a_live_replica_is_left_to_the_election() {
    // The capture's .62, marked suspected failing while its replica .65 still replicates it.
    let capture = v9_primary().replace(
        "valkey-1.example.test master -",
        "valkey-1.example.test master,fail? -",
    );
    let mut world = World::new("v9", &capture, v9_members(), &["127.0.0.67"]);
    world.down("c-1-0");
    let decision = world.decide(THREE_BY_ONE);
    assert_eq!(decision.reason(), Reason::FailingOver, "{decision}");
    assert!(decision.message().contains("c-1-1"), "{decision}");
}

#[test]
fn after_the_election_the_engine_waits_for_the_member_and_forgets_nothing() {
    // .62 failed and .65 took over its slots (captured after the failover); .67 holds 0-99.
    let capture = common::text("v9/cluster_nodes_after_failover");
    let mut members = v9_members();
    members.push(member(3, 0, "127.0.0.67"));
    let mut world = World::new("v9", &capture, members, &[]);
    world.down("c-1-0");
    let decision = world.decide(Desired::new(4, 1));
    assert!(!matches!(decision, Decision::Act { .. }), "{decision}");
}

#[test]
fn slots_of_a_dead_primary_without_replica_wait_for_it() {
    // v8: .73 killed; it had no replica.
    let capture = common::text("v8/cluster_nodes_failed_primary");
    let members = vec![
        member(0, 0, "127.0.0.71"),
        member(0, 1, "127.0.0.74"),
        member(1, 0, "127.0.0.72"),
        member(2, 0, "127.0.0.73"),
    ];
    let desired = Desired::new(3, 0);
    let mut world = World::new("v8", &capture, members, &[]);
    world.down("c-2-0");
    let decision = world.decide(desired);
    assert_eq!(decision.reason(), Reason::NodeUnreachable, "{decision}");
    assert!(decision.message().contains("10922-16383"), "{decision}");

    // With every member live (c-2-0 came back as a new node, here standing in as .73's
    // address answering with no knowledge of the old one), the old id is a stranger whose
    // slots are lost: the cluster fails, and waits for the user's word.
    let members = vec![
        member(0, 0, "127.0.0.71"),
        member(0, 1, "127.0.0.74"),
        member(1, 0, "127.0.0.72"),
    ];
    let world = World::new("v8", &capture, members, &[]);
    let decision = world.decide(Desired::new(2, 0));
    match &decision {
        Decision::Blocked {
            reason: Reason::SlotsLost,
            message,
        } => assert!(
            message.contains("10922-16383") && message.contains("acceptLostSlots"),
            "{message}"
        ),
        other => panic!("{other}"),
    }
    assert!(decision.reason().is_failure());
    // Accepted (only those slots, or every lost slot for a cache): forgotten, announced as forced.
    let mut accepted = Desired::new(2, 0);
    accepted.lost_slots.accepted = Some("10922-16383".parse().expect("slots"));
    let mut refill = Desired::new(2, 0);
    refill.lost_slots.refill = true;
    for desired in [accepted, refill] {
        let decision = world.decide(desired);
        assert!(decision.is_forced(), "{decision}");
        match decision {
            Decision::Act {
                action: Action::Forget { node_id, .. },
                reason: Reason::SlotsLost,
                message,
                ..
            } => {
                assert_eq!(node_id.as_str(), "9cfebe444372109dd2edae2ff5be7eea1e5c914d");
                assert!(message.contains("lost"), "{message}");
            }
            other => panic!("{other}"),
        }
    }
    let mut too_little = Desired::new(2, 0);
    too_little.lost_slots.accepted = Some("10922-12000".parse().expect("slots"));
    assert_eq!(world.decide(too_little).reason(), Reason::SlotsLost);
}

/// v8 mid-migration of slot 2853 from .71 to .72 (MIGRATING on the source, IMPORTING on the
/// target), each member seeing its own captured view.
fn v8_mid_migration() -> World {
    let members = vec![
        member(0, 0, "127.0.0.71"),
        member(0, 1, "127.0.0.74"),
        member(1, 0, "127.0.0.72"),
        member(2, 0, "127.0.0.73"),
    ];
    let mut observed = Observation::default();
    for (name, ip, capture) in [
        ("c-0-0", "127.0.0.71", "source"),
        ("c-0-1", "127.0.0.74", "other"),
        ("c-1-0", "127.0.0.72", "target"),
        ("c-2-0", "127.0.0.73", "other"),
    ] {
        let text = common::text(&format!("v8/setslot_2_migrating_{capture}"));
        let state = node("v8", &text, ip, &[]);
        observed
            .members
            .insert(name.into(), Reach::Up(Box::new(state)));
    }
    World { members, observed }
}

#[test]
fn an_open_legacy_slot_is_finished_first() {
    let world = v8_mid_migration();
    let decision = world.decide(Desired::new(3, 0));
    match decision {
        Decision::Act {
            action: Action::MigrateSlots(m),
            reason: Reason::MigratingSlots,
            ..
        } => {
            assert_eq!(m.source.member, "c-0-0");
            assert_eq!(m.target.member, "c-1-0");
            assert_eq!(m.slots.to_string(), "2853");
            assert_eq!(m.intent, Intent::Complete);
            let others: Vec<&str> = m.others.iter().map(|o| o.member.as_str()).collect();
            assert_eq!(others, ["c-2-0"]);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn an_open_legacy_slot_towards_a_leaving_shard_is_rolled_back() {
    let world = v8_mid_migration();
    let decision = world.decide(Desired::new(1, 1));
    match decision {
        Decision::Act {
            action: Action::MigrateSlots(m),
            ..
        } => assert_eq!(m.intent, Intent::Abort),
        other => panic!("{other}"),
    }
}

#[test]
fn rolling_restarts_replicas_first_then_fails_over_each_primary() {
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    for m in &mut world.members {
        m.desired_revision = Some("r2".into());
    }
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::AllowRestart { member },
            reason: Reason::Rolling,
            ..
        } => assert_eq!(member, "c-0-1"),
        other => panic!("{other}"),
    }
    // Released but not yet restarted: wait.
    world.members[1].allowed_revision = Some("r2".into());
    let decision = world.decide(THREE_BY_ONE);
    assert!(
        matches!(
            decision,
            Decision::Wait {
                reason: Reason::Rolling,
                ..
            }
        ),
        "{decision}"
    );
    // Every replica done: the first primary hands over to its replica.
    for m in world.members.iter_mut().filter(|m| m.index == 1) {
        m.current_revision = Some("r2".into());
        m.allowed_revision = Some("r2".into());
    }
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action:
                Action::Failover {
                    on_replica,
                    primary,
                },
            reason: Reason::Rolling,
            ..
        } => {
            assert_eq!(on_replica.member, "c-0-1");
            assert_eq!(primary.member, "c-0-0");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn surplus_replicas_are_forgotten_then_deleted() {
    let world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    let none = Desired::new(3, 0);
    match world.decide(none.clone()) {
        Decision::Act {
            action: Action::Forget { on, node_id },
            reason: Reason::RemovingNodes,
            ..
        } => {
            assert_eq!(on.member, "c-0-0");
            // .64, c-0-1.
            assert_eq!(node_id.as_str(), "2334f6e2f41a9bb4e8032f715ccebd3008e59563");
        }
        other => panic!("{other}"),
    }
    // Once no staying node knows them, they are deleted.
    let gone = ["127.0.0.64", "127.0.0.65", "127.0.0.66", "127.0.0.67"];
    let mut observed = Observation::default();
    for m in v9_members() {
        let ip = m.address.expect("address").ip().to_string();
        // The staying members forgot the leaving ones; the leaving ones still know everyone.
        let drop: &[&str] = if m.index == 0 { &gone } else { &["127.0.0.67"] };
        let state = node("v9", &v9_primary(), &ip, drop);
        observed
            .members
            .insert(m.name.clone(), Reach::Up(Box::new(state)));
    }
    let world = World {
        members: v9_members(),
        observed,
    };
    match world.decide(none) {
        Decision::Act {
            action: Action::DeleteMember { member },
            reason: Reason::RemovingNodes,
            ..
        } => assert_eq!(member, "c-0-1"),
        other => panic!("{other}"),
    }
}

#[test]
fn a_member_at_a_new_address_is_met_again() {
    // c-2-1 (.66) restarted at .68; everyone still knows it at .66.
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    let moved = v9_primary()
        .replace("127.0.0.66:7100", "127.0.0.68:7100")
        .replace("myself,", "");
    let state = node("v9", &moved, "127.0.0.68", &["127.0.0.67"]);
    let m = world
        .members
        .iter_mut()
        .find(|m| m.name == "c-2-1")
        .expect("c-2-1");
    m.address = Some(addr("127.0.0.68"));
    world
        .observed
        .members
        .insert("c-2-1".into(), Reach::Up(Box::new(state)));
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::Meet { on, peer, .. },
            reason: Reason::NodeAddressChanged,
            ..
        } => {
            assert_eq!(on.member, "c-0-0");
            assert_eq!(peer, addr("127.0.0.68"));
        }
        other => panic!("{other}"),
    }
}

/// Two fresh nodes, each alone as right after it started (its own capture line, no peers),
/// serving `slots` (one range per node, none when empty).
fn fresh_pair(slots: [&str; 2]) -> (Vec<cluster_controller::engine::Member>, Observation) {
    fresh_pair_with_keys(slots, 0)
}

/// The same, each node holding `keys` keys (as a member restored from a backup does).
fn fresh_pair_with_keys(
    slots: [&str; 2],
    keys: u64,
) -> (Vec<cluster_controller::engine::Member>, Observation) {
    let capture = v9_primary();
    let members = vec![member(0, 0, "127.0.0.61"), member(1, 0, "127.0.0.62")];
    let mut observed = Observation::default();
    for ((name, ip), range) in [("c-0-0", "127.0.0.61"), ("c-1-0", "127.0.0.62")]
        .into_iter()
        .zip(slots)
    {
        let line = capture
            .lines()
            .find(|l| l.contains(&format!(" {ip}:")))
            .expect("line");
        let fields: Vec<&str> = line.split(' ').take(8).collect();
        let fresh = format!(
            "{} :7100@17100 myself,master - 0 0 0 connected {range}",
            fields[0]
        );
        let nodes = cluster_nodes::parse(fresh.trim_end()).expect("view");
        let info = info::parse(&common::text("v9/info_primary")).expect("info");
        let cluster_info = cluster_info::parse(&common::text("v9/cluster_info_fail")).expect("ci");
        let address = members
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.address)
            .expect("address");
        let state =
            NodeState::new(address, nodes, info, cluster_info, keys, vec![]).expect("state");
        observed
            .members
            .insert(name.into(), Reach::Up(Box::new(state)));
    }
    (members, observed)
}

#[test]
fn a_restored_cluster_forms_with_its_keys_and_each_first_member_takes_the_backups_slots() {
    use cluster_controller::valkey::slots::{SlotRange, SlotSet};
    let range = |a, b| SlotSet::from_range(SlotRange::new(a, b).expect("range"));
    // Not an even split: the backup's own.
    let mut desired = Desired::new(2, 0);
    desired.restore = Some(vec![range(0, 99), range(100, 16383)]);
    let (members, observed) = fresh_pair_with_keys(["", ""], 500);
    match decide(&desired, &members, &observed) {
        Decision::Act {
            action: Action::AddSlots { on, slots },
            reason: Reason::Forming,
            ..
        } => {
            assert_eq!(on.member, "c-0-0");
            assert_eq!(slots.to_string(), "0-99");
        }
        other => panic!("{other}"),
    }
    let (members, observed) = fresh_pair_with_keys(["0-99", ""], 500);
    match decide(&desired, &members, &observed) {
        Decision::Act {
            action: Action::AddSlots { on, slots },
            ..
        } => {
            assert_eq!(on.member, "c-1-0");
            assert_eq!(slots.to_string(), "100-16383");
        }
        other => panic!("{other}"),
    }
    // Without the restore, nodes with keys and no slot owner are data that lost its slots:
    // the operator does not serve them on its own.
    let plain = Desired::new(2, 0);
    let (members, observed) = fresh_pair_with_keys(["", ""], 500);
    let decision = decide(&plain, &members, &observed);
    assert!(
        !matches!(
            decision,
            Decision::Act {
                action: Action::AddSlots { .. },
                ..
            }
        ),
        "{decision}"
    );
}

#[test]
fn fresh_nodes_take_their_slots_first_then_are_met_through_one_seed() {
    let desired = Desired::new(2, 0);
    // Slots first, as valkey-cli does: Valkey's rejoin delay starts when a primary serves slots.
    let (members, observed) = fresh_pair(["", ""]);
    match decide(&desired, &members, &observed) {
        Decision::Act {
            action: Action::AddSlots { on, slots },
            reason: Reason::Forming,
            ..
        } => {
            assert_eq!(on.member, "c-0-0");
            assert_eq!(slots.to_string(), "0-8191");
        }
        other => panic!("{other}"),
    }
    let (members, observed) = fresh_pair(["0-8191", ""]);
    match decide(&desired, &members, &observed) {
        Decision::Act {
            action: Action::AddSlots { on, slots },
            ..
        } => {
            assert_eq!(on.member, "c-1-0");
            assert_eq!(slots.to_string(), "8192-16383");
        }
        other => panic!("{other}"),
    }
    // Each serving its half, alone: now they are introduced (one joins the other).
    let (members, observed) = fresh_pair(["0-8191", "8192-16383"]);
    match decide(&desired, &members, &observed) {
        Decision::Act {
            action: Action::Meet { on, peer, bus_port },
            reason: Reason::Joining,
            ..
        } => {
            assert_eq!(on.member, "c-0-0");
            assert_eq!(peer, addr("127.0.0.62"));
            // The bus port the peer announces (17100), not one assumed from its client port.
            assert_eq!(bus_port, 17100);
        }
        other => panic!("{other}"),
    }
    // A cluster that served slots before is not formed again this way.
    let formed = Desired {
        formed: true,
        ..Desired::new(2, 0)
    };
    let (members, observed) = fresh_pair(["", ""]);
    assert!(
        !matches!(
            decide(&formed, &members, &observed),
            Decision::Act {
                action: Action::AddSlots { .. },
                ..
            }
        ),
        "a formed cluster's empty nodes do not take slots before being introduced"
    );
}

#[test]
fn a_marker_left_on_a_replica_is_cleared_through_its_primary() {
    // Every primary's own view is the captured one before anything was opened; the replica
    // .74 still shows slot 2853 importing (its line as the source's capture had it open).
    let mut world = v8_mid_migration();
    for (name, ip, capture) in [
        ("c-0-0", "127.0.0.71", "source"),
        ("c-1-0", "127.0.0.72", "target"),
        ("c-2-0", "127.0.0.73", "other"),
    ] {
        let text = common::text(&format!("v8/setslot_0_stable_{capture}"));
        let state = node("v8", &text, ip, &[]);
        world
            .observed
            .members
            .insert(name.into(), Reach::Up(Box::new(state)));
    }
    let stale = view_of(
        &common::text("v8/setslot_0_stable_other"),
        "127.0.0.74",
        &[],
    )
    .lines()
    .map(|line| {
        if line.contains("myself") {
            format!("{line} [2853-<-9cfebe444372109dd2edae2ff5be7eea1e5c914d]")
        } else {
            line.to_owned()
        }
    })
    .collect::<Vec<_>>()
    .join("\n");
    let nodes = cluster_nodes::parse(&stale).expect("view");
    let state = NodeState::new(
        addr("127.0.0.74"),
        nodes,
        info::parse(&common::text("v8/info_replica")).expect("info"),
        cluster_info::parse(&common::text("v8/cluster_info_ok")).expect("cluster info"),
        100,
        Vec::new(),
    )
    .expect("state");
    world
        .observed
        .members
        .insert("c-0-1".into(), Reach::Up(Box::new(state)));
    match world.decide(Desired::new(3, 0)) {
        Decision::Act {
            action: Action::ClearSlot { on, slots },
            reason: Reason::MigratingSlots,
            ..
        } => {
            assert_eq!(
                on.member, "c-0-0",
                "the replica's primary replicates the STABLE"
            );
            assert_eq!(slots.to_string(), "2853");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_fenced_node_is_admitted_only_once_settled() {
    // Every node of a healthy cluster restarted with the replication user off: each settled
    // node (a slot-serving primary, or a replica of a live member) is let in, one per pass.
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    world.observed.fence_user = Some("replication".into());
    for reach in world.observed.members.values_mut() {
        if let Reach::Up(state) = reach {
            let fenced = (**state).clone().with_replication_admitted(Some(false));
            **state = fenced;
        }
    }
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::AdmitReplication { on, also, user },
            ..
        } => {
            assert_eq!(user, "replication");
            assert!(on.member.starts_with("c-"), "{on}");
            assert_eq!(
                also.len(),
                5,
                "every settled member in one step (a mass restart admits all at once)"
            );
        }
        other => panic!("{other}"),
    }
    // Admitted everywhere: the cluster is steady again; without fencing the rule says nothing.
    for reach in world.observed.members.values_mut() {
        if let Reach::Up(state) = reach {
            **state = (**state).clone().with_replication_admitted(Some(true));
        }
    }
    assert!(matches!(world.decide(THREE_BY_ONE), Decision::Steady(_)));
    world.observed.fence_user = None;
    assert!(matches!(world.decide(THREE_BY_ONE), Decision::Steady(_)));
}

#[test]
fn a_node_that_replaced_a_primary_at_its_address_stays_fenced() {
    // c-0-0 came back empty at .61 with a new id; its replica c-0-1 still replicates the old id
    // at .61, and would resync from (and be wiped by) the newcomer if it let replicas in. Whatever
    // rule speaks first (meeting the newcomer, waiting for the failover), it must not be this.
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    world.observed.fence_user = Some("replication".into());
    let view = "0123456789abcdef0123456789abcdef01234567 127.0.0.61:6379@16379 myself,master - 0 0 0 connected";
    let nodes = cluster_nodes::parse(view).expect("view");
    let info = info::parse(&common::text("v9/info_primary")).expect("info");
    let cluster_info = cluster_info::parse(&common::text("v9/cluster_info_ok")).expect("info");
    let newcomer = NodeState::new(addr("127.0.0.61"), nodes, info, cluster_info, 0, Vec::new())
        .expect("state")
        .with_replication_admitted(Some(false));
    world
        .observed
        .members
        .insert("c-0-0".into(), Reach::Up(Box::new(newcomer)));
    let decision = world.decide(THREE_BY_ONE);
    assert!(
        !matches!(&decision, Decision::Act { action: Action::AdmitReplication { on, .. }, .. } if on.member == "c-0-0"),
        "{decision}"
    );
}

/// The v9 capture's members placed on `nodes` (one zone per node, named after it), in the order
/// of `v9_members`: c-0-0, c-0-1, c-1-0, c-1-1, c-2-0, c-2-1.
fn placed_on(nodes: [&str; 6]) -> World {
    let mut members = v9_members();
    for (m, node) in members.iter_mut().zip(nodes) {
        m.node_name = Some(node.to_owned());
        m.zone = Some(format!("zone-{node}"));
    }
    World::new("v9", &v9_primary(), members, &["127.0.0.67"])
}

#[test]
fn two_primaries_on_one_node_are_spread_by_a_planned_failover() {
    // c-0-0 and c-1-0 share node a; their replicas run on nodes no primary uses.
    let world = placed_on(["a", "b", "a", "d", "c", "a"]);
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action:
                Action::Failover {
                    on_replica,
                    primary,
                },
            reason: Reason::SpreadingPrimaries,
            message,
            forced,
            ..
        } => {
            assert!(!forced, "a planned failover, announced as Normal");
            assert!(
                (on_replica.member == "c-0-1" && primary.member == "c-0-0")
                    || (on_replica.member == "c-1-1" && primary.member == "c-1-0"),
                "{on_replica:?} over {primary:?}"
            );
            assert!(message.contains("zone zone-a"), "{message}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn primaries_that_cannot_be_spread_further_are_left_alone() {
    // Already apart.
    let world = placed_on(["a", "b", "c", "d", "d", "a"]);
    assert!(
        matches!(world.decide(THREE_BY_ONE), Decision::Steady(_)),
        "{}",
        world.decide(THREE_BY_ONE)
    );
    // Two primaries share node a, but each replica would only move the crowding elsewhere.
    let world = placed_on(["a", "c", "a", "c", "c", "a"]);
    assert!(
        matches!(world.decide(THREE_BY_ONE), Decision::Steady(_)),
        "{}",
        world.decide(THREE_BY_ONE)
    );
    // Without places nothing can be judged.
    let world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    assert!(matches!(world.decide(THREE_BY_ONE), Decision::Steady(_)));
}

/// A planned failover costs clients a write pause. Right after a failover Valkey made (a
/// primary's pod deleted, its replica promoted where another primary runs), the cluster is whole
/// again and the spread rule had its say at once, so clients paid a second pause before the
/// cluster even said Ready. The move waits until the cluster has been steady for the hold, and
/// the cluster reports Ready meanwhile, saying what will move.
#[test]
fn spreading_waits_until_the_cluster_has_been_steady_for_the_hold() {
    let world = placed_on(["a", "b", "a", "d", "c", "a"]);
    let hold = Duration::from_secs(300);
    let after = |steady_for: Duration| Desired {
        held_keys: true,
        steady_for,
        spread_after: hold,
        ..THREE_BY_ONE
    };
    for steady_for in [Duration::ZERO, Duration::from_secs(299)] {
        match world.decide(after(steady_for)) {
            Decision::Steady(health) => {
                let held = health.spread_held.expect("the held move is reported");
                assert!(held.contains("planned failover"), "{held}");
                assert!(held.contains("5m"), "says how long it waits: {held}");
            }
            other => panic!("steady for {steady_for:?}: {other}"),
        }
    }
    match world.decide(after(hold)) {
        Decision::Act {
            action: Action::Failover { .. },
            reason: Reason::SpreadingPrimaries,
            ..
        } => {}
        other => panic!("steady for the hold: {other}"),
    }
    // No hold: the move is the next step at once, as before.
    let no_hold = Desired {
        spread_after: Duration::ZERO,
        ..after(Duration::ZERO)
    };
    assert_eq!(world.decide(no_hold).reason(), Reason::SpreadingPrimaries);
    // Keys held now, though no earlier pass saw any: held.
    let unseen = Desired {
        held_keys: false,
        ..after(Duration::ZERO)
    };
    assert_eq!(
        world.decide(unseen.clone()).reason(),
        Reason::ClusterHealthy
    );
    // A cluster that never held a key (just formed) pauses no one's writes: at once.
    let mut empty = placed_on(["a", "b", "a", "d", "c", "a"]);
    for reach in empty.observed.members.values_mut() {
        if let Reach::Up(state) = reach {
            **state = (**state).clone().with_keys(0);
        }
    }
    assert_eq!(empty.decide(unseen).reason(), Reason::SpreadingPrimaries);
    // Primaries already apart: nothing is held.
    let apart = placed_on(["a", "b", "c", "d", "d", "a"]);
    match apart.decide(after(Duration::ZERO)) {
        Decision::Steady(health) => assert_eq!(health.spread_held, None),
        other => panic!("{other}"),
    }
}
