//! ValkeyReplication end to end (issue 14): one primary and its replicas, formed, seen through
//! `kubectl get` and its Services, and kept whole through the faults and changes the issue names,
//! with a writer that reaches the primary through the read/write Service and counts what a
//! replica confirmed (`WAIT 1`). Each runs on Valkey 9.1 and 8.0 where the version matters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::faults::{self, Endpoint};
use e2e::record::Record;
use e2e::replication::{ReplicationFixture, check_losses};
use e2e::{Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{DeleteParams, EvictParams};
use valkey_api::contract::ROLE_LABEL;

/// Pods scheduled and started, the first primary chosen, two replicas synced.
const FORM: Duration = Duration::from_secs(240);
/// A fault healed and the replication whole again (a failover waits failoverAfterSeconds).
const HEAL: Duration = Duration::from_secs(240);

fn spec(image: &str, replicas: u32, extra: &str) -> String {
    format!("{{image: \"{image}\", replicas: {replicas}{extra}}}")
}

/// `kubectl get valkeyreplication` (and `-o wide`) as rows of columns.
async fn rows(r: &ReplicationFixture, wide: bool) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut args = vec!["get", "valkeyreplication"];
    if wide {
        args.extend(["-o", "wide"]);
    }
    r.ns.table(&args).await
}

async fn forms_with_its_views_and_services(prefix: &str, image: &str) -> Result<()> {
    let r = ReplicationFixture::start(prefix, "orders", &spec(image, 2, "")).await?;
    let ready = r.wait_ready(FORM).await?;
    let status = ready.status.clone().unwrap_or_default();
    check(
        status.primary.as_deref() == Some("orders-0") && status.ready_replicas == 2,
        format!("status: {status:?}"),
    )?;
    r.check_roles().await?;

    // The views: NAME STATE PRIMARY READYREPLICAS AGE, and REASON and PROGRESS with -o wide.
    let (header, table) = rows(&r, false).await?;
    check(
        header == ["NAME", "STATE", "PRIMARY", "READYREPLICAS", "AGE"],
        format!("columns: {header:?}"),
    )?;
    check(
        table.first().and_then(|row| row.get(..4))
            == Some(
                &[
                    "orders".into(),
                    "Ready".into(),
                    "orders-0".into(),
                    "2".into(),
                ][..],
            ),
        format!("rows: {table:?}"),
    )?;
    let (header, table) = rows(&r, true).await?;
    check(
        header
            == [
                "NAME",
                "STATE",
                "REASON",
                "PRIMARY",
                "READYREPLICAS",
                "PROGRESS",
                "AGE",
            ],
        format!("wide columns: {header:?}"),
    )?;
    check(
        table.first().and_then(|row| row.get(2)).map(String::as_str) == Some("Healthy"),
        format!("wide rows: {table:?}"),
    )?;

    // The pods carry the role Valkey reports; the Services select on it.
    let (_, primary_ip) = r.primary().await?;
    r.wait_service_names(&primary_ip, Duration::from_secs(30))
        .await?;
    let replica_ips = {
        let mut ips = Vec::new();
        for member in ["orders-1", "orders-2"] {
            ips.push(r.ip_of(member).await?);
        }
        ips.sort();
        ips
    };
    wait_until(
        Duration::from_secs(30),
        "the replicas Service names both replicas",
        || {
            let want = replica_ips.clone();
            let r = &r;
            async move {
                let ips = r.endpoints("orders-replicas").await?;
                Ok(if ips == want {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{ips:?}"))
                })
            }
        },
    )
    .await?;
    for node in r.nodes().await? {
        let pod = r.ns.pod(&r.pod_of(&node.name_any()).await?).await?;
        let want = if node.name_any() == "orders-0" {
            "primary"
        } else {
            "replica"
        };
        check(
            pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(want),
            format!(
                "{} is labelled {:?}",
                node.name_any(),
                pod.labels().get(ROLE_LABEL)
            ),
        )?;
    }

    // Data written through the Service reaches every replica.
    let written = r.write_confirmed("k", 200).await?;
    check(
        r.missing(written.iter()).await?.is_empty(),
        "written keys read back",
    )?;
    for ip in &replica_ips {
        let keys = r.command_on(ip, &["DBSIZE"]).await?;
        check(keys == "200", format!("replica at {ip} holds {keys} keys"))?;
    }
    one_member_out_at_a_time(&r).await
}

