//! The cluster-controller end to end: a ValkeyCluster forms, scales, heals and rolls a real Valkey
//! cluster through ValkeyNodes alone. Every scenario writes keys before and keeps a writer running
//! during the operation, then reads every acknowledged write back through a cluster-aware client.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::{ClusterFixture, wait_writes};
use e2e::record::Record;
use e2e::{Result, check};
use valkey_api::v1alpha1::{ClusterState, Role, ValkeyNode};

const FORM: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread")]
async fn three_shards_with_a_replica_each_form_across_zones() -> Result<()> {
    let c =
        ClusterFixture::start("cluster-form", "cluster-sample", "{shards: 3, replicas: 1}").await?;
    c.wait_ready(FORM).await?;

    let info = c.cluster_info().await?;
    check(
        info.get("cluster_state").map(String::as_str) == Some("ok"),
        format!("CLUSTER INFO: {info:?}"),
    )?;
    check(
        info.get("cluster_slots_assigned").map(String::as_str) == Some("16384"),
        format!("CLUSTER INFO: {info:?}"),
    )?;
    check(
        info.get("cluster_known_nodes").map(String::as_str) == Some("6"),
        format!("CLUSTER INFO: {info:?}"),
    )?;

    // The seed's views.
    let wide =
        c.ns.kubectl(&["get", "valkeycluster", "-o", "wide"])
            .await?;
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    check(
        row.get(..4) == Some(&["cluster-sample", "Ready", "ClusterHealthy", "3"][..]),
        wide.clone(),
    )?;
    let nodes = c.ns.kubectl(&["get", "valkeynode"]).await?;
    for shard in 0..3 {
        for index in 0..2 {
            let name = format!("cluster-sample-{shard}-{index}");
            let line = nodes
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_default();
            let cols: Vec<&str> = line.split_whitespace().collect();
            let pod = format!("valkey-{name}-0");
            check(
                cols.get(1) == Some(&"true") && cols.get(3) == Some(&pod.as_str()),
                nodes.clone(),
            )?;
        }
    }

    // Each replica's primary is in another zone.
    let members = c.wait_roles(3, 3, Duration::from_secs(60)).await?;
    let zones = c.zones().await?;
    let mut replicas = 0;
    for member in &members {
        let status = member.status.clone().unwrap_or_default();
        if status.role != Some(Role::Replica) {
            continue;
        }
        replicas += 1;
        let name = member.metadata.name.clone().unwrap_or_default();
        let ip = status.pod_ip.clone().unwrap_or_default();
        let nodes_text = c.command_on(&ip, &["CLUSTER", "NODES"]).await?;
        let primary_id = nodes_text
            .lines()
            .find(|l| l.contains("myself"))
            .and_then(|l| l.split_whitespace().nth(3))
            .unwrap_or_default()
            .to_owned();
        let primary_ip = nodes_text
            .lines()
            .find(|l| l.starts_with(&primary_id))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|a| a.split(':').next())
            .unwrap_or_default()
            .to_owned();
        let primary = members.iter().find(|m| {
            m.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(primary_ip.as_str())
        });
        let primary_name = primary
            .and_then(|p| p.metadata.name.clone())
            .unwrap_or_default();
        check(
            zones.get(&name) != zones.get(&primary_name) && zones.contains_key(&name),
            format!(
                "replica {name} ({:?}) shares a zone with its primary {primary_name} ({:?})",
                zones.get(&name),
                zones.get(&primary_name)
            ),
        )?;
    }
    check(replicas == 3, format!("{replicas} replicas"))?;

    // And it serves.
    let keys = c.write_keys("form", 200).await?;
    c.verify(&keys).await?;
    no_secret_leaves_its_secret(&c).await
}

