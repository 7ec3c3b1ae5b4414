//! Faults the operator must not turn into lost writes, against real servers: a partition that
//! hides a primary from the operator and its replica, a primary that restarts in place
//! without its data, a member that stays down while another shard needs repair, a node of
//! another cluster at a member's old address, and a shard whose every copy is lost.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::{Decision, Desired, Reason};
use cluster_controller::valkey::cluster_info::ClusterState;
use cluster_controller::valkey::slots::SlotSet;
use cluster_controller::valkey::value;

use common::lab::{Address, Lab};
use common::net::Partition;
use common::servers::{self, Options, Server};
use common::traffic::{self, Writer};

const THREE_BY_ONE: Desired = Desired::new(3, 1);

async fn formed(lab: &mut Lab, desired: Desired) -> Vec<(String, String)> {
    lab.scale(desired);
    lab.converge(Duration::from_secs(90)).await;
    let keys = traffic::write_keys(&lab.addresses(), "k", 1000).await;
    lab.wait_replicas_caught_up(Duration::from_secs(20)).await;
    keys
}

async fn myself(lab: &Lab, name: &str) -> cluster_controller::valkey::cluster_nodes::ClusterNode {
    lab.cluster_nodes(name)
        .await
        .myself()
        .expect("myself")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_cut_off_from_the_operator_and_its_replica_keeps_its_writes() {
    let options = Options {
        fenced: true,
        ..Options::default()
    };
    let mut lab = Lab::with_options("partial", servers::valkey_9(), 113, options);
    let mut keys = formed(&mut lab, THREE_BY_ONE).await;
    let writer = Writer::start(&lab.addresses(), "w").await;

    // The operator and c-0-1 lose c-0-0; the other primaries and the clients still reach it.
    lab.hide_from_operator("c-0-0");
    let cut = Partition::between(&[lab.ip_of("c-0-0")], &[lab.ip_of("c-0-1")]);
    let started = Instant::now();
    // Longer than the 20 s after which the operator used to take over.
    lab.run_for(Duration::from_secs(30)).await;
    eprintln!("[partial] partition held {:?}", started.elapsed());
    assert!(
        !lab.saw_text("FAILOVER"),
        "no failover while the primary is alive for the cluster: {:?}",
        lab.history
    );
    assert!(
        lab.saw_text("still sees it healthy"),
        "the status says why: {:?}",
        lab.history
    );
    drop(cut);
    lab.stop_pretending("c-0-0");
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        myself(&lab, "c-0-0").await.is_primary(),
        "c-0-0 stayed primary"
    );

    let report = writer.finish().await;
    eprintln!(
        "[partial] {} writes acknowledged, {} failed attempts retried",
        report.acked.len(),
        report.failed_attempts
    );
    assert!(!report.acked.is_empty());
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}

/// A primary's server killed and started again at once from the same folder, without
/// persistence: the same node id, still primary of its slots, and empty.
async fn primary_back_empty_in_place(name: &str, binary: servers::Binary, subnet: u8, open: bool) {
    let options = Options {
        fenced: true,
        persistence: false,
        open_default_user: open,
    };
    let mut lab = Lab::with_options(name, binary, subnet, options);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    let old_id = lab.node_id("c-0-0").await;
    let slots = myself(&lab, "c-0-0").await.slots.clone();

    lab.restart_in_place("c-0-0");
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(90)).await;
    eprintln!("[{name}] whole again after {:?}", started.elapsed());
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        lab.forced
            .iter()
            .any(|l| l.contains("FAILOVER FORCE on c-0-1")),
        "c-0-1 was made primary, announced as forced: {:?}",
        lab.history
    );
    assert_eq!(lab.node_id("c-0-0").await, old_id, "same node, same id");
    assert!(myself(&lab, "c-0-0").await.is_replica());
    assert_eq!(myself(&lab, "c-0-1").await.slots, slots);
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_empty_in_place_hands_over_to_its_replica_on_valkey_9() {
    primary_back_empty_in_place("emptied9", servers::valkey_9(), 114, false).await;
}

