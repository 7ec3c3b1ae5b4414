//! The data-safety rules of the pure decision, from the v9 capture changed in the fields each
//! situation differs in (see `common/world.rs`): when the engine may take over for Valkey, a
//! primary that came back without its data, a member that stays down, nodes that are not who
//! their address says, lost slots, and a restart that would lose data.

use crate::common;

use cluster_controller::engine::safety::FailoverSettings;
use cluster_controller::engine::{
    Action, Decision, Desired, Member, NodeState, Reach, Reason, Scope, bindings,
};
use cluster_controller::valkey::cluster_nodes::NodeId;
use cluster_controller::valkey::{cluster_info, cluster_nodes, info};

use common::world::*;

/// `server_time_usec` of the capture's INFO, in milliseconds.
const NOW_MS: u64 = 1_795_993_009_510;
const C00: &str = "21e8c5d9af368ab8fe6a1dcc93203af7ac3c6aa1"; // .61, slots 0-5460
const C10: &str = "12249a3dcd069eff19af5a726f0b71a0ebe54d96"; // .62
const C01: &str = "2334f6e2f41a9bb4e8032f715ccebd3008e59563"; // .64
const C11: &str = "78514dbdf501ed4087795bd22be670b0f944f3b7"; // .65
const C21: &str = "36b5f6ff8411a5e875beca8202cee40c3d1e7d25"; // .66

fn id(text: &str) -> NodeId {
    NodeId::parse(text).expect("node id")
}

fn settings(node_timeout_ms: u64) -> FailoverSettings {
    FailoverSettings {
        node_timeout_ms,
        replica_no_failover: false,
        validity_factor: 10,
        ping_period_s: 10,
    }
}

/// A member's state from its view's text and an INFO text.
fn state(view: &str, ip: &str, info_text: &str, keys: u64, s: FailoverSettings) -> NodeState {
    let nodes = cluster_nodes::parse(view).expect("view");
    let info = info::parse(info_text).expect("info");
    let cluster_info = cluster_info::parse(&common::text("v9/cluster_info_ok")).expect("info");
    NodeState::new(addr(ip), nodes, info, cluster_info, keys, Vec::new())
        .expect("state")
        .with_settings(Ok(s))
}