/// No password lands in a ConfigMap, a status, an Event or a controller's log line.
async fn no_secret_leaves_its_secret(c: &ClusterFixture) -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let mut secrets = vec![c.password().await?.unwrap_or_default()];
    let acl = c.ns.api::<Secret>().get(&format!("{}-acl", c.name)).await?;
    for key in [
        "operator-password",
        "healthcheck-password",
        "replication-password",
    ] {
        let value = acl
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned());
        secrets.push(value.unwrap_or_default());
    }
    check(
        secrets.iter().all(|s| s.len() >= 16),
        "every password was found",
    )?;
    let config_maps = c.ns.api::<ConfigMap>().list(&Default::default()).await?;
    let mut places = vec![
        (
            "ConfigMaps".to_owned(),
            serde_json::to_string(&config_maps.items).unwrap_or_default(),
        ),
        (
            "ValkeyCluster".to_owned(),
            serde_json::to_string(&c.api().get(&c.name).await?).unwrap_or_default(),
        ),
        (
            "ValkeyNodes".to_owned(),
            serde_json::to_string(&c.nodes().await?).unwrap_or_default(),
        ),
        (
            "Events".to_owned(),
            c.ns.kubectl(&["get", "events", "-o", "json"]).await?,
        ),
        (
            "node-controller log".to_owned(),
            c.node_controller.log_text()?,
        ),
        (
            "cluster-controller log".to_owned(),
            c.cluster_controller.log_text()?,
        ),
    ];
    places.retain(|(_, text)| !text.is_empty());
    for (place, text) in &places {
        for secret in &secrets {
            check(
                !text.contains(secret.as_str()),
                format!("a password appears in the {place}"),
            )?;
        }
    }
    check(places.len() == 6, "every place was read")
}