/// On Valkey 8, and with clients needing no password: the fence does not depend on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_empty_in_place_hands_over_to_its_replica_on_valkey_8_without_auth() {
    primary_back_empty_in_place("emptied8", servers::valkey_8(), 115, true).await;
}

/// A primary back empty in place that took more keys than its replica holds before the
/// operator first looked (whatever let them in): the shard's data is still its replica's, and
/// the replica takes over. Decided from the replication history (a fresh history without an
/// append-only file, against a replica that holds data of the old one), never by counting keys,
/// which the writes to the empty server would outnumber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_empty_that_took_more_keys_than_its_replica_holds_still_hands_over() {
    let name = "outnumbered";
    let options = Options {
        fenced: true,
        persistence: false,
        open_default_user: false,
    };
    let mut lab = Lab::with_options(name, servers::valkey_9(), 122, options);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    let held = value::int(&lab.command("c-0-1", &["DBSIZE"]).await).unwrap_or(0);
    assert!(held > 0, "the replica holds the shard's keys");
    let tag = lab.tag_served_by("c-0-0").await;

    lab.restart_in_place("c-0-0");
    lab.refresh().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lab.member("c-0-0").ready {
        assert!(Instant::now() < deadline, "c-0-0 did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
        lab.refresh().await;
    }
    // It serves its slots again once Valkey lets it (cluster_state ok: seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe = format!("{{{tag}}}:new:probe");
    while value::text(&lab.try_as_operator("c-0-0", &["SET", &probe, "x"]).await)
        != Some("OK".into())
    {
        assert!(Instant::now() < deadline, "c-0-0 never served again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Before the operator's first look: more keys than the replica holds.
    let written = held * 2 + 10;
    for n in 1..written {
        let key = format!("{{{tag}}}:new:{n}");
        lab.command_as_operator("c-0-0", &["SET", &key, "x"]).await;
    }
    assert_eq!(
        value::int(&lab.command_as_operator("c-0-0", &["DBSIZE"]).await),
        Some(written)
    );

    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        lab.forced
            .iter()
            .any(|l| l.contains("FAILOVER FORCE on c-0-1")),
        "c-0-1, which holds the shard's data, took over: {:?}",
        lab.history
    );
    traffic::verify(&lab.addresses(), &keys).await;
}

/// Without persistence, a server restarted in place takes no client's write before the engine has
/// judged it: its clients' users start off, like the replication user, and open when the engine
/// admits it (here: after its replica took over). So nothing it acknowledges can be lost by the
/// handover, and the writer loses no acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_empty_takes_no_clients_write_before_the_engine_admits_it() {
    let name = "closed";
    let options = Options {
        fenced: true,
        persistence: false,
        open_default_user: false,
    };
    let mut lab = Lab::with_options(name, servers::valkey_8(), 123, options);
    let mut keys = formed(&mut lab, THREE_BY_ONE).await;
    let tag = lab.tag_served_by("c-0-0").await;
    let writer = Writer::start(&lab.addresses(), "w").await;

    lab.restart_in_place("c-0-0");
    // Up again, serving its slots as far as Valkey is concerned, but closed to clients.
    let deadline = Instant::now() + Duration::from_secs(30);
    let key = format!("{{{tag}}}:direct");
    loop {
        let served = lab.try_as_operator("c-0-0", &["SET", &key, "x"]).await;
        if value::text(&served).as_deref() == Some("OK") {
            break;
        }
        assert!(Instant::now() < deadline, "c-0-0 never served again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = lab
        .try_command("c-0-0", &["SET", &key, "from-a-client"])
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| ["NOAUTH", "WRONGPASS", "AuthenticationFailed"]
                .iter()
                .any(|refusal| e.contains(refusal))),
        "a client's write is refused before the engine admits the server: {refused:?}"
    );

    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        lab.forced
            .iter()
            .any(|l| l.contains("FAILOVER FORCE on c-0-1")),
        "{:?}",
        lab.history
    );
    // Admitted once it replicates c-0-1: clients may use it again.
    let opened = lab.try_command("c-0-0", &["GET", &key]).await;
    assert!(
        opened.as_ref().is_err_and(|e| e.contains("Moved")) || opened.is_ok(),
        "a client is served (or redirected) again: {opened:?}"
    );
    let report = writer.finish().await;
    assert!(!report.acked.is_empty());
    keys.extend(report.acked);
    traffic::verify(&lab.addresses(), &keys).await;
}