/// The capture with `ip`'s line changed by `edit` (its fields, split on spaces).
fn edit_line(capture: &str, ip: &str, edit: impl Fn(&mut Vec<String>)) -> String {
    capture
        .lines()
        .map(|line| {
            if line.contains(&format!(" {ip}:")) {
                let mut fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
                edit(&mut fields);
                fields.join(" ")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// .61 suspected failing, last heard from `silent_s` ago.
fn failing_61(silent_s: u64) -> String {
    edit_line(&v9_primary(), "127.0.0.61", |f| {
        f[2] = "master,fail?".into();
        f[5] = (NOW_MS - silent_s * 1000).to_string();
    })
}

/// The capture's lines of shards it does not keep.
fn dropped(shards: u32) -> Vec<&'static str> {
    match shards {
        1 => vec![
            "127.0.0.62",
            "127.0.0.65",
            "127.0.0.63",
            "127.0.0.66",
            "127.0.0.67",
        ],
        2 => vec!["127.0.0.63", "127.0.0.66", "127.0.0.67"],
        _ => vec!["127.0.0.67"],
    }
}

/// `shards` shards of the capture, one replica each, in which c-0-0 (.61) is out of the
/// operator's sight, silent for `silent_s` in the views of the members at `seeing` (the
/// others see it healthy), and its replica c-0-1's link has been down as long.
fn failure(shards: u32, silent_s: u64, s: FailoverSettings, seeing: &[&str]) -> World {
    let drop = dropped(shards);
    let members: Vec<Member> = v9_members()
        .into_iter()
        .filter(|m| m.shard < shards)
        .collect();
    let mut world = World::new("v9", &v9_primary(), members.clone(), &drop);
    for m in members.iter().filter(|m| m.name != "c-0-0") {
        let ip = m.address.expect("address").ip().to_string();
        let capture = if seeing.contains(&ip.as_str()) {
            failing_61(silent_s)
        } else {
            v9_primary()
        };
        let view = view_of(&capture, &ip, &drop);
        let mut info_text = common::text(if m.index == 0 {
            "v9/info_primary"
        } else {
            "v9/info_replica"
        });
        if m.name == "c-0-1" {
            info_text = info_text.replace(
                "master_link_status:up",
                &format!("master_link_status:down\r\nmaster_link_down_since_seconds:{silent_s}"),
            );
        }
        world.observed.members.insert(
            m.name.clone(),
            Reach::Up(Box::new(state(&view, &ip, &info_text, 100, s))),
        );
    }
    world.down("c-0-0");
    world
}

fn everyone(shards: u32) -> Vec<&'static str> {
    [
        "127.0.0.62",
        "127.0.0.63",
        "127.0.0.64",
        "127.0.0.65",
        "127.0.0.66",
    ]
    .into_iter()
    .filter(|ip| !dropped(shards).contains(ip))
    .collect()
}

fn is_takeover(decision: &Decision) -> bool {
    matches!(
        decision,
        Decision::Act {
            action: Action::Takeover { .. },
            ..
        }
    )
}

#[test]
fn a_primary_hidden_from_the_operator_and_one_replica_is_not_a_failure() {
    // Only its replica (.64) lost it; the other primary still sees it: clients do too.
    let world = failure(2, 60, settings(5000), &["127.0.0.64"]);
    let decision = world.decide(Desired::new(2, 1));
    assert!(!is_takeover(&decision), "{decision}");
    assert!(
        decision.message().contains("still sees it healthy"),
        "{decision}"
    );
    // The same for a whole zone out of the operator's sight (c-0-0 and c-1-1 here), its
    // replica among those that lost it.
    let mut world = failure(3, 60, settings(5000), &["127.0.0.64", "127.0.0.66"]);
    world.down("c-1-1");
    let decision = world.decide(THREE_BY_ONE);
    assert!(!is_takeover(&decision), "{decision}");
}

#[test]
fn no_takeover_while_a_majority_of_primaries_can_elect() {
    let world = failure(3, 20, settings(3000), &everyone(3));
    let decision = world.decide(THREE_BY_ONE);
    assert!(!is_takeover(&decision), "{decision}");
    assert_eq!(decision.reason(), Reason::FailingOver, "{decision}");
    assert!(decision.message().contains("Valkey elects"), "{decision}");
}

#[test]
fn takeover_waits_twice_the_servers_node_timeout_when_no_election_can_happen() {
    // A user-set cluster-node-timeout of 30 s: 65 s of silence, not a fixed 20 s.
    for silent_s in [21, 40, 64] {
        let world = failure(2, silent_s, settings(30_000), &everyone(2));
        let decision = world.decide(Desired::new(2, 1));
        assert!(!is_takeover(&decision), "{silent_s} s: {decision}");
        assert!(decision.message().contains("of the 65 s"), "{decision}");
    }
    let world = failure(2, 66, settings(30_000), &everyone(2));
    let decision = world.decide(Desired::new(2, 1));
    assert!(decision.is_forced(), "announced with a Warning: {decision}");
    match decision {
        Decision::Act {
            action: Action::Takeover { on_replica, failed },
            reason: Reason::FailingOver,
            ..
        } => {
            assert_eq!(on_replica.member, "c-0-1");
            assert_eq!(failed, id(C00));
        }
        other => panic!("{other}"),
    }
}

#[test]
fn no_takeover_when_the_user_disabled_replica_failover() {
    let s = FailoverSettings {
        replica_no_failover: true,
        ..settings(5000)
    };
    let world = failure(2, 120, s, &everyone(2));
    let decision = world.decide(Desired::new(2, 1));
    assert!(!is_takeover(&decision), "{decision}");
    assert!(
        decision.message().contains("cluster-replica-no-failover"),
        "{decision}"
    );
    // Without the settings the engine does not guess them.
    let mut world = failure(2, 120, settings(5000), &everyone(2));
    if let Some(Reach::Up(s)) = world.observed.members.get_mut("c-0-1") {
        **s = (**s).clone().with_settings(Err("NOPERM".into()));
    }
    let decision = world.decide(Desired::new(2, 1));
    assert!(!is_takeover(&decision), "{decision}");
    assert!(decision.message().contains("NOPERM"), "{decision}");
}

#[test]
fn a_replica_valkey_considers_too_stale_takes_over_only_with_the_users_word() {
    // 5 s timeout, factor 10, ping 10 s: 65 s of link down at most.
    let world = failure(2, 200, settings(5000), &everyone(2));
    let decision = world.decide(Desired::new(2, 1));
    match &decision {
        Decision::Blocked {
            reason: Reason::ReplicaTooStale,
            message,
        } => assert!(
            message.contains("c-0-1") && message.contains("0-5460"),
            "{message}"
        ),
        other => panic!("{other}"),
    }
    assert!(decision.reason().is_failure());
    let mut desired = Desired::new(2, 1);
    desired.lost_slots.accepted = Some("0-5460".parse().expect("slots"));
    let decision = world.decide(desired);
    assert!(is_takeover(&decision), "{decision}");
}

#[test]
fn a_lone_shard_is_not_taken_over_without_the_users_word() {
    // One primary alone is a majority: cut off with its clients it still serves them, and the
    // operator cannot tell that from a death.
    let world = failure(1, 30, settings(5000), &everyone(1));
    let decision = world.decide(Desired::new(1, 1));
    assert!(!is_takeover(&decision), "{decision}");
    assert!(decision.message().contains("acceptLostSlots"), "{decision}");
    let mut cache = Desired::new(1, 1);
    cache.lost_slots.refill = true;
    assert!(is_takeover(&world.decide(cache)));
}

/// c-0-0 restarted in place without its data: same node id, still primary of 0-5460, a
/// history of its own at offset 0 and no key; its replica c-0-1 keeps the old history.
fn emptied_world() -> World {
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    let empty_info = common::text("v9/info_primary")
        .replace(
            "master_replid:",
            "master_replid:0123456789abcdef0123456789abcdef01234567\r\nold_replid:",
        )
        .replace("master_repl_offset:", "master_repl_offset:0\r\nold_offset:");
    let view = view_of(&v9_primary(), "127.0.0.61", &["127.0.0.67"]);
    let emptied = state(&view, "127.0.0.61", &empty_info, 0, settings(5000))
        .with_replication_admitted(Some(false));
    world
        .observed
        .members
        .insert("c-0-0".into(), Reach::Up(Box::new(emptied)));
    world.observed.fence_user = Some("replication".into());
    world
}

#[test]
fn a_primary_back_without_its_data_hands_over_to_its_replica() {
    let world = emptied_world();
    let decision = world.decide(THREE_BY_ONE);
    assert!(decision.is_forced(), "{decision}");
    match decision {
        Decision::Act {
            action:
                Action::ForcedFailover {
                    on_replica,
                    primary,
                },
            reason: Reason::PrimaryRestartedEmpty,
            ..
        } => {
            assert_eq!(on_replica.member, "c-0-1");
            assert_eq!(primary.member, "c-0-0");
        }
        other => panic!("{other}"),
    }
}

/// While the rest of a pass cannot go on (a Secret missing, an apply failing), the rules that
/// protect data still run: the emptied primary hands over all the same, and a takeover happens
/// when no election can; nothing that follows the spec does (here: a fourth shard asked for).
#[test]
fn the_safety_rules_run_when_nothing_else_may() {
    let world = emptied_world();
    let handover = world.decide_in(Scope::Safety, Desired::new(4, 1));
    assert!(
        matches!(
            &handover,
            Decision::Act {
                action: Action::ForcedFailover { .. },
                reason: Reason::PrimaryRestartedEmpty,
                ..
            }
        ),
        "{handover}"
    );
    let failed = failure(2, 40, settings(5000), &everyone(2));
    let everything = failed.decide(Desired::new(2, 1));
    assert!(is_takeover(&everything), "{everything}");
    let safety = failed.decide_in(Scope::Safety, Desired::new(5, 1));
    assert_eq!(
        safety, everything,
        "the same takeover, whatever the spec asks"
    );
    // A healthy cluster asked for more shards: the safety rules have nothing to say.
    let healthy = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    assert!(
        matches!(
            healthy.decide_in(Scope::Safety, Desired::new(4, 1)),
            Decision::Steady(_)
        ),
        "no member is created, no slot moves"
    );
}

/// A drain may evict one member of a shard at a time, but none while a replica of the shard does
/// not hold the primary's data (syncing, loading, or not read): the primary may be its only copy.
#[test]
fn a_shard_whose_replica_is_not_in_sync_lets_no_member_go() {
    use cluster_controller::cluster::serving::shards_out_of_sync;
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    assert!(shards_out_of_sync(&world.members, &world.observed).is_empty());
    let syncing = common::text("v9/info_replica")
        .replace("master_sync_in_progress:0", "master_sync_in_progress:1");
    let view = view_of(&v9_primary(), "127.0.0.65", &["127.0.0.67"]);
    let full_sync = state(&view, "127.0.0.65", &syncing, 0, settings(5000));
    world
        .observed
        .members
        .insert("c-1-1".into(), Reach::Up(Box::new(full_sync)));
    world.down("c-2-1");
    let held: Vec<u32> = shards_out_of_sync(&world.members, &world.observed)
        .into_iter()
        .collect();
    assert_eq!(held, [1, 2]);
    // A shard of one member has no copy to wait for.
    let alone = Vec::from_iter(world.members.iter().filter(|m| m.index == 0).cloned());
    assert!(shards_out_of_sync(&alone, &world.observed).is_empty());
}

/// The same c-0-0 with fewer keys than its replica and a history of its own, but restarted from
/// its append-only file (a slot migration moved keys away before its replica resynced), or
/// already admitted by the fence since it started: nothing is lost, and a forced failover to
/// the replica would lose what c-0-0 accepted since it came back.
#[test]
fn a_primary_back_with_its_data_or_already_admitted_keeps_its_slots() {
    let forced = |d: &Decision| {
        matches!(
            d,
            Decision::Act {
                reason: Reason::PrimaryRestartedEmpty,
                ..
            }
        )
    };
    let view = view_of(&v9_primary(), "127.0.0.61", &["127.0.0.67"]);
    let restarted_info = common::text("v9/info_primary")
        .replace(
            "master_replid:",
            "master_replid:0123456789abcdef0123456789abcdef01234567\r\nold_replid:",
        )
        .replace("master_repl_offset:", "master_repl_offset:0\r\nold_offset:");

    let mut from_aof = emptied_world();
    let reloaded = state(
        &view,
        "127.0.0.61",
        &format!("{restarted_info}\r\naof_enabled:1\r\n"),
        0,
        settings(5000),
    )
    .with_replication_admitted(Some(false));
    from_aof
        .observed
        .members
        .insert("c-0-0".into(), Reach::Up(Box::new(reloaded)));
    let decision = from_aof.decide(THREE_BY_ONE);
    assert!(!forced(&decision), "{decision}");

    let mut admitted = emptied_world();
    let served = state(&view, "127.0.0.61", &restarted_info, 0, settings(5000))
        .with_replication_admitted(Some(true));
    admitted
        .observed
        .members
        .insert("c-0-0".into(), Reach::Up(Box::new(served)));
    let decision = admitted.decide(THREE_BY_ONE);
    assert!(!forced(&decision), "{decision}");
}

#[test]
fn an_emptied_primary_is_not_admitted_while_a_replica_may_hold_more() {
    // Its replica is out of sight: it may hold the data c-0-0 lost. Without persistence the
    // fence stays shut; with it, a restarted primary reloaded its data and may serve.
    let mut world = emptied_world();
    bind(&mut world, "c-0-1", C01);
    world.down("c-0-1");
    let admitted = |d: &Decision| matches!(d, Decision::Act { action: Action::AdmitReplication { on, .. }, .. } if on.member == "c-0-0");
    let decision = world.decide(THREE_BY_ONE);
    assert!(!admitted(&decision), "{decision}");
    let mut persistent = THREE_BY_ONE;
    persistent.persistent = true;
    let decision = world.decide(persistent);
    assert!(admitted(&decision), "{decision}");
}

/// c-1-1 came back as a fresh node (a new id, primary of nothing) that everyone already met;
/// its old id is still known, failed. c-2-1 is down, bound to its node.
fn member_down_world() -> World {
    const NEW: &str = "0123456789abcdef0123456789abcdef01234567";
    let capture = format!(
        "{}\n{NEW} 127.0.0.65:7100@17100 master - 0 1795993009325 0 connected",
        edit_line(&v9_primary(), "127.0.0.65", |f| {
            f[1] = "127.0.0.68:7100@17100".into();
            f[2] = "slave,fail".into();
        })
    );
    let mut world = World::new("v9", &capture, v9_members(), &["127.0.0.67"]);
    bind(&mut world, "c-2-1", C21);
    world.down("c-2-1");
    world
}

/// The member `name` is bound to node `node` (as the Kubernetes side keeps it).
fn bind(world: &mut World, name: &str, node: &str) {
    for m in &mut world.members {
        if m.name == name {
            m.node_id = Some(id(node));
        }
    }
}

#[test]
fn a_member_down_does_not_stop_repairs_of_other_shards() {
    let world = member_down_world();
    // The old id of c-1-1 is forgotten; c-2-1's node, though no member answers as it, is not.
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::Forget { node_id, .. },
            reason: Reason::RemovingNodes,
            ..
        } => assert_eq!(node_id, id(C11)),
        other => panic!("{other}"),
    }
    // Once forgotten, c-1-1 is attached to its shard's primary.
    let mut world = member_down_world();
    for (name, reach) in world.observed.members.iter_mut() {
        if let Reach::Up(s) = reach {
            let keys = if name == "c-1-1" { 0 } else { s.keys() };
            let view = s
                .nodes()
                .nodes()
                .iter()
                .filter(|n| n.id != id(C11))
                .cloned()
                .collect();
            let nodes = cluster_nodes::ClusterNodes::new(view);
            **s = NodeState::new(
                s.address(),
                nodes,
                s.info().clone(),
                s.cluster_info().clone(),
                keys,
                Vec::new(),
            )
            .expect("state");
        }
    }
    match world.decide(THREE_BY_ONE) {
        Decision::Act {
            action: Action::Replicate { on, .. },
            reason: Reason::AttachingReplicas,
            ..
        } => assert_eq!(on.member, "c-1-1"),
        other => panic!("{other}"),
    }
    // What needs the whole cluster waits, naming the member.
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    bind(&mut world, "c-2-1", C21);
    world.down("c-2-1");
    let decision = world.decide(THREE_BY_ONE);
    assert!(decision.message().contains("c-2-1"), "{decision}");
    assert!(!matches!(decision, Decision::Steady(_)), "{decision}");
}