/// Scales shards through `steps` with a writer running; nothing acknowledged may be lost.
async fn scale_shards(prefix: &str, image: &str, steps: &[i32]) -> Result<()> {
    let first = steps.first().copied().unwrap_or(3);
    let c = ClusterFixture::start(
        prefix,
        "scale",
        &format!("{{shards: {first}, replicas: 1, image: '{image}'}}"),
    )
    .await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 500).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 50, Duration::from_secs(30)).await?;
    for shards in &steps[1..] {
        c.patch_spec(serde_json::json!({"shards": shards})).await?;
        c.wait_ready(Duration::from_secs(420)).await?;
        wait_writes(&writer, 50, Duration::from_secs(30)).await?;
        let info = c.cluster_info().await?;
        check(
            info.get("cluster_size").map(String::as_str) == Some(&shards.to_string()),
            format!("after scaling to {shards}: {info:?}"),
        )?;
        check(
            c.nodes().await?.len() == (*shards as usize) * 2,
            format!("ValkeyNodes after scaling to {shards}"),
        )?;
        c.assert_no_open_slots().await?;
    }
    let (acked, refused) = writer.stop().await;
    eprintln!(
        "{prefix}: {} writes acknowledged, {refused} refused during scaling",
        acked.len()
    );
    c.verify(&before).await?;
    c.verify(&acked).await
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_scale_3_5_2_on_valkey_9_with_atomic_migration() -> Result<()> {
    scale_shards("cluster-scale9", "valkey/valkey:9.1", &[3, 5, 2]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_scale_3_4_2_on_valkey_8_with_key_migration() -> Result<()> {
    // 3 → 4: three sources give to the new shard side by side; 4 → 2: two leaving shards drain
    // into both that stay, four pairs side by side.
    scale_shards("cluster-scale8", "valkey/valkey:8.0", &[3, 4, 2]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_scale_1_2_0() -> Result<()> {
    let c = ClusterFixture::start("cluster-replicas", "reps", "{shards: 2, replicas: 1}").await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 300).await?;
    let writer = c.start_writer().await?;
    for replicas in [2, 0] {
        c.patch_spec(serde_json::json!({"replicas": replicas}))
            .await?;
        c.wait_ready(Duration::from_secs(300)).await?;
        wait_writes(&writer, 50, Duration::from_secs(30)).await?;
        c.wait_roles(2, 2 * replicas, Duration::from_secs(60))
            .await?;
    }
    let (acked, _) = writer.stop().await;
    c.verify(&before).await?;
    c.verify(&acked).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_primary_pod_fails_over_and_the_cluster_heals() -> Result<()> {
    let c = ClusterFixture::start("cluster-failover", "heal", "{shards: 3, replicas: 1}").await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 300).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 50, Duration::from_secs(30)).await?;
    let victim = c.member_with_role(Role::Primary).await?;
    let victim_name = victim.metadata.name.clone().unwrap_or_default();
    let victim_pod = victim.status.and_then(|s| s.pod_name).unwrap_or_default();
    let statuses = Record::start(c.api(), None).await?;
    c.ns.kubectl(&["delete", "pod", &victim_pod, "--wait=false"])
        .await?;
    // A replica takes over (Valkey's own failover); the old primary returns as a replica.
    e2e::operator::wait_node(
        &c.ns,
        &victim_name,
        Duration::from_secs(180),
        "back as a replica",
        |n| {
            n.status
                .as_ref()
                .is_some_and(|s| s.ready && s.role == Some(Role::Replica))
        },
    )
    .await?;
    let healed = c.wait_ready(Duration::from_secs(300)).await?;
    wait_writes(&writer, 50, Duration::from_secs(30)).await?;
    let (acked, refused) = writer.stop().await;
    eprintln!(
        "failover: {} writes acknowledged, {refused} refused",
        acked.len()
    );
    // The status said so while it healed (however briefly): the hurt shard was not counted ready.
    statuses.complete()?;
    check(
        statuses.versions().iter().any(|v| {
            v.object.status.as_ref().is_some_and(|s| {
                s.ready_shards < 3 && s.state != Some(valkey_api::v1alpha1::ClusterState::Ready)
            })
        }),
        "the status never reported the hurt shard while it healed",
    )?;
    check(
        healed.status.map(|s| s.ready_shards) == Some(3),
        "3 ready shards",
    )?;
    c.wait_roles(3, 3, Duration::from_secs(60)).await?;
    c.verify(&before).await?;
    c.verify(&acked).await
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_every_pod_at_once_heals_with_all_keys() -> Result<()> {
    let c = ClusterFixture::start("cluster-restart", "all", "{shards: 3, replicas: 1}").await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 500).await?;
    let mut old = BTreeMap::new();
    for m in c.nodes().await? {
        let pod = m.status.and_then(|s| s.pod_name).unwrap_or_default();
        let uid = c.ns.pod(&pod).await?.metadata.uid.unwrap_or_default();
        old.insert(pod, uid);
    }
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(old.keys().map(String::as_str));
    c.ns.kubectl(&args).await?;
    // Every pod is replaced by a new one (a new UID), and the cluster heals from its volumes.
    e2e::wait_until(Duration::from_secs(120), "every pod replaced", || {
        let (c, old) = (&c, &old);
        async move {
            let mut replaced = 0;
            for (pod, uid) in old {
                if let Ok(p) = c.ns.pod(pod).await
                    && p.metadata.uid.as_ref() != Some(uid)
                {
                    replaced += 1;
                }
            }
            Ok(if replaced == old.len() {
                e2e::Poll::Ready(())
            } else {
                e2e::Poll::NotYet(format!("{replaced} replaced"))
            })
        }
    })
    .await?;
    // The cluster's status may still say Ready from before; wait for Valkey itself: every member
    // ready on its new pod and reporting cluster_state:ok.
    e2e::wait_until(
        Duration::from_secs(300),
        "every member back and the cluster ok",
        || {
            let (c, old) = (&c, &old);
            async move {
                let mut ok = 0;
                let nodes = c.nodes().await?;
                for m in &nodes {
                    let Some(status) = m.status.as_ref().filter(|s| s.ready) else {
                        continue;
                    };
                    let (Some(pod), Some(ip)) = (status.pod_name.clone(), status.pod_ip.clone())
                    else {
                        continue;
                    };
                    let fresh = c.ns.pod(&pod).await.ok().and_then(|p| p.metadata.uid)
                        != old.get(&pod).cloned();
                    let info = c
                        .command_on(&ip, &["CLUSTER", "INFO"])
                        .await
                        .unwrap_or_default();
                    if fresh && info.contains("cluster_state:ok") {
                        ok += 1;
                    }
                }
                Ok(if ok == nodes.len() && ok == old.len() {
                    e2e::Poll::Ready(())
                } else {
                    e2e::Poll::NotYet(format!("{ok} of {} members back and ok", old.len()))
                })
            }
        },
    )
    .await?;
    c.wait_ready(Duration::from_secs(300)).await?;
    c.verify(&before).await?;
    let after = c.write_keys("post", 100).await?;
    c.verify(&after).await
}

/// Waits until the cluster is Ready for its spec with every member on its desired revision.
async fn wait_rolled(c: &ClusterFixture, within: Duration) -> Result<()> {
    e2e::wait_until(within, "the roll finished", || async {
        let cluster = c.api().get(&c.name).await?;
        let ready = cluster.status.as_ref().is_some_and(|s| {
            s.state == Some(valkey_api::v1alpha1::ClusterState::Ready)
                && s.observed_generation == cluster.metadata.generation
        });
        let nodes = c.nodes().await?;
        let rolled = nodes.iter().all(|m| {
            m.status.as_ref().is_some_and(|s| {
                s.current_revision.is_some() && s.current_revision == s.desired_revision
            })
        });
        Ok(if ready && rolled {
            e2e::Poll::Ready(())
        } else {
            e2e::Poll::NotYet(format!("{:?}", cluster.status))
        })
    })
    .await
}

/// The most members of one shard that were not ready at the same moment, over every state the
/// record holds (the API server's order, so no short overlap can be missed).
fn max_down_per_shard(record: &Record<ValkeyNode>) -> Result<usize> {
    record.complete()?;
    let mut ready: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut worst = 0;
    for version in record.versions() {
        let name = version.name();
        if version.deleted {
            ready.remove(&name);
            continue;
        }
        let shard = version
            .object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("valkey.io/shard").cloned())
            .unwrap_or_default();
        let is_ready = version.object.status.as_ref().is_some_and(|s| s.ready);
        ready.insert(name, (shard, is_ready));
        let mut down: BTreeMap<&str, usize> = BTreeMap::new();
        for (shard, is_ready) in ready.values() {
            if !is_ready {
                *down.entry(shard.as_str()).or_default() += 1;
            }
        }
        worst = worst.max(down.values().copied().max().unwrap_or(0));
    }
    Ok(worst)
}

/// From the record of one member: it went not ready, came back, and its restart gate moved to
/// `released` only after it was ready again: never while its status said not ready.
fn gate_held_while_not_ready(
    record: &Record<ValkeyNode>,
    member: &str,
    released: &str,
) -> Result<()> {
    use e2e::record::{describe, first_from};
    record.complete()?;
    let versions = record.versions_of(member);
    let is_ready = |n: &ValkeyNode| n.status.as_ref().is_some_and(|s| s.ready);
    let gate = |n: &ValkeyNode| n.spec.allowed_revision.clone();
    let story = || {
        versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{} ready={} allowed={:?}",
                    describe(i, v),
                    is_ready(&v.object),
                    gate(&v.object)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let went_down = first_from(&versions, 0, |n| !is_ready(n)).ok_or_else(|| {
        e2e::E2eError::Check(format!("{member} never went not ready:\n{}", story()))
    })?;
    let back = first_from(&versions, went_down, is_ready)
        .ok_or_else(|| e2e::E2eError::Check(format!("{member} never came back:\n{}", story())))?;
    let release =
        first_from(&versions, 0, |n| gate(n).as_deref() == Some(released)).ok_or_else(|| {
            e2e::E2eError::Check(format!(
                "{member} was never released to {released}:\n{}",
                story()
            ))
        })?;
    check(
        versions[went_down..back]
            .iter()
            .all(|v| gate(&v.object).is_some_and(|g| g != released)),
        format!("{member}'s gate moved while it was not ready:\n{}", story()),
    )?;
    check(
        release > back && is_ready(&versions[release].object),
        format!(
            "{member} was released at #{release}, before it was ready again at #{back}:\n{}",
            story()
        ),
    )
}

/// Pauses every client of one replica for `seconds` and waits until its ValkeyNode reports it
/// not ready; returns the member's name.
async fn pause_a_replica(c: &ClusterFixture, seconds: u64) -> Result<String> {
    let replica = c.member_with_role(Role::Replica).await?;
    let name = replica.metadata.name.clone().unwrap_or_default();
    let ip = replica.status.and_then(|s| s.pod_ip).unwrap_or_default();
    let millis = (seconds * 1000).to_string();
    c.admin_command_on(&ip, &["CLIENT", "PAUSE", &millis, "ALL"])
        .await?;
    e2e::operator::wait_node(
        &c.ns,
        &name,
        Duration::from_secs(seconds),
        "not ready while paused",
        |n| n.status.as_ref().is_some_and(|s| !s.ready),
    )
    .await?;
    Ok(name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_upgrade_from_valkey_8_to_9_loses_no_acknowledged_write() -> Result<()> {
    let c = ClusterFixture::start(
        "cluster-roll",
        "roll",
        "{shards: 2, replicas: 1, image: 'valkey/valkey:8.0'}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 300).await?;
    let old: BTreeMap<String, String> = c
        .nodes()
        .await?
        .into_iter()
        .map(|m| {
            (
                m.metadata.name.unwrap_or_default(),
                m.metadata.uid.unwrap_or_default(),
            )
        })
        .collect();
    // Every state of every member from here on, in the API server's order.
    let record = Record::start(
        c.ns.api::<ValkeyNode>(),
        Some(&format!("valkey.io/cluster={}", c.name)),
    )
    .await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 50, Duration::from_secs(30)).await?;
    // A member that is not ready for a moment (a paused server: the probes and the controllers'
    // PINGs time out) keeps its restart gate: the new spec must not restart it out of turn.
    let paused = pause_a_replica(&c, 25).await?;
    // Valkey 9 adds a setting value 8.0 refuses (shutdown-on-sigterm failover): the servers
    // still on 8.0 must not be sent it, or their refusal holds the roll that replaces them.
    // Every status the cluster reports through the roll.
    let statuses = Record::start(c.api(), None).await?;
    let patched = c
        .patch_spec(serde_json::json!({"image": "valkey/valkey:9.1"}))
        .await?;
    wait_rolled(&c, Duration::from_secs(480)).await?;
    // Ready for the new generation only once every member runs its new spec: a tool that waits
    // for observedGeneration and Ready must not be told the roll is over before it began.
    e2e::record::ready_only_when_rolled(
        &statuses,
        &c.api().get(&c.name).await?,
        &record,
        &c.nodes().await?,
        patched.metadata.generation,
        4,
    )
    .await?;
    wait_writes(&writer, 50, Duration::from_secs(30)).await?;
    let (acked, refused) = writer.stop().await;
    let worst = max_down_per_shard(&record)?;
    eprintln!(
        "rolling update: at most {worst} member(s) of a shard down at once; {} writes acknowledged, {refused} refused",
        acked.len()
    );
    check(
        worst <= 1,
        format!("{worst} members of one shard were down at once"),
    )?;
    let paused_now = c.ns.api::<ValkeyNode>().get(&paused).await?;
    let released = paused_now
        .status
        .and_then(|s| s.current_revision)
        .unwrap_or_default();
    gate_held_while_not_ready(&record, &paused, &released)?;
    for m in c.nodes().await? {
        let pod =
            c.ns.pod(
                &m.status
                    .as_ref()
                    .and_then(|s| s.pod_name.clone())
                    .unwrap_or_default(),
            )
            .await?;
        let image = pod
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        let version = m
            .status
            .as_ref()
            .and_then(|s| s.valkey_version.clone())
            .unwrap_or_default();
        check(
            version.starts_with("9.1."),
            format!(
                "{} reports Valkey {version}",
                m.metadata.name.clone().unwrap_or_default()
            ),
        )?;
        check(
            image == "valkey/valkey:9.1",
            format!(
                "{} still runs {image}",
                m.metadata.name.clone().unwrap_or_default()
            ),
        )?;
        check(
            old.contains_key(&m.metadata.name.unwrap_or_default()),
            "the same members",
        )?;
    }
    c.verify(&before).await?;
    c.verify(&acked).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_controller_killed_mid_scale_out_finishes_the_migration() -> Result<()> {
    // Valkey 8's key-by-key migration keeps slots open long enough to be interrupted reliably.
    let mut c = ClusterFixture::start(
        "cluster-kill",
        "kill",
        "{shards: 2, replicas: 0, image: 'valkey/valkey:8.0'}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 10_000).await?;
    c.patch_spec(serde_json::json!({"shards": 4})).await?;
    // The servers, not the status: every pair moves side by side, and 10,000 keys move within
    // the pass that starts them, before the status could say MigratingSlots.
    let open = c.wait_open_slot(Duration::from_secs(180)).await?;
    c.cluster_controller.kill().await?;
    eprintln!("killed the cluster-controller while {open} held a slot open");
    let ns_name = c.ns.name.clone();
    c.cluster_controller =
        e2e::operator::ControllerProcess::start("cluster-controller", &c.ns, &[]).await?;
    eprintln!("restarted the cluster-controller in {ns_name} mid-migration");
    c.wait_ready(Duration::from_secs(300)).await?;
    c.assert_no_open_slots().await?;
    let info = c.cluster_info().await?;
    check(
        info.get("cluster_size").map(String::as_str) == Some("4"),
        format!("{info:?}"),
    )?;
    c.verify(&before).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_that_cannot_be_met_is_degraded_with_the_schedulers_reason() -> Result<()> {
    // Four members of one shard, each in its own zone, on a cluster of three zones.
    let c = ClusterFixture::start(
        "cluster-zones",
        "zones",
        "{shards: 1, replicas: 3, placement: Required, persistence: {enabled: false}}",
    )
    .await?;
    let message = c
        .wait_degraded("Unschedulable", Duration::from_secs(180))
        .await?;
    check(
        message.contains("ValkeyNode zones-0-") && message.contains("anti-affinity"),
        format!("message: {message}"),
    )?;
    // Relaxing the placement lets it recover: the pending member takes the new spec.
    c.patch_spec(serde_json::json!({"placement": "Preferred"}))
        .await?;
    c.wait_ready(FORM).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_returns_empty_replaces_its_predecessor() -> Result<()> {
    // Without persistence a replaced pod comes back with no data and a new node ID.
    let c = ClusterFixture::start(
        "cluster-empty",
        "empty",
        "{shards: 2, replicas: 1, persistence: {enabled: false}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 300).await?;
    let victim = c.member_with_role(Role::Primary).await?;
    let name = victim.metadata.name.clone().unwrap_or_default();
    let ip = victim
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    let old_id = c.command_on(&ip, &["CLUSTER", "MYID"]).await?;
    let pod = victim.status.and_then(|s| s.pod_name).unwrap_or_default();
    c.ns.kubectl(&["delete", "pod", &pod, "--wait=false"])
        .await?;
    e2e::wait_until(
        Duration::from_secs(180),
        "a new node ID for the member",
        || {
            let (c, name, old_id) = (&c, &name, &old_id);
            async move {
                let node =
                    c.ns.api::<valkey_api::v1alpha1::ValkeyNode>()
                        .get(name)
                        .await?;
                let Some(ip) = e2e::cluster::ready_pod_ip(&node) else {
                    return Ok(e2e::Poll::NotYet("not ready".into()));
                };
                let id = c
                    .command_on(&ip, &["CLUSTER", "MYID"])
                    .await
                    .unwrap_or_default();
                Ok(if !id.is_empty() && id != *old_id {
                    e2e::Poll::Ready(())
                } else {
                    e2e::Poll::NotYet(format!("id {id}"))
                })
            }
        },
    )
    .await?;
    c.wait_ready(Duration::from_secs(240)).await?;
    c.wait_roles(2, 2, Duration::from_secs(60)).await?;
    // The predecessor is forgotten everywhere: every node knows exactly the four members.
    for m in c.nodes().await? {
        let ip = m.status.and_then(|s| s.pod_ip).unwrap_or_default();
        let nodes = c.command_on(&ip, &["CLUSTER", "NODES"]).await?;
        check(
            !nodes.contains(old_id.as_str()),
            format!("{ip} still knows {old_id}:\n{nodes}"),
        )?;
        check(
            nodes.lines().count() == 4,
            format!("{ip} knows {} nodes:\n{nodes}", nodes.lines().count()),
        )?;
    }
    c.verify(&before).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valkey_error_that_persists_degrades_the_cluster_with_valkeys_words() -> Result<()> {
    let c = ClusterFixture::start("cluster-refused", "refused", "{shards: 2, replicas: 0}").await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 200).await?;
    // Every server refuses the operator's CLUSTER MEET, so a new shard cannot join.
    let ips: Vec<String> = c
        .nodes()
        .await?
        .into_iter()
        .filter_map(|n| n.status?.pod_ip)
        .collect();
    for ip in &ips {
        c.admin_command_on(ip, &["ACL", "SETUSER", "operator", "-cluster|meet"])
            .await?;
    }
    c.patch_spec(serde_json::json!({"shards": 3})).await?;
    let message = c
        .wait_degraded("ActionFailing", Duration::from_secs(180))
        .await?;
    check(
        message.contains("CLUSTER MEET") && message.contains("no permissions"),
        format!("the message names the command and Valkey's answer: {message}"),
    )?;
    // How fast it retries (ever more slowly, at most every 30 s) and that the unchanging words
    // cause no hot loop are the pure function's tests (cluster::reconcile, parent::pass).
    // Nothing was lost or taken away meanwhile; once Valkey allows it again the shard joins.
    check(c.nodes().await?.len() == 3, "all three members exist")?;
    for ip in &ips {
        c.admin_command_on(ip, &["ACL", "SETUSER", "operator", "+cluster|meet"])
            .await?;
    }
    c.wait_ready(Duration::from_secs(300)).await?;
    c.wait_roles(3, 0, Duration::from_secs(60)).await?;
    c.assert_no_open_slots().await?;
    c.verify(&before).await
}

/// A shard about to be lost: its slot ranges as the status names them, which of the keys live
/// there (by Valkey's own hash), and its pods.
struct DoomedShard {
    ranges: String,
    doomed: BTreeMap<String, bool>,
    pods: Vec<String>,
}

impl DoomedShard {
    async fn of_a_primary(c: &ClusterFixture, keys: &BTreeMap<String, String>) -> Result<Self> {
        let victim = c.member_with_role(Role::Primary).await?;
        let victim_ip = e2e::cluster::ready_pod_ip(&victim).unwrap_or_default();
        // The victim's slot ranges, as Valkey writes them (`0-8191`), comma-joined.
        let nodes = c.command_on(&victim_ip, &["CLUSTER", "NODES"]).await?;
        let ranges = nodes
            .lines()
            .find(|l| l.contains("myself"))
            .map(|l| l.split_whitespace().skip(8).collect::<Vec<_>>().join(","))
            .unwrap_or_default();
        check(
            !ranges.is_empty(),
            format!("the primary owns no slots:\n{nodes}"),
        )?;
        let slots: Vec<(u32, u32)> = ranges
            .split(',')
            .filter_map(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect();
        let mut doomed = BTreeMap::new();
        for key in keys.keys() {
            let slot: u32 = c
                .command_on(&victim_ip, &["CLUSTER", "KEYSLOT", key])
                .await?
                .trim()
                .parse()
                .unwrap_or(u32::MAX);
            doomed.insert(
                key.clone(),
                slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)),
            );
        }
        let shard_label = |n: &ValkeyNode| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("valkey.io/shard").cloned())
        };
        let shard = shard_label(&victim);
        let pods: Vec<String> = c
            .nodes()
            .await?
            .into_iter()
            .filter(|n| shard_label(n) == shard)
            .filter_map(|n| n.status?.pod_name)
            .collect();
        check(pods.len() == 2, format!("the shard's two pods: {pods:?}"))?;
        Ok(Self {
            ranges,
            doomed,
            pods,
        })
    }

    /// The keys that survive the shard.
    fn survivors(&self, keys: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        keys.iter()
            .filter(|(k, _)| !self.doomed.get(*k).copied().unwrap_or(true))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Deletes every pod of the shard at once.
    async fn lose(&self, c: &ClusterFixture) -> Result<()> {
        let mut delete = vec!["delete", "pod", "--wait=false"];
        delete.extend(self.pods.iter().map(String::as_str));
        c.ns.kubectl(&delete).await.map(|_| ())
    }

    /// A Warning Event with reason SlotsLost names the ranges.
    async fn check_warned(&self, c: &ClusterFixture) -> Result<()> {
        let events = c.ns.events().await?;
        check(
            events
                .lines()
                .any(|l| l.starts_with("Warning SlotsLost") && l.contains(&self.ranges)),
            format!("no Warning Event naming {}: {events}", self.ranges),
        )
    }

    /// Once served again: the other shard's keys all read back, and exactly the lost ones are gone.
    async fn check_only_these_lost(
        &self,
        c: &ClusterFixture,
        keys: &BTreeMap<String, String>,
    ) -> Result<()> {
        let survivors = self.survivors(keys);
        check(
            !survivors.is_empty() && survivors.len() < keys.len(),
            "keys on both shards",
        )?;
        c.verify(&survivors).await?;
        let missing = c.missing(keys.iter()).await?;
        check(
            missing.len() == keys.len() - survivors.len(),
            format!(
                "exactly the lost shard's keys are gone: {} missing, {} expected",
                missing.len(),
                keys.len() - survivors.len()
            ),
        )
    }
}

/// A 2 × 1 cluster of `spec` with 300 keys loses a whole shard (both pods deleted at once); the
/// record of its status starts just before.
async fn lose_a_shard(
    prefix: &str,
    spec: &str,
) -> Result<(
    ClusterFixture,
    BTreeMap<String, String>,
    DoomedShard,
    Record<valkey_api::v1alpha1::ValkeyCluster>,
)> {
    let c = ClusterFixture::start(prefix, "lost", spec).await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 300).await?;
    let shard = DoomedShard::of_a_primary(&c, &before).await?;
    let statuses = Record::start(c.api(), None).await?;
    shard.lose(&c).await?;
    Ok((c, before, shard, statuses))
}

fn state_of(v: &e2e::record::Version<valkey_api::v1alpha1::ValkeyCluster>) -> Option<ClusterState> {
    v.object.status.as_ref().and_then(|s| s.state)
}

/// Without persistence, a shard whose every member is replaced has lost its slots' data for good.
/// With the default policy (`onSlotsLost: Wait`, a store) the cluster says `Failed`, names the lost
/// ranges in its status and in a Warning Event, and serves those slots again (empty) only once the
/// user names them in `acceptLostSlots`; the other shard's keys are untouched throughout.
#[tokio::test(flavor = "multi_thread")]
async fn a_shard_lost_without_persistence_fails_until_the_user_accepts_the_loss() -> Result<()> {
    let (c, before, shard, statuses) = lose_a_shard(
        "cluster-lost",
        "{shards: 2, replicas: 1, persistence: {enabled: false}}",
    )
    .await?;
    let failed = c
        .wait_status(Duration::from_secs(240), "Failed: SlotsLost", |s| {
            s.state == Some(ClusterState::Failed) && s.reason.as_deref() == Some("SlotsLost")
        })
        .await?;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    check(
        message.contains(&shard.ranges) && message.contains("acceptLostSlots"),
        format!(
            "the status names {} and what to do: {message}",
            shard.ranges
        ),
    )?;
    shard.check_warned(&c).await?;
    // Meanwhile Valkey serves no slot at all (cluster-require-full-coverage, its default): a
    // store stays down as a whole until the user decides; the surviving shard's keys are read
    // back below, once it serves again.

    // The user accepts the loss: the slots are served again, empty, and the cluster is Ready.
    let accepted_at = statuses.versions().len();
    c.patch_spec(serde_json::json!({ "acceptLostSlots": shard.ranges }))
        .await?;
    c.wait_ready(Duration::from_secs(240)).await?;
    c.wait_roles(2, 2, Duration::from_secs(60)).await?;
    shard.check_only_these_lost(&c, &before).await?;
    // Between the loss and the user's word the cluster never said Ready.
    statuses.complete()?;
    let versions = statuses.versions();
    let first_failed = versions
        .iter()
        .position(|v| state_of(v) == Some(ClusterState::Failed))
        .unwrap_or(versions.len());
    check(
        !versions[first_failed..accepted_at.max(first_failed)]
            .iter()
            .any(|v| state_of(v) == Some(ClusterState::Ready)),
        "the cluster said Ready before the user accepted the loss",
    )
}

/// A cache (`onSlotsLost: Refill`) is served again at once, empty where the shard was lost, with
/// a Warning Event naming the ranges; nobody has to say a word.
#[tokio::test(flavor = "multi_thread")]
async fn a_cache_refills_a_lost_shard_at_once_and_warns() -> Result<()> {
    let (c, before, shard, statuses) = lose_a_shard(
        "cluster-refill",
        "{shards: 2, replicas: 1, persistence: {enabled: false}, onSlotsLost: Refill}",
    )
    .await?;
    // Ready again once the lost slots are served: after the loss was seen (a version not Ready).
    e2e::wait_until(Duration::from_secs(240), "Ready after the loss", || {
        let versions = statuses.versions();
        async move {
            let hurt = versions
                .iter()
                .position(|v| state_of(v) != Some(ClusterState::Ready));
            Ok(match hurt {
                Some(i)
                    if versions[i..]
                        .iter()
                        .any(|v| state_of(v) == Some(ClusterState::Ready)) =>
                {
                    e2e::Poll::Ready(())
                }
                _ => e2e::Poll::NotYet(format!("{} versions", versions.len())),
            })
        }
    })
    .await?;
    c.wait_ready(Duration::from_secs(60)).await?;
    c.wait_roles(2, 2, Duration::from_secs(60)).await?;
    shard.check_warned(&c).await?;
    shard.check_only_these_lost(&c, &before).await
}