/// A primary without a replica and without persistence restarted in place (same node ID, same
/// slots, no key): its data is gone, as surely as a shard whose members were all deleted. It is
/// not served again empty without a word (`Failed / SlotsLost` naming its slots; its clients stay
/// off), until the user accepts the loss, once; then it serves, announced as forced. It used
/// to serve at once, empty, and the cluster said Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_without_a_copy_back_empty_is_lost_data_until_the_user_accepts_it() {
    let options = Options {
        fenced: true,
        persistence: false,
        open_default_user: false,
    };
    let mut lab = Lab::with_options("alone", servers::valkey_9(), 124, options);
    lab.scale(Desired::new(3, 0));
    lab.converge(Duration::from_secs(90)).await;
    traffic::write_keys(&lab.addresses(), "k", 300).await;
    let slots = myself(&lab, "c-0-0").await.slots.clone();

    lab.restart_in_place("c-0-0");
    let mut blocked = None;
    lab.run_until(Duration::from_secs(60), |pass| {
        if let Decision::Blocked { reason, message } = &pass.decision {
            blocked = Some((*reason, message.clone()));
            return true;
        }
        false
    })
    .await;
    let (reason, message) = blocked.unwrap_or_else(|| panic!("{:?}", lab.history));
    assert_eq!(reason, Reason::SlotsLost, "{message}");
    assert!(
        message.contains("c-0-0") && message.contains(&slots.to_string()),
        "{message}"
    );
    let refused = lab.try_command("c-0-0", &["PING"]).await;
    assert!(refused.is_err(), "its clients stay off: {refused:?}");

    lab.desired.lost_slots.accepted = Some(slots.clone());
    let mut spent = false;
    lab.run_until(Duration::from_secs(60), |pass| {
        spent |= pass.spent_acknowledgement();
        matches!(pass.decision, Decision::Steady(_))
    })
    .await;
    assert!(spent, "serving it again spent the acknowledgement");
    assert!(
        lab.forced.iter().any(|l| l.contains("SlotsLost")),
        "announced as forced: {:?}",
        lab.forced
    );
    assert!(lab.try_command("c-0-0", &["PING"]).await.is_ok());
}