#[test]
fn the_node_of_a_member_that_is_down_is_never_forgotten() {
    // c-2-1 is down and the cluster has marked its node failed; bound to it, or never bound
    // but known to have run (it has an address), its node is left for its return.
    let failed = edit_line(&v9_primary(), "127.0.0.66", |f| f[2] = "slave,fail".into());
    for bound in [true, false] {
        let mut world = World::new("v9", &failed, v9_members(), &["127.0.0.67"]);
        for m in &mut world.members {
            if m.name == "c-2-1" {
                m.node_id = bound.then(|| id(C21));
                m.ready = false;
            }
        }
        world
            .observed
            .members
            .insert("c-2-1".into(), Reach::NoAddress);
        let decision = world.decide(THREE_BY_ONE);
        assert!(
            !matches!(&decision, Decision::Act { action: Action::Forget { node_id, .. }, .. } if *node_id == id(C21)),
            "{decision}"
        );
    }
}

#[test]
fn two_members_answering_as_one_node_are_never_acted_on() {
    // c-2-1's status is stale: it names .65, where c-1-1's node answers.
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    for m in &mut world.members {
        match m.name.as_str() {
            "c-1-1" => m.node_id = Some(id(C11)),
            "c-2-1" => {
                m.node_id = Some(id(C21));
                m.address = Some(addr("127.0.0.65"));
            }
            _ => {}
        }
    }
    let at_65 = node("v9", &v9_primary(), "127.0.0.65", &["127.0.0.67"]);
    world
        .observed
        .members
        .insert("c-2-1".into(), Reach::Up(Box::new(at_65)));
    let decision = world.decide(THREE_BY_ONE);
    assert_eq!(decision.reason(), Reason::IdentityConflict, "{decision}");
    assert!(
        decision.message().contains("c-2-1") && decision.message().contains(C11),
        "{decision}"
    );
    // Bindings keep c-2-1's node; c-1-1 keeps its own.
    let b = bindings(&THREE_BY_ONE, &world.members, &world.observed);
    assert_eq!(b.get("c-2-1"), Some(&id(C21)));
    assert_eq!(b.get("c-1-1"), Some(&id(C11)));
}