/// The replication's PodDisruptionBudget selects its members, and while one of them is out the
/// API server refuses to evict another.
async fn one_member_out_at_a_time(r: &ReplicationFixture) -> Result<()> {
    let budgets = r.ns.api::<PodDisruptionBudget>();
    let allowed = |want: i32, healthy: i32| {
        let budgets = budgets.clone();
        async move {
            let budget = budgets.get_opt("orders").await?;
            let status = budget.as_ref().and_then(|b| b.status.clone());
            Ok(
                match status
                    .as_ref()
                    .map(|s| (s.disruptions_allowed, s.current_healthy))
                {
                    Some((Some(a), Some(h))) if a == want && h == healthy => Poll::Ready(budget),
                    _ => Poll::NotYet(format!("{status:?}")),
                },
            )
        }
    };
    let budget = wait_until(
        Duration::from_secs(60),
        "the budget allows one disruption",
        || allowed(1, 3),
    )
    .await?
    .unwrap_or_default();
    let spec = budget.spec.unwrap_or_default();
    check(
        spec.max_unavailable == Some(IntOrString::Int(1))
            && spec.selector.and_then(|s| s.match_labels)
                == Some(BTreeMap::from([(
                    "valkey.io/replication".to_owned(),
                    "orders".to_owned(),
                )])),
        format!("budget: {:?}", budget.metadata.name),
    )?;
    // One replica out (paused: NotReady for as long as the test wants); evicting the other is
    // refused. Without the client's retries: the refusal (429) must be seen, not retried away.
    let out = faults::pause(&r.ns.name, &r.pod_of("orders-1").await?).await?;
    let counted = wait_until(
        Duration::from_secs(60),
        "the budget allows no disruption",
        || allowed(0, 2),
    )
    .await;
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(e2e::client_without_retries().await?, &r.ns.name);
    let refused = match counted {
        Ok(_) => Some(
            pods.evict(&r.pod_of("orders-2").await?, &EvictParams::default())
                .await,
        ),
        Err(_) => None,
    };
    out.undo().await?;
    counted?;
    match refused {
        Some(Err(kube::Error::Api(status))) if status.code == 429 => Ok(()),
        other => Err(e2e::E2eError::Check(format!(
            "the eviction of a second member was not refused: {other:?}"
        ))),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replication_forms_with_its_views_and_services_on_valkey_9() -> Result<()> {
    forms_with_its_views_and_services("repl-form9", "valkey/valkey:9.1").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replication_forms_with_its_views_and_services_on_valkey_8() -> Result<()> {
    forms_with_its_views_and_services("repl-form8", "valkey/valkey:8.0").await
}

/// The addresses a slice names ready (what kube-proxy would route to).
fn ready_addresses(slice: &EndpointSlice) -> Vec<&String> {
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter())
        .collect()
}

/// The first version of the read/write Service's EndpointSlice, from a record of every slice
/// version, that names `ip` (ready) and no other address, at or after `since`; when it came.
/// The record follows a watch, which may trail a list that already shows the change: it is
/// given a few seconds to catch up.
async fn slice_names_only(
    r: &ReplicationFixture,
    slices: &Record<EndpointSlice>,
    ip: &str,
    since: Instant,
) -> Result<Instant> {
    wait_until(
        Duration::from_secs(15),
        &format!("a recorded slice version names only {ip}"),
        || async move {
            let named = slices
                .versions()
                .into_iter()
                .filter(|v| !v.deleted && v.at >= since)
                .find(|v| {
                    v.object.labels().get("kubernetes.io/service-name") == Some(&r.name)
                        && ready_addresses(&v.object) == [ip]
                })
                .map(|v| v.at);
            Ok(match named {
                Some(at) => Poll::Ready(at),
                None => Poll::NotYet(format!("{} versions so far", slices.versions().len())),
            })
        },
    )
    .await
}

/// Polls (every 100 ms) until a member other than `old` says `role:master`; returns it, its
/// IP and when it was first seen so.
async fn wait_promotion(
    r: &ReplicationFixture,
    old: &str,
    within: Duration,
) -> Result<(String, String, Instant)> {
    let deadline = Instant::now() + within;
    loop {
        for node in r.nodes().await? {
            let name = node.name_any();
            if name == old {
                continue;
            }
            let Some(ip) = node.status.and_then(|s| s.pod_ip) else {
                continue;
            };
            if r.role_at(&ip).await.is_ok_and(|role| role == "master") {
                return Ok((name, ip, Instant::now()));
            }
        }
        check(
            Instant::now() < deadline,
            format!("no member but {old} became primary within {within:?}"),
        )?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fault the primary suffers in each round of [`primary_faults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrimaryFault {
    /// Its pod is deleted (a new pod comes, with the same volume).
    DeletePod,
    /// Its valkey-server is killed; the kubelet restarts it in place.
    KillProcess,
    /// It is cut from its replicas and from the host (the operator, the node-controller and
    /// the writer all run there) for `failoverAfterSeconds` and more.
    Partition,
    /// Its processes are stopped (SIGSTOP) until a replica is promoted, then continued: it
    /// comes back believing it is the primary.
    Pause,
}

/// One round: the writer runs, the primary suffers `fault`, the replication heals; no
/// WAIT-confirmed write is lost, the Service names the primary, the old one is its replica.
/// With `must_move`, the fault must end with another member as the primary (the old one came
/// back without its data, so keeping it would lose writes).
async fn survive(r: &ReplicationFixture, fault: PrimaryFault, must_move: bool) -> Result<()> {
    let (old, old_ip) = r.primary().await?;
    let before = r.write_confirmed(&format!("before-{fault:?}"), 100).await?;
    let slices = Record::start(r.ns.api::<EndpointSlice>(), None).await?;
    let writer = r.start_writer(&format!("w-{fault:?}")).await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    let struck = Instant::now();
    match fault {
        PrimaryFault::DeletePod => {
            let pod = r.pod_of(&old).await?;
            r.ns.api::<Pod>()
                .delete(&pod, &DeleteParams::default())
                .await?;
        }
        PrimaryFault::KillProcess => {
            let pod = r.pod_of(&old).await?;
            faults::kill(&r.ns.name, &pod, Some("valkey")).await?;
        }
        PrimaryFault::Partition | PrimaryFault::Pause => {
            let pod = r.pod_of(&old).await?;
            let fault_guard = if fault == PrimaryFault::Pause {
                faults::pause(&r.ns.name, &pod).await?
            } else {
                let mut replicas = Vec::new();
                for node in r.nodes().await? {
                    if node.name_any() != old {
                        replicas.push(Endpoint::pod(
                            &r.ns.name,
                            &r.pod_of(&node.name_any()).await?,
                        ));
                    }
                }
                replicas.push(Endpoint::Host);
                faults::partition(&[Endpoint::pod(&r.ns.name, &pod)], &replicas).await?
            };
            let (new, new_ip, promoted_at) = wait_promotion(r, &old, HEAL).await?;
            r.wait_service_names(&new_ip, Duration::from_secs(60))
                .await?;
            // The 100 ms poll may see the promotion after the slice already names it.
            let named = slice_names_only(r, &slices, &new_ip, struck).await?;
            eprintln!(
                "MEASURE {fault:?}: fault → {new} seen as role:master {:?}; fault → the EndpointSlice names only it {:?}",
                promoted_at.duration_since(struck),
                named.duration_since(struck)
            );
            writer.wait_confirmed(50, Duration::from_secs(60)).await?;
            fault_guard.undo().await?;
        }
    }
    let healed = r.wait_ready(HEAL).await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    let acks = writer.stop().await;
    let (primary_now, primary_ip) = r.primary().await?;
    eprintln!(
        "{fault:?}: primary {old} → {primary_now} ({}), ready {:?} after the fault; {} writes acknowledged, {} confirmed, {} refused, longest gap {:?}",
        healed.status.and_then(|s| s.reason).unwrap_or_default(),
        struck.elapsed(),
        acks.plain.len(),
        acks.replicated.len(),
        acks.refused,
        acks.longest_gap
    );
    r.wait_service_names(&primary_ip, Duration::from_secs(30))
        .await?;
    let to_slice = slice_names_only(r, &slices, &primary_ip, struck)
        .await?
        .duration_since(struck);
    eprintln!(
        "MEASURE {fault:?}: the fault → the EndpointSlice names only the primary {primary_now} ({primary_ip}): {to_slice:?}"
    );
    r.check_roles().await?;
    check(
        !must_move || primary_now != old,
        format!("{old} came back empty and is still the primary"),
    )?;
    if primary_now != old {
        let role = r.role_at(&r.ip_of(&old).await?).await?;
        check(
            role == "slave",
            format!("the old primary {old} (at {old_ip}) is {role}"),
        )?;
    }
    let plain_lost = check_losses(r, &acks, &before).await?;
    eprintln!("{fault:?}: {plain_lost} acknowledged (unconfirmed) writes lost");
    Ok(())
}

async fn primary_faults(
    prefix: &str,
    image: &str,
    persistence: bool,
    faults: &[PrimaryFault],
) -> Result<()> {
    let extra = format!(", failoverAfterSeconds: 5, persistence: {{enabled: {persistence}}}");
    let r = ReplicationFixture::start(prefix, "orders", &spec(image, 2, &extra)).await?;
    r.wait_ready(FORM).await?;
    for fault in faults {
        survive(
            &r,
            *fault,
            !persistence && matches!(fault, PrimaryFault::DeletePod),
        )
        .await?;
    }
    Ok(())
}

/// The primary's pod deleted while a writer uses `WAIT 1`, with persistence: the new pod
/// reloads the data it acknowledged, so it may stay the primary (a replica takes over only if
/// it holds more); either way the read/write Service's EndpointSlice names the primary, no
/// WAIT-confirmed write is lost, and an old primary that lost its place rejoins as a replica.
#[tokio::test(flavor = "multi_thread")]
async fn the_primary_pod_deleted_loses_no_confirmed_write_on_valkey_9() -> Result<()> {
    primary_faults(
        "repl-delete9",
        "valkey/valkey:9.1",
        true,
        &[PrimaryFault::DeletePod],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_primary_pod_deleted_loses_no_confirmed_write_on_valkey_8() -> Result<()> {
    primary_faults(
        "repl-delete8",
        "valkey/valkey:8.0",
        true,
        &[PrimaryFault::DeletePod],
    )
    .await
}

/// The same without persistence: the primary's new pod starts empty, so the replica with the
/// most of its writes is promoted, the Service follows it, no WAIT-confirmed write is lost and
/// the emptied old primary rejoins as a replica (never a sync source).
#[tokio::test(flavor = "multi_thread")]
async fn the_primary_pod_deleted_without_persistence_promotes_a_replica_on_valkey_9() -> Result<()>
{
    primary_faults(
        "repl-empty9",
        "valkey/valkey:9.1",
        false,
        &[PrimaryFault::DeletePod],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_primary_pod_deleted_without_persistence_promotes_a_replica_on_valkey_8() -> Result<()>
{
    primary_faults(
        "repl-empty8",
        "valkey/valkey:8.0",
        false,
        &[PrimaryFault::DeletePod],
    )
    .await
}

/// The primary's process killed, then the primary cut from its replicas and from the operator:
/// a replica is promoted only where that is right, and the same guarantees hold.
#[tokio::test(flavor = "multi_thread")]
async fn the_primary_killed_then_cut_off_loses_no_confirmed_write_on_valkey_9() -> Result<()> {
    primary_faults(
        "repl-faults9",
        "valkey/valkey:9.1",
        true,
        &[PrimaryFault::KillProcess, PrimaryFault::Partition],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_primary_killed_then_cut_off_loses_no_confirmed_write_on_valkey_8() -> Result<()> {
    primary_faults(
        "repl-faults8",
        "valkey/valkey:8.0",
        true,
        &[PrimaryFault::KillProcess, PrimaryFault::Partition],
    )
    .await
}

/// A planned switchover: spec.primary names a replica while a writer uses `WAIT 1`. The named
/// member becomes the primary, the read/write Service's EndpointSlice names it and never two
/// servers at once, the old primary replicates it, and no WAIT-confirmed write is lost.
async fn switchover(prefix: &str, image: &str) -> Result<()> {
    let r = ReplicationFixture::start(prefix, "orders", &spec(image, 2, "")).await?;
    r.wait_ready(FORM).await?;
    let (old, _) = r.primary().await?;
    let target = "orders-2";
    check(old != target, format!("{old} is already the primary"))?;
    let before = r.write_confirmed("before-switchover", 100).await?;
    let slices = Record::start(r.ns.api::<EndpointSlice>(), None).await?;
    let writer = r.start_writer("w-switchover").await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    let asked = Instant::now();
    r.patch_spec(serde_json::json!({"primary": target})).await?;
    let moved = r
        .wait(HEAL, &format!("{target} primary and Ready"), |x| {
            x.status.as_ref().is_some_and(|s| {
                s.primary.as_deref() == Some(target)
                    && s.state == Some(valkey_api::v1alpha1::ReplicationState::Ready)
                    && s.observed_generation == x.metadata.generation
                    && s.ready_replicas == 2
            })
        })
        .await?;
    let target_ip = r.ip_of(target).await?;
    r.wait_service_names(&target_ip, Duration::from_secs(30))
        .await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    let acks = writer.stop().await;
    let named = slice_names_only(&r, &slices, &target_ip, asked).await?;
    eprintln!(
        "MEASURE switchover: spec.primary set → the EndpointSlice names only {target}: {:?}; {} writes acknowledged, {} confirmed, {} refused, longest gap {:?}; reason {:?}",
        named.duration_since(asked),
        acks.plain.len(),
        acks.replicated.len(),
        acks.refused,
        acks.longest_gap,
        moved.status.and_then(|s| s.reason)
    );
    slices.complete()?;
    for version in slices.versions() {
        if version.object.labels().get("kubernetes.io/service-name") != Some(&r.name) {
            continue;
        }
        let ready = ready_addresses(&version.object);
        check(
            ready.len() <= 1,
            format!("the read/write slice named {ready:?} at once"),
        )?;
    }
    r.check_roles().await?;
    let role = r.role_at(&r.ip_of(&old).await?).await?;
    check(role == "slave", format!("the old primary {old} is {role}"))?;
    check_losses(&r, &acks, &before).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planned_switchover_to_a_named_member_loses_no_confirmed_write_on_valkey_9() -> Result<()>
{
    switchover("repl-switch9", "valkey/valkey:9.1").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planned_switchover_to_a_named_member_loses_no_confirmed_write_on_valkey_8() -> Result<()>
{
    switchover("repl-switch8", "valkey/valkey:8.0").await
}

/// replicas 2 → 0 → 2: the replicas' nodes go and the primary serves alone with every key; two
/// new replicas come back, sync from it and hold every key.
async fn replicas_scale_2_0_2(prefix: &str, image: &str) -> Result<()> {
    let r = ReplicationFixture::start(prefix, "orders", &spec(image, 2, "")).await?;
    r.wait_ready(FORM).await?;
    let (first, _) = r.primary().await?;
    let written = r.write_confirmed("k", 200).await?;

    r.patch_spec(serde_json::json!({"replicas": 0})).await?;
    r.wait_ready(HEAL).await?;
    wait_until(HEAL, "one member left", || async {
        let names: Vec<String> = r.nodes().await?.iter().map(|n| n.name_any()).collect();
        Ok(if names == [first.clone()] {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!("{names:?}"))
        })
    })
    .await?;
    let (alone, alone_ip) = r.primary().await?;
    check(alone == first, format!("the primary moved to {alone}"))?;
    r.wait_service_names(&alone_ip, Duration::from_secs(30))
        .await?;
    let missing = r.missing(written.iter()).await?;
    check(missing.is_empty(), format!("alone, it lacks {missing:?}"))?;

    r.patch_spec(serde_json::json!({"replicas": 2})).await?;
    r.wait_ready(HEAL).await?;
    check(r.nodes().await?.len() == 3, "three members again")?;
    r.check_roles().await?;
    for node in r.nodes().await? {
        let ip = r.ip_of(&node.name_any()).await?;
        let keys = r.command_on(&ip, &["DBSIZE"]).await?;
        check(
            keys == "200",
            format!("{} holds {keys} keys", node.name_any()),
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_scale_2_0_2_and_keep_every_key_on_valkey_9() -> Result<()> {
    replicas_scale_2_0_2("repl-scale", "valkey/valkey:9.1").await
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_scale_2_0_2_and_keep_every_key_on_valkey_8() -> Result<()> {
    replicas_scale_2_0_2("repl-scale8", "valkey/valkey:8.0").await
}

/// `replicas: 0` with persistence: a standalone server whose pod is deleted comes back (a new
/// pod, the same volume) with every key it acknowledged, and is the primary again.
#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_server_keeps_its_data_across_pod_deletion() -> Result<()> {
    let r =
        ReplicationFixture::start("repl-alone", "solo", &spec("valkey/valkey:9.1", 0, "")).await?;
    r.wait_ready(FORM).await?;
    let (name, ip) = r.primary().await?;
    let mut conn = r.connect(&ip).await?;
    let mut written = std::collections::BTreeMap::new();
    for n in 0..300 {
        let (key, value) = (format!("k:{n}"), format!("v{n}"));
        e2e::valkey_cmd(&mut conn, &["SET", &key, &value]).await?;
        written.insert(key, value);
    }
    let old_pod = r.ns.pod(&r.pod_of(&name).await?).await?;
    let old_uid = old_pod.metadata.uid.clone().unwrap_or_default();
    r.ns.api::<Pod>()
        .delete(&old_pod.name_any(), &DeleteParams::default())
        .await?;
    wait_until(HEAL, "a new pod, Ready, primary again", || {
        let (r, name, old_uid) = (&r, name.clone(), old_uid.clone());
        async move {
            let Ok(pod_name) = r.pod_of(&name).await else {
                return Ok(Poll::NotYet("no pod".into()));
            };
            let Ok(pod) = r.ns.pod(&pod_name).await else {
                return Ok(Poll::NotYet("no pod".into()));
            };
            let replication = r.get().await?;
            let ready = replication
                .status
                .as_ref()
                .is_some_and(|s| s.state == Some(valkey_api::v1alpha1::ReplicationState::Ready));
            Ok(
                if pod.metadata.uid.as_deref() != Some(old_uid.as_str()) && ready {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("pod {:?}", pod.metadata.uid))
                },
            )
        }
    })
    .await?;
    let (now, now_ip) = r.primary().await?;
    check(now == name, format!("the primary is {now}"))?;
    r.wait_service_names(&now_ip, Duration::from_secs(30))
        .await?;
    let missing = r.missing(written.iter()).await?;
    check(
        missing.is_empty(),
        format!(
            "{} of 300 keys lost across the pod's deletion: {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        ),
    )?;
    Ok(())
}

/// A rolling image change of a 1 + 2 replication while a writer uses `WAIT 1`: at most one member
/// is down at any moment (a record of every ValkeyNode version), the replicas restart first and
/// the old primary last, after another member became the primary; no WAIT-confirmed write is
/// lost and every pod runs the new image.
#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_image_change_restarts_the_primary_last_after_a_switchover() -> Result<()> {
    rolling_image_change("repl-roll", "valkey/valkey:9.1", "valkey/valkey:9.1.2").await
}

/// The same roll as an upgrade across major versions, 8.0 to 9.1: the replicas on 9 sync from the
/// primary on 8, then the switchover hands the primary role to a server on 9 (a partial resync:
/// an 8.0 server cannot load a 9 snapshot) before the old primary restarts on 9.
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_from_valkey_8_to_9_restarts_the_primary_last_after_a_switchover() -> Result<()>
{
    rolling_image_change("repl-up89", "valkey/valkey:8.0", "valkey/valkey:9.1.2").await
}

async fn rolling_image_change(prefix: &str, from: &str, to: &str) -> Result<()> {
    use valkey_api::v1alpha1::{Role, ValkeyNode};
    let r = ReplicationFixture::start(prefix, "orders", &spec(from, 2, "")).await?;
    r.wait_ready(FORM).await?;
    let (old, _) = r.primary().await?;
    let before = r.write_confirmed("before-roll", 100).await?;
    let record = Record::start(
        r.ns.api::<ValkeyNode>(),
        Some(&format!("valkey.io/replication={}", r.name)),
    )
    .await?;
    let writer = r.start_writer("w-roll").await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    // Every status the replication reports through the roll.
    let statuses = Record::start(r.api(), None).await?;
    let started = Instant::now();
    let patched = r.patch_spec(serde_json::json!({"image": to})).await?;
    r.wait_done(Duration::from_secs(480)).await?;
    // Ready for the new generation only once every member runs its new spec: a tool that waits
    // for observedGeneration and Ready must not be told the roll is over before it began.
    e2e::record::ready_only_when_rolled(
        &statuses,
        &r.api().get(&r.name).await?,
        &record,
        &r.nodes().await?,
        patched.metadata.generation,
        3,
    )
    .await?;
    writer.wait_confirmed(50, Duration::from_secs(60)).await?;
    let acks = writer.stop().await;

    // Replay every version in the API server's order: how many members were down at once, when
    // each first went down, and who was primary (by its node's status) at that moment.
    record.complete()?;
    let mut ready: std::collections::BTreeMap<String, bool> = Default::default();
    let mut role: std::collections::BTreeMap<String, Option<Role>> = Default::default();
    let mut worst = 0;
    let mut went_down: Vec<(String, Option<String>)> = Vec::new();
    for version in record.versions() {
        let name = version.name();
        if version.deleted {
            continue;
        }
        let status = version.object.status.clone().unwrap_or_default();
        let was_ready = ready.get(&name).copied().unwrap_or(true);
        if was_ready && !status.ready && !went_down.iter().any(|(n, _)| *n == name) {
            let primary_then = role
                .iter()
                .find(|(n, r)| **n != name && **r == Some(Role::Primary))
                .map(|(n, _)| n.clone());
            went_down.push((name.clone(), primary_then));
        }
        ready.insert(name.clone(), status.ready);
        role.insert(name, status.role);
        worst = worst.max(ready.values().filter(|r| !**r).count());
    }
    eprintln!(
        "MEASURE roll: {:?}; at most {worst} member(s) down at once; order {went_down:?}; {} writes acknowledged, {} confirmed, {} refused, longest gap {:?}",
        started.elapsed(),
        acks.plain.len(),
        acks.replicated.len(),
        acks.refused,
        acks.longest_gap
    );
    check(worst <= 1, format!("{worst} members were down at once"))?;
    check(
        went_down.len() == 3,
        format!("every member restarts once: {went_down:?}"),
    )?;
    let (last, primary_then) = &went_down[2];
    check(
        *last == old && primary_then.as_ref().is_some_and(|p| *p != old),
        format!("the old primary {old} restarts last, after a switchover: {went_down:?}"),
    )?;
    for node in r.nodes().await? {
        let pod = r.ns.pod(&r.pod_of(&node.name_any()).await?).await?;
        let image = pod
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        check(image == to, format!("{} runs {image}", node.name_any()))?;
    }
    r.check_roles().await?;
    check_losses(&r, &acks, &before).await?;
    Ok(())
}

/// The primary cut from the operator and the node-controller (the host) only: its replicas
/// still hear from it, so it is alive and no replica is ever promoted, however long the cut
/// lasts (here three times failoverAfterSeconds); the status says why. Healed, it is still the
/// primary, with every WAIT-confirmed write.
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_its_replicas_still_hear_is_never_replaced() -> Result<()> {
    use valkey_api::v1alpha1::ValkeyReplication;
    let r = ReplicationFixture::start(
        "repl-unseen",
        "orders",
        &spec("valkey/valkey:9.1", 2, ", failoverAfterSeconds: 5"),
    )
    .await?;
    r.wait_ready(FORM).await?;
    let (old, _) = r.primary().await?;
    let before = r.write_confirmed("before-cut", 100).await?;
    let record = Record::start(r.api(), None).await?;
    let pod = r.pod_of(&old).await?;
    let cut = faults::partition(&[Endpoint::pod(&r.ns.name, &pod)], &[Endpoint::Host]).await?;
    let struck = Instant::now();
    let hold = Duration::from_secs(15);
    wait_until(
        hold + Duration::from_secs(60),
        "the status says the primary is unreachable, 15 s into the cut",
        || async {
            let status = r.get().await?.status.unwrap_or_default();
            let unreachable = status.reason.as_deref() == Some("PrimaryUnreachable");
            Ok(if unreachable && struck.elapsed() >= hold {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{:?}: {:?}", status.reason, status.message))
            })
        },
    )
    .await?;
    cut.undo().await?;
    r.wait_ready(HEAL).await?;
    record.complete()?;
    let versions = record.versions();
    let primaries: Vec<Option<String>> = versions
        .iter()
        .map(|v: &e2e::record::Version<ValkeyReplication>| {
            v.object.status.as_ref().and_then(|s| s.primary.clone())
        })
        .collect();
    check(
        primaries.iter().all(|p| p.as_deref() == Some(old.as_str())),
        format!("the recorded primary moved during the cut: {primaries:?}"),
    )?;
    let messages: Vec<String> = versions
        .iter()
        .filter_map(|v| v.object.status.as_ref().and_then(|s| s.message.clone()))
        .collect();
    eprintln!("status messages during the cut: {messages:?}");
    let (now, now_ip) = r.primary().await?;
    check(now == old, format!("the primary is {now}"))?;
    r.wait_service_names(&now_ip, Duration::from_secs(30))
        .await?;
    r.check_roles().await?;
    let missing = r.missing(before.iter()).await?;
    check(missing.is_empty(), format!("lost {missing:?}"))?;
    Ok(())
}

/// The primary's processes stopped past failoverAfterSeconds: a replica is promoted, the Service
/// follows it, and the old primary, continued, believes it is the primary until the operator
/// makes it a replica of the new one; no WAIT-confirmed write is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_primary_is_replaced_and_rejoins_as_a_replica_on_valkey_9() -> Result<()> {
    primary_faults(
        "repl-pause9",
        "valkey/valkey:9.1",
        true,
        &[PrimaryFault::Pause],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_primary_is_replaced_and_rejoins_as_a_replica_on_valkey_8() -> Result<()> {
    primary_faults(
        "repl-pause8",
        "valkey/valkey:8.0",
        true,
        &[PrimaryFault::Pause],
    )
    .await
}

/// A primary cut off from its replicas (the operator and its clients still reach it) refuses
/// writes within `failoverAfterSeconds / 2` with the default `minReplicasToWrite` of two
/// replicas, so a primary isolated for real would acknowledge nothing a promotion then drops;
/// with `minReplicasToWrite: 0` it keeps taking writes (1,921 of 11,619 plain writes were lost
/// that way once the operator promoted a replica).
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_cut_from_its_replicas_refuses_writes_unless_told_otherwise() -> Result<()> {
    let r = ReplicationFixture::start(
        "repl-minreplicas",
        "guarded",
        &spec("valkey/valkey:9.1", 2, ", failoverAfterSeconds: 6"),
    )
    .await?;
    r.wait_ready(FORM).await?;
    let (primary, ip) = r.primary().await?;
    let pod = r.pod_of(&primary).await?;
    let mut replicas = Vec::new();
    for node in r.nodes().await? {
        if node.name_any() != primary {
            replicas.push(Endpoint::pod(
                &r.ns.name,
                &r.pod_of(&node.name_any()).await?,
            ));
        }
    }
    let refused_within = |limit: Duration| {
        let ip = ip.clone();
        let r = &r;
        async move {
            wait_until(limit, "the cut-off primary refusing writes", || {
                let ip = ip.clone();
                async move {
                    Ok(
                        match r.command_on(&ip, &["SET", "guarded:probe", "x"]).await {
                            Err(e) if e.to_string().contains("NOREPLICAS") => Poll::Ready(()),
                            other => Poll::NotYet(format!("{other:?}")),
                        },
                    )
                }
            })
            .await
        }
    };
    // On by default with two replicas, the lag half of failoverAfterSeconds (3 s).
    let cut = faults::partition(&[Endpoint::pod(&r.ns.name, &pod)], &replicas).await?;
    refused_within(Duration::from_secs(30)).await?;
    cut.undo().await?;
    r.wait_ready(HEAL).await?;

    // Off: the same cut, and the primary takes writes all along, as Valkey does by default.
    r.patch_spec(serde_json::json!({"minReplicasToWrite": 0}))
        .await?;
    wait_until(
        Duration::from_secs(60),
        "min-replicas-to-write 0 in the primary's ValkeyNode",
        || async {
            let node = r.node(&primary).await?;
            let now = node
                .spec
                .config
                .unwrap_or_default()
                .get("min-replicas-to-write")
                .cloned();
            Ok(if now.as_deref() == Some("0") {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{now:?}"))
            })
        },
    )
    .await?;
    e2e::wait_live_settings_applied(&r.ns).await?;
    let cut = faults::partition(&[Endpoint::pod(&r.ns.name, &pod)], &replicas).await?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        r.command_on(&ip, &["SET", "guarded:probe", "x"]).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cut.undo().await?;
    r.wait_ready(HEAL).await?;
    Ok(())
}