/// On Valkey 8 an aborted slot move carries the keys back from the target. A source that
/// served the slot as its own meanwhile (it lost its MIGRATING marker, as a replica promoted in
/// its place never had it) holds the newer value of a key: the move back never overwrites it
/// (no REPLACE; Valkey answers BUSYKEY, which the operator reports).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_move_never_overwrites_a_newer_value_on_its_source() {
    let mut lab = Lab::with_options("busykey", servers::valkey_8(), 125, Options::default());
    lab.scale(Desired::new(2, 0));
    lab.converge(Duration::from_secs(90)).await;
    let tag = lab.tag_served_by("c-0-0").await;
    let slot = value::int(&lab.command("c-0-0", &["CLUSTER", "KEYSLOT", &tag]).await)
        .unwrap_or_default()
        .to_string();
    let key = format!("{{{tag}}}:k");
    lab.command_as_operator("c-0-0", &["SET", &key, "old"])
        .await;
    let (source, target) = (lab.node_id("c-0-0").await, lab.node_id("c-1-0").await);
    // A legacy move of the slot, opened and the key moved, as the operator does it.
    lab.command_as_operator(
        "c-1-0",
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source],
    )
    .await;
    lab.command_as_operator(
        "c-0-0",
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target],
    )
    .await;
    let target_ip = lab.ip_of("c-1-0").to_string();
    let moved = lab
        .command_as_operator(
            "c-0-0",
            &[
                "MIGRATE",
                &target_ip,
                "6379",
                &key,
                "0",
                "5000",
                "AUTH2",
                servers::OPERATOR_USER,
                servers::OPERATOR_PASSWORD,
            ],
        )
        .await;
    assert_eq!(value::text(&moved).as_deref(), Some("OK"));
    // The source loses its marker and serves the slot as its own: a client writes anew.
    lab.command_as_operator("c-0-0", &["CLUSTER", "SETSLOT", &slot, "STABLE"])
        .await;
    lab.command_as_operator("c-0-0", &["SET", &key, "newer"])
        .await;

    // The target's shard is to leave: the engine undoes the half-open move (the target still
    // imports), carrying the key back.
    lab.scale(Desired::new(1, 0));
    lab.run_for(Duration::from_secs(8)).await;
    let now = lab.command_as_operator("c-0-0", &["GET", &key]).await;
    assert_eq!(
        value::text(&now).as_deref(),
        Some("newer"),
        "the newer value stays: {:?}",
        lab.history
    );
    assert!(
        lab.errors.iter().any(|e| e.contains("BUSYKEY")),
        "the conflict is reported: {:?}",
        lab.errors
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_down_does_not_stop_repairs_elsewhere() {
    let mut lab = Lab::new("down", servers::valkey_9(), 116);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    let old_id = lab.node_id("c-0-0").await;
    // c-2-1 goes down and stays down; c-0-0 comes back as a new, empty node.
    lab.kill("c-2-1");
    lab.kill("c-0-0");
    lab.wipe("c-0-0");
    lab.start("c-0-0", Address::New);
    let started = Instant::now();
    let mut repaired = false;
    lab.run_until(Duration::from_secs(90), |pass| {
        let (Some(c00), Some(c01)) = (
            pass.observation.state("c-0-0"),
            pass.observation.state("c-0-1"),
        ) else {
            return false;
        };
        let attached = c00.myself().primary_id.as_ref() == Some(c01.id()) && c00.replica_in_sync();
        let forgotten = pass
            .observation
            .members
            .values()
            .filter_map(|r| r.state())
            .all(|s| s.nodes().nodes().iter().all(|n| n.id.as_str() != old_id));
        repaired = attached && forgotten;
        repaired
    })
    .await;
    assert!(repaired);
    eprintln!("[down] shard 0 repaired after {:?}", started.elapsed());
    assert!(
        lab.history.iter().any(|l| l.contains("c-2-1")),
        "what waits names the member that is down: {:?}",
        lab.history
    );

    lab.start("c-2-1", Address::Same);
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_cluster_at_a_members_old_address_is_left_alone() {
    let mut lab = Lab::new("foreign", servers::valkey_9(), 117);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    // c-2-1's pod is gone but its status still names its address, now another cluster's node.
    let ip = lab.ip_of("c-2-1");
    let address = lab.member("c-2-1").address.expect("address");
    lab.kill("c-2-1");
    lab.pretend_status("c-2-1", address, true);
    let (root, acl) = lab.paths();
    let mut foreign = Server::new(root.join("foreign"));
    foreign.start(&lab.binary, &acl, ip, true);
    let probe = |args: &[&str]| {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    };
    use cluster_controller::client::ValkeyClient;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = lab
            .probe
            .command(
                address,
                &probe(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]),
                Duration::from_secs(1),
            )
            .await;
        if reply.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the foreign node did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let decisions = lab.run_for(Duration::from_secs(15)).await;
    let last = decisions.last().expect("a pass");
    assert_eq!(last.reason(), Reason::IdentityConflict, "{last}");
    assert!(last.message().contains("another cluster"), "{last}");
    let touched: Vec<String> = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Act { .. }))
        .map(ToString::to_string)
        .filter(|d| d.contains(&ip.to_string()) || d.contains("c-2-1"))
        .collect();
    assert!(
        touched.is_empty(),
        "nothing is done to the foreign node: {touched:?}"
    );
    let known = lab
        .probe
        .command(
            address,
            &probe(&["CLUSTER", "INFO"]),
            Duration::from_secs(2),
        )
        .await
        .ok()
        .and_then(|v| value::text(&v))
        .unwrap_or_default();
    assert!(
        known.contains("cluster_known_nodes:1"),
        "the foreign node met none of ours:\n{known}"
    );

    foreign.kill();
    lab.stop_pretending("c-2-1");
    lab.start("c-2-1", Address::Same);
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_lost_with_persistence_off_waits_for_the_users_word() {
    let options = Options {
        persistence: false,
        ..Options::default()
    };
    let mut lab = Lab::with_options("lost", servers::valkey_9(), 118, options);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    let lost: SlotSet = myself(&lab, "c-1-0").await.slots.clone();
    for name in ["c-1-0", "c-1-1"] {
        lab.kill(name);
        lab.wipe(name);
        lab.start(name, Address::New);
    }
    lab.run_until(Duration::from_secs(90), |pass| {
        pass.decision.reason() == Reason::SlotsLost
    })
    .await;
    // It stays so: Failed, naming the lost slots, nothing served again on its own.
    let decisions = lab.run_for(Duration::from_secs(5)).await;
    for decision in &decisions {
        match decision {
            Decision::Blocked {
                reason: Reason::SlotsLost,
                message,
            } => assert!(message.contains(&lost.to_string()), "{message}"),
            other => panic!("expected to wait for the user: {other}"),
        }
        assert!(decision.reason().is_failure());
    }
    assert!(lab.forced.is_empty(), "{:?}", lab.forced);

    lab.desired.lost_slots.accepted = Some(lost.clone());
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.slots_assigned), (3, 16384));
    assert!(
        lab.forced.iter().any(|l| l.contains("FORGET"))
            && lab.forced.iter().any(|l| l.contains("ADDSLOTSRANGE")),
        "forgetting the lost node and serving its slots again are announced: {:?}",
        lab.forced
    );
    // Every key outside the lost slots is still there.
    let mut kept = Vec::new();
    for (key, value) in keys {
        let slot = lab.command("c-0-0", &["CLUSTER", "KEYSLOT", &key]).await;
        let slot = value::int(&slot).and_then(|s| u16::try_from(s).ok());
        if slot.is_some_and(|s| !lost.contains(s)) {
            kept.push((key, value));
        }
    }
    assert!(
        kept.len() > 500,
        "{} keys outside the lost slots",
        kept.len()
    );
    traffic::verify(&lab.addresses(), &kept).await;
}