#[test]
fn a_node_of_another_cluster_at_a_members_old_address_is_left_alone() {
    // c-2-1's pod is gone and its address was reused by a node of another cluster, which knows
    // only its own peers and serves slots.
    const THEIRS: &str = "fedcba9876543210fedcba9876543210fedcba98";
    const PEER: &str = "0000000000000000000000000000000000000042";
    let foreign = format!(
        "{THEIRS} 127.0.0.66:7100@17100 myself,master - 0 0 3 connected 0-16383\n\
         {PEER} 10.9.9.9:7100@17100 slave {THEIRS} 0 1795993009325 3 connected"
    );
    let mut world = World::new("v9", &v9_primary(), v9_members(), &["127.0.0.67"]);
    for m in &mut world.members {
        m.node_id = Some(
            cluster_nodes::parse(&view_of(
                &v9_primary(),
                &m.address.expect("address").ip().to_string(),
                &[],
            ))
            .expect("view")
            .myself()
            .expect("myself")
            .id
            .clone(),
        );
    }
    let theirs = state(
        &foreign,
        "127.0.0.66",
        &common::text("v9/info_primary"),
        5000,
        settings(5000),
    );
    world
        .observed
        .members
        .insert("c-2-1".into(), Reach::Up(Box::new(theirs)));
    let decision = world.decide(THREE_BY_ONE);
    assert_eq!(decision.reason(), Reason::IdentityConflict, "{decision}");
    assert!(decision.message().contains("another cluster"), "{decision}");
    let b = bindings(&THREE_BY_ONE, &world.members, &world.observed);
    assert_eq!(b.get("c-2-1"), Some(&id(C21)), "not rebound to their node");
    // A fresh node there (alone, no slots) is how c-2-1 looks after restarting empty: met.
    let fresh = format!("{THEIRS} 127.0.0.66:7100@17100 myself,master - 0 0 0 connected");
    let fresh = state(
        &fresh,
        "127.0.0.66",
        &common::text("v9/info_primary"),
        0,
        settings(5000),
    );
    world
        .observed
        .members
        .insert("c-2-1".into(), Reach::Up(Box::new(fresh)));
    let decision = world.decide(THREE_BY_ONE);
    assert_ne!(decision.reason(), Reason::IdentityConflict, "{decision}");
}

