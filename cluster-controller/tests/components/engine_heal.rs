//! Healing: a killed primary replaced by its replica and brought back as a replica, a whole
//! cluster restarted on new addresses, a member that returns empty with a new node id, and a
//! shard whose only copy is lost.

use crate::common;

use std::time::{Duration, Instant};

use cluster_controller::engine::{Decision, Desired, Reason};

use common::lab::{Address, Lab};
use common::servers;
use common::traffic;

const THREE_BY_ONE: Desired = Desired::new(3, 1);

async fn formed(name: &str, subnet: u8, desired: Desired) -> (Lab, Vec<(String, String)>) {
    let mut lab = Lab::new(name, servers::valkey_9(), subnet);
    lab.scale(desired);
    lab.converge(Duration::from_secs(60)).await;
    let keys = traffic::write_keys(&lab.addresses(), "k", 1000).await;
    lab.wait_replicas_caught_up(Duration::from_secs(20)).await;
    (lab, keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_and_returns_as_a_replica() {
    let (mut lab, keys) = formed("heal-kill", 104, THREE_BY_ONE).await;
    let old_primary = lab.node_id("c-0-0").await;
    lab.kill("c-0-0");
    let started = Instant::now();
    // Valkey elects c-0-1; the engine waits for it and then for c-0-0 to come back.
    lab.run_until(Duration::from_secs(60), |pass| {
        matches!(&pass.decision, Decision::Wait { reason: Reason::WaitingForNodes, message }
            if message.contains("c-0-0"))
            && pass
                .observation
                .state("c-0-1")
                .is_some_and(|s| s.myself().is_primary() && !s.myself().slots.is_empty())
    })
    .await;
    eprintln!("[heal-kill] c-0-1 took over after {:?}", started.elapsed());
    assert!(lab.saw("FailingOver"), "the engine waited for the election");
    assert!(
        !lab.history.iter().any(|l| l.contains("FORGET")),
        "nothing is forgotten while the member is away"
    );

    lab.start("c-0-0", Address::New);
    let health = lab.converge(Duration::from_secs(60)).await;
    eprintln!("[heal-kill] whole again after {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 3);
    assert_eq!(health.replicas_in_sync, 3);
    assert_eq!(
        lab.node_id("c-0-0").await,
        old_primary,
        "same node, same id"
    );
    let me = lab
        .cluster_nodes("c-0-0")
        .await
        .myself()
        .expect("myself")
        .clone();
    assert!(me.is_replica(), "c-0-0 returns as a replica");
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restarted_on_new_addresses_heals_with_its_keys() {
    let (mut lab, keys) = formed("heal-all", 105, THREE_BY_ONE).await;
    let names: Vec<String> = lab.members.iter().map(|m| m.name.clone()).collect();
    for name in &names {
        lab.stop(name);
    }
    for name in &names {
        lab.start(name, Address::New);
    }
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(120)).await;
    eprintln!("[heal-all] whole again after {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 3);
    assert!(lab.saw("NodeAddressChanged"));
    for name in &names {
        assert_eq!(
            lab.cluster_info_field(name, "cluster_known_nodes").await,
            "6"
        );
        let me = lab
            .cluster_nodes(name)
            .await
            .myself()
            .expect("myself")
            .clone();
        let address = lab.member(name).address.expect("address");
        assert_eq!(
            me.ip.as_deref(),
            Some(address.ip().to_string().as_str()),
            "{name} announces its new address"
        );
    }
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_returns_empty_replaces_its_predecessor() {
    let (mut lab, keys) = formed("heal-empty", 106, THREE_BY_ONE).await;
    let old_id = lab.node_id("c-1-0").await;
    lab.kill("c-1-0");
    lab.wipe("c-1-0");
    lab.start("c-1-0", Address::Same);
    let started = Instant::now();
    let health = lab.converge(Duration::from_secs(90)).await;
    eprintln!("[heal-empty] whole again after {:?}", started.elapsed());
    assert_eq!(health.ready_shards, 3);
    let new_id = lab.node_id("c-1-0").await;
    assert_ne!(new_id, old_id);
    // Had the failed primary been forgotten before c-1-1 was elected, its slots would have
    // been declared lost and handed to the empty node: the keys below would be gone.
    assert!(!lab.saw("SlotsLost"), "{:?}", lab.history);
    for member in lab.members.clone() {
        let nodes = lab.cluster_nodes(&member.name).await;
        assert!(
            nodes.nodes().iter().all(|n| n.id.as_str() != old_id),
            "{} still knows the old id",
            member.name
        );
        assert_eq!(
            lab.cluster_info_field(&member.name, "cluster_known_nodes")
                .await,
            "6"
        );
    }
    let me = lab
        .cluster_nodes("c-1-0")
        .await
        .myself()
        .expect("myself")
        .clone();
    assert!(me.is_replica(), "the empty member becomes a replica");
    let took_over = lab
        .cluster_nodes("c-1-1")
        .await
        .myself()
        .expect("myself")
        .clone();
    assert_eq!(
        took_over.slots.count(),
        5461,
        "c-1-1 serves the shard's slots"
    );
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_shard_without_a_surviving_copy_gets_its_slots_back_empty() {
    let (mut lab, _) = formed("heal-lost", 107, Desired::new(2, 0)).await;
    // A cache: lost slots are served again at once, empty (and announced as forced).
    lab.desired.lost_slots.refill = true;
    let lost = lab
        .cluster_nodes("c-1-0")
        .await
        .myself()
        .expect("myself")
        .slots
        .clone();
    lab.kill("c-1-0");
    lab.wipe("c-1-0");
    lab.start("c-1-0", Address::New);
    let health = lab.converge(Duration::from_secs(90)).await;
    assert_eq!(health.ready_shards, 2);
    assert!(
        lab.saw("SlotsLost"),
        "the loss is reported: {:?}",
        lab.history
    );
    assert!(
        lab.forced.iter().any(|l| l.contains("ADDSLOTSRANGE")),
        "{:?}",
        lab.forced
    );
    let me = lab
        .cluster_nodes("c-1-0")
        .await
        .myself()
        .expect("myself")
        .clone();
    assert_eq!(me.slots, lost, "the new node serves the lost slots");
    for name in ["c-0-0", "c-1-0"] {
        assert_eq!(lab.cluster_info_field(name, "cluster_state").await, "ok");
        assert_eq!(
            lab.cluster_info_field(name, "cluster_known_nodes").await,
            "2"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_shard_cluster_takes_over_when_no_election_can_happen() {
    // With two primaries, losing one leaves one vote of two: Valkey cannot elect a replica.
    let (mut lab, keys) = formed("heal-takeover", 112, Desired::new(2, 1)).await;
    lab.kill("c-0-0");
    let started = Instant::now();
    lab.run_until(Duration::from_secs(90), |pass| {
        pass.observation
            .state("c-0-1")
            .is_some_and(|s| s.myself().is_primary() && !s.myself().slots.is_empty())
    })
    .await;
    eprintln!(
        "[heal-takeover] c-0-1 took over after {:?}",
        started.elapsed()
    );
    assert!(
        lab.history.iter().any(|l| l.contains("TAKEOVER")),
        "the engine took over once no election came"
    );
    lab.start("c-0-0", Address::New);
    let health = lab.converge(Duration::from_secs(60)).await;
    assert_eq!((health.ready_shards, health.replicas_in_sync), (2, 2));
    lab.assert_topology().await;
    traffic::verify(&lab.addresses(), &keys).await;
}

/// A cluster scaled in to one primary, which learnt its address from the other while there
/// were two, restarted at a new address: with nobody left to tell it, it is told by a MEET
/// of its own, and clients are sent to where it is (CLUSTER SLOTS names the new address), not
/// to the old one for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_primary_restarted_on_a_new_address_announces_it() {
    let (mut lab, keys) = formed("heal-lone", 108, Desired::new(2, 0)).await;
    lab.scale(Desired::new(1, 0));
    lab.converge(Duration::from_secs(60)).await;
    assert_eq!(lab.members.len(), 1, "scaled in to one member");
    let old = lab.ip_of("c-0-0");
    assert_eq!(
        announced(&lab, "c-0-0").await,
        Some(old.to_string()),
        "it knew its address"
    );
    lab.stop("c-0-0");
    lab.start("c-0-0", Address::New);
    let health = lab.converge(Duration::from_secs(60)).await;
    assert_eq!(health.ready_shards, 1);
    let new = lab.ip_of("c-0-0");
    assert_ne!(new, old);
    assert_eq!(
        announced(&lab, "c-0-0").await,
        Some(new.to_string()),
        "c-0-0 announces its new address"
    );
    assert_eq!(
        lab.cluster_info_field("c-0-0", "cluster_known_nodes").await,
        "1",
        "its own MEET left no node behind"
    );
    traffic::verify(&lab.addresses(), &keys).await;
}

/// The address `name` announces for itself (its own line of CLUSTER NODES).
async fn announced(lab: &Lab, name: &str) -> Option<String> {
    lab.cluster_nodes(name)
        .await
        .myself()
        .expect("myself")
        .ip
        .clone()
}