/// A replica promoted by a planned failover, then restarted in place without persistence. The
/// full sync that first made it a replica left an RDB file in its folder, which it loads: it
/// comes back with that old snapshot and continues the snapshot's replication history, which
/// its replica copied much further. It must not feed that replica; the replica takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_back_empty_in_place_hands_back_to_its_replica() {
    let options = Options {
        fenced: true,
        persistence: false,
        open_default_user: false,
    };
    let mut lab = Lab::with_options("promoted", servers::valkey_9(), 120, options);
    let mut keys = formed(&mut lab, THREE_BY_ONE).await;
    let slots = myself(&lab, "c-0-0").await.slots.clone();
    assert_eq!(
        value::text(&lab.command("c-0-1", &["CLUSTER", "FAILOVER"]).await).as_deref(),
        Some("OK")
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(myself(&lab, "c-0-1").await.is_primary() && myself(&lab, "c-0-0").await.is_replica()) {
        assert!(
            Instant::now() < deadline,
            "the planned failover did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    keys.extend(traffic::write_keys(&lab.addresses(), "after", 500).await);
    lab.wait_replicas_caught_up(Duration::from_secs(20)).await;
    let snapshot = lab.paths().0.join("c-0-1").join("dump.rdb");
    assert!(
        snapshot.exists(),
        "{} is what it reloads",
        snapshot.display()
    );

    lab.restart_in_place("c-0-1");
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        lab.forced
            .iter()
            .any(|l| l.contains("FAILOVER FORCE on c-0-0")),
        "c-0-0 was made primary again: {:?}",
        lab.history
    );
    assert_eq!(myself(&lab, "c-0-0").await.slots, slots);
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

/// A primary restarted in place from its append-only file, while its replica cannot reach it,
/// and holding fewer keys than that replica for reasons of its own: keys deleted (or slots
/// migrated away) after the replica lost its link. Its restart started a new replication
/// history, but it came back with its data: it is not "back empty", keeps its slots, and the
/// writes it took since are kept. (A chaos run found the engine taking such a primary for an
/// emptied one and forcing its replica over it, losing those writes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_from_its_append_only_file_with_fewer_keys_than_its_replica_keeps_its_slots()
{
    let options = Options {
        fenced: true,
        ..Options::default()
    };
    assert!(
        options.persistence,
        "the servers run with an append-only file"
    );
    let mut lab = Lab::with_options("aofback", servers::valkey_9(), 121, options);
    let keys = formed(&mut lab, THREE_BY_ONE).await;
    let slots = myself(&lab, "c-0-0").await.slots.clone();

    // c-0-1 loses its primary and keeps what it had; c-0-0 then drops a third of its keys.
    let cut = Partition::between(&[lab.ip_of("c-0-0")], &[lab.ip_of("c-0-1")]);
    let on_primary = value::list(&lab.command("c-0-0", &["KEYS", "k:*"]).await)
        .map(|keys| keys.iter().filter_map(value::text).collect::<Vec<_>>())
        .unwrap_or_default();
    assert!(on_primary.len() > 100, "c-0-0 serves a third of the keys");
    let deleted: Vec<String> = on_primary.iter().step_by(3).cloned().collect();
    for key in &deleted {
        assert_eq!(
            value::int(&lab.command("c-0-0", &["DEL", key]).await),
            Some(1)
        );
    }

    lab.restart_in_place("c-0-0");
    // Back and serving again: until it has heard from the others its cluster state is `fail`
    // and it answers writes with CLUSTERDOWN (seen under load), which a client retries.
    lab.run_until(Duration::from_secs(30), |pass| {
        pass.observation
            .state("c-0-0")
            .is_some_and(|s| s.cluster_info().state == ClusterState::Ok)
    })
    .await;
    // Writes it acknowledges after its restart, to its own slots.
    let mut written = Vec::new();
    for n in 0.. {
        if written.len() == 50 {
            break;
        }
        let key = format!("after:{n}");
        let slot = value::int(&lab.command("c-0-0", &["CLUSTER", "KEYSLOT", &key]).await)
            .and_then(|s| u16::try_from(s).ok())
            .expect("a slot");
        if slots.contains(slot) {
            let reply = lab.command("c-0-0", &["SET", &key, "kept"]).await;
            assert_eq!(value::text(&reply).as_deref(), Some("OK"), "SET {key}");
            written.push((key, "kept".to_owned()));
        }
    }
    let held = |name: &'static str| {
        let lab = &lab;
        async move { value::int(&lab.command(name, &["DBSIZE"]).await).unwrap_or(0) }
    };
    let (primary_keys, replica_keys) = (held("c-0-0").await, held("c-0-1").await);
    assert!(
        primary_keys < replica_keys,
        "the case at hand: the primary holds fewer keys ({primary_keys}) than its replica ({replica_keys})"
    );

    lab.run_for(Duration::from_secs(20)).await;
    assert!(
        !lab.saw_text("FAILOVER"),
        "a primary back with its data keeps its slots: {:?}",
        lab.history
    );
    drop(cut);
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (3, 3));
    assert!(
        myself(&lab, "c-0-0").await.is_primary(),
        "c-0-0 stayed primary"
    );
    assert_eq!(myself(&lab, "c-0-0").await.slots, slots);
    lab.assert_topology().await;
    let kept: Vec<(String, String)> = keys
        .into_iter()
        .filter(|(key, _)| !deleted.contains(key))
        .chain(written)
        .collect();
    traffic::verify(&lab.addresses(), &kept).await;
    for key in deleted.iter().take(20) {
        assert_eq!(
            lab.command("c-0-0", &["EXISTS", key]).await,
            redis::Value::Int(0),
            "{key} stays deleted"
        );
    }
}