#[test]
fn slots_without_an_owner_are_served_again_only_with_the_users_word() {
    // Shard 2's primary and replica are gone and forgotten (not in any view), keys remain.
    let drop = ["127.0.0.63", "127.0.0.66", "127.0.0.67"];
    let members: Vec<Member> = v9_members().into_iter().filter(|m| m.shard < 2).collect();
    let world = World::new("v9", &v9_primary(), members, &drop);
    let decision = world.decide(Desired::new(2, 1));
    match &decision {
        Decision::Blocked {
            reason: Reason::SlotsLost,
            message,
        } => assert!(message.contains("10922-16383"), "{message}"),
        other => panic!("{other}"),
    }
    let mut cache = Desired::new(2, 1);
    cache.lost_slots.refill = true;
    let decision = world.decide(cache);
    assert!(decision.is_forced(), "{decision}");
    assert!(
        matches!(
            &decision,
            Decision::Act {
                action: Action::AddSlots { .. },
                reason: Reason::SlotsLost,
                ..
            }
        ),
        "{decision}"
    );
    assert!(
        !decision.spends_acknowledgement(),
        "a cache's policy is not an acknowledgement to spend"
    );
    // The user's word for these slots: the same step, which spends it (once the cluster is
    // whole again, that value of acceptLostSlots allows nothing more).
    let mut accepted = Desired::new(2, 1);
    accepted.lost_slots.accepted = Some("10922-16383".parse().expect("slots"));
    let decision = world.decide(accepted);
    assert!(
        decision.is_forced() && decision.spends_acknowledgement(),
        "{decision}"
    );
}

#[test]
fn a_cluster_that_formed_before_and_lost_every_slot_asks_first() {
    // Fresh nodes, no key anywhere: a new cluster forms; one that had formed lost everything.
    let capture = v9_primary();
    let members = vec![member(0, 0, "127.0.0.61"), member(1, 0, "127.0.0.62")];
    let mut world = World::new("v9", &capture, members, &[]);
    for (name, ip) in [("c-0-0", "127.0.0.61"), ("c-1-0", "127.0.0.62")] {
        let other = if ip.ends_with("61") {
            "127.0.0.62"
        } else {
            "127.0.0.61"
        };
        let view = view_of(&capture, ip, &[])
            .lines()
            .filter(|l| l.contains(&format!(" {ip}:")) || l.contains(&format!(" {other}:")))
            .map(|l| {
                let mut f: Vec<&str> = l.split(' ').collect();
                f.truncate(8);
                f.join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let s = state(
            &view,
            ip,
            &common::text("v9/info_primary"),
            0,
            settings(5000),
        );
        world
            .observed
            .members
            .insert(name.into(), Reach::Up(Box::new(s)));
    }
    let decision = world.decide(Desired::new(2, 0));
    assert_eq!(decision.reason(), Reason::Forming, "{decision}");
    let mut formed = Desired::new(2, 0);
    formed.formed = true;
    let decision = world.decide(formed);
    assert_eq!(decision.reason(), Reason::SlotsLost, "{decision}");
}

#[test]
fn restarting_a_primary_without_replica_or_persistence_needs_the_users_word() {
    let drop = ["127.0.0.64", "127.0.0.65", "127.0.0.66", "127.0.0.67"];
    let members: Vec<Member> = v9_members()
        .into_iter()
        .filter(|m| m.index == 0)
        .map(|mut m| {
            m.desired_revision = Some("r2".into());
            m
        })
        .collect();
    let world = World::new("v9", &v9_primary(), members, &drop);
    let decision = world.decide(Desired::new(3, 0));
    match &decision {
        Decision::Blocked {
            reason: Reason::RestartWouldLoseData,
            message,
        } => assert!(
            message.contains("c-0-0") && message.contains("100 keys"),
            "{message}"
        ),
        other => panic!("{other}"),
    }
    let mut persistent = Desired::new(3, 0);
    persistent.persistent = true;
    let decision = world.decide(persistent);
    assert!(
        matches!(&decision, Decision::Act { action: Action::AllowRestart { member }, .. } if member == "c-0-0"),
        "{decision}"
    );
    assert!(!decision.is_forced());
    let mut cache = Desired::new(3, 0);
    cache.lost_slots.refill = true;
    assert!(world.decide(cache).is_forced());
}

#[test]
fn a_replica_holding_data_its_primary_lacks_is_not_attached_to_it() {
    // c-0-1 holds 100 keys of another history and replicates c-1-0 (of another shard); c-0-0,
    // its shard's primary, started a history of its own with no key.
    let mut world = emptied_world();
    let elsewhere = edit_line(&v9_primary(), "127.0.0.64", |f| f[3] = C10.into());
    let view = view_of(&elsewhere, "127.0.0.64", &["127.0.0.67"]);
    let info_text = common::text("v9/info_replica");
    world.observed.members.insert(
        "c-0-1".into(),
        Reach::Up(Box::new(state(
            &view,
            "127.0.0.64",
            &info_text,
            100,
            settings(5000),
        ))),
    );
    world.observed.fence_user = None;
    let decision = world.decide(THREE_BY_ONE);
    match &decision {
        Decision::Blocked {
            reason: Reason::NodeNotEmpty,
            message,
        } => assert!(message.contains("c-0-1 holds 100 keys"), "{message}"),
        other => panic!("{other}"),
    }
}

#[test]
fn a_replica_of_a_quiet_primary_is_not_moved_to_an_empty_one() {
    // c-0-0 came back as a new, empty node at .68 before anyone noticed its old node (.61,
    // still serving 0-5460 in every view) is gone; c-0-1 still replicates the old node. With
    // c-2-1 down, attaching replicas runs before slots are checked: c-0-1 must wait for its
    // election, not resync from the empty node.
    const NEW: &str = "0123456789abcdef0123456789abcdef01234567";
    let capture = format!(
        "{}\n{NEW} 127.0.0.68:7100@17100 master - 0 1795993009325 0 connected",
        v9_primary()
    );
    let mut members = v9_members();
    members[0].address = Some(addr("127.0.0.68"));
    let mut world = World::new("v9", &capture, members, &["127.0.0.67"]);
    let view = view_of(&capture, "127.0.0.68", &["127.0.0.67"]);
    let fresh = state(
        &view,
        "127.0.0.68",
        &common::text("v9/info_primary"),
        0,
        settings(5000),
    );
    world
        .observed
        .members
        .insert("c-0-0".into(), Reach::Up(Box::new(fresh)));
    bind(&mut world, "c-2-1", C21);
    world.down("c-2-1");
    let decision = world.decide(THREE_BY_ONE);
    assert!(
        !matches!(&decision, Decision::Act { action: Action::Replicate { on, .. }, .. } if on.member == "c-0-1"),
        "{decision}"
    );
    assert_eq!(decision.reason(), Reason::FailingOver, "{decision}");
    assert!(
        decision.message().contains("c-0-1 replicates"),
        "{decision}"
    );
}
