//! The node-controller end to end (issue 4): each test runs the debug binary scoped to its own
//! namespace, creates ValkeyNodes through the API and checks what a parent or a person would see:
//! status and conditions, `kubectl get`, the children, and Valkey itself at `status.podIP`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::faults;
use e2e::node::{
    NodeFixture, READY, condition, condition_is, config_get, desired_revision, has_role, pod_ip_of,
    pod_name_of, random_password, ready_primary, required_condition, revision_annotation,
    sentinel_primary, settled, versions_of,
};
use e2e::{
    E2eError, Poll, Result, Took, check, resource_version, uid, valkey, valkey_as, valkey_cmd,
    wait_gone, wait_object, wait_until,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use valkey_api::contract::{NODE_LABEL, REVISION_ANNOTATION};
use valkey_api::v1alpha1::{Role, ValkeyNode};

/// The controller re-reads a ready node every 10 s; twice that plus slack bounds a role change.
const ROLE_CHANGE: Duration = Duration::from_secs(30);

// ---- ready, columns, role ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn both_workload_types_become_ready_and_print_the_seed_columns() -> Result<()> {
    let _took = Took::start("both_workload_types_become_ready_and_print_the_seed_columns");
    let nc = NodeFixture::start("nc-ready").await?;
    let started = Instant::now();
    nc.create("cache-sts", json!({})).await?;
    nc.create(
        "cache-dep",
        json!({"workloadType": "Deployment", "image": "valkey/valkey:8.0"}),
    )
    .await?;
    let (sts, dep) = tokio::try_join!(nc.wait_ready("cache-sts"), nc.wait_ready("cache-dep"))?;
    eprintln!("both Ready after {:?}", started.elapsed());

    check(
        pod_name_of(&sts)? == "valkey-cache-sts-0",
        format!("StatefulSet pod: {:?}", sts.status),
    )?;
    let dep_pod = pod_name_of(&dep)?;
    check(
        dep_pod.starts_with("valkey-cache-dep-"),
        format!("Deployment pod: {dep_pod}"),
    )?;
    nc.ns.api::<StatefulSet>().get("valkey-cache-sts").await?;
    nc.ns.api::<Deployment>().get("valkey-cache-dep").await?;

    // Valkey itself answers at status.podIP, with the version of the node's image.
    for (node, version) in [(&sts, "9.1."), (&dep, "8.0.")] {
        let mut conn = valkey(&pod_ip_of(node)?, 6379).await?;
        check(
            valkey_cmd(&mut conn, &["PING"]).await? == "PONG",
            "PING did not answer PONG",
        )?;
        let info = valkey_cmd(&mut conn, &["INFO", "server"]).await?;
        check(
            info.lines()
                .any(|l| l.starts_with(&format!("valkey_version:{version}"))),
            format!("{} runs the wrong version: {info}", node.name_any()),
        )?;
    }

    let (header, rows) = nc.rows().await?;
    check(
        header == ["NAME", "READY", "ROLE", "POD", "AGE"],
        format!("columns: {header:?}"),
    )?;
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.first().map(String::as_str) == Some(name))
    };
    let sts_row = row("cache-sts").cloned().unwrap_or_default();
    check(
        sts_row.get(1..4)
            == Some(
                &[
                    "true".to_owned(),
                    "primary".into(),
                    "valkey-cache-sts-0".into(),
                ][..],
            ),
        format!("cache-sts row: {sts_row:?}"),
    )?;
    let dep_row = row("cache-dep").cloned().unwrap_or_default();
    check(
        dep_row.get(1..4) == Some(&["true".to_owned(), "primary".into(), dep_pod][..]),
        format!("cache-dep row: {dep_row:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn role_follows_replicaof_and_back() -> Result<()> {
    let _took = Took::start("role_follows_replicaof_and_back");
    let nc = NodeFixture::start("nc-role").await?;
    nc.create("upstream", json!({})).await?;
    nc.create("follower", json!({"workloadType": "Deployment"}))
        .await?;
    let (upstream, follower) =
        tokio::try_join!(nc.wait_ready("upstream"), nc.wait_ready("follower"))?;

    let mut conn = valkey(&pod_ip_of(&follower)?, 6379).await?;
    let upstream_ip = pod_ip_of(&upstream)?;
    let asked = Instant::now();
    valkey_cmd(&mut conn, &["REPLICAOF", &upstream_ip, "6379"]).await?;
    nc.wait("follower", ROLE_CHANGE, "role replica", |n| {
        has_role(n, Role::Replica)
    })
    .await?;
    eprintln!(
        "role replica reported {:?} after REPLICAOF",
        asked.elapsed()
    );
    let (_, rows) = nc.rows().await?;
    check(
        rows.iter().any(|r| {
            r.first().map(String::as_str) == Some("follower")
                && r.get(2).map(String::as_str) == Some("replica")
        }),
        format!("kubectl get valkeynode does not show the replica: {rows:?}"),
    )?;

    let asked = Instant::now();
    valkey_cmd(&mut conn, &["REPLICAOF", "NO", "ONE"]).await?;
    nc.wait("follower", ROLE_CHANGE, "role primary again", |n| {
        has_role(n, Role::Primary)
    })
    .await?;
    eprintln!(
        "role primary reported {:?} after REPLICAOF NO ONE",
        asked.elapsed()
    );
    // The other node was never asked to change.
    let upstream = nc.get("upstream").await?;
    check(
        ready_primary(&upstream),
        format!("upstream: {:?}", upstream.status),
    )
}

/// The pod carries the role Valkey reports, as a label Services select on: changed by a metadata
/// patch when the role changes (the pod is never replaced), at once when the parent pokes the
/// node, and removed while Valkey does not answer the node-controller.
#[tokio::test(flavor = "multi_thread")]
async fn the_pod_is_labelled_with_the_role_valkey_reports_without_a_restart() -> Result<()> {
    let _took = Took::start("the_pod_is_labelled_with_the_role_valkey_reports_without_a_restart");
    let nc = NodeFixture::start("nc-rolelabel").await?;
    nc.create("solo", json!({})).await?;
    let node = nc.wait_ready("solo").await?;
    let pod = pod_name_of(&node)?;
    let uid_before = uid(&nc.ns.pod(&pod).await?);
    nc.wait_role_label(&pod, Some("primary"), ROLE_CHANGE)
        .await?;

    let mut conn = valkey(&pod_ip_of(&node)?, 6379).await?;
    valkey_cmd(&mut conn, &["REPLICAOF", "127.0.0.1", "0"]).await?;
    nc.poke("solo").await?;
    let took = nc
        .wait_role_label(&pod, Some("replica"), ROLE_CHANGE)
        .await?;
    eprintln!("label replica {took:?} after REPLICAOF and a poke");
    valkey_cmd(&mut conn, &["REPLICAOF", "NO", "ONE"]).await?;
    nc.poke("solo").await?;
    let took = nc
        .wait_role_label(&pod, Some("primary"), ROLE_CHANGE)
        .await?;
    eprintln!("label primary {took:?} after REPLICAOF NO ONE and a poke");

    // Cut from the host (where the node-controller runs): nobody can confirm its role.
    let cut = faults::partition(
        &[faults::Endpoint::pod(&nc.ns.name, &pod)],
        &[faults::Endpoint::Host],
    )
    .await?;
    nc.wait_role_label(&pod, None, ROLE_CHANGE).await?;
    cut.undo().await?;
    nc.wait_role_label(&pod, Some("primary"), ROLE_CHANGE)
        .await?;
    check(
        uid(&nc.ns.pod(&pod).await?) == uid_before,
        "the pod was replaced; a role label must never restart it",
    )
}

// ---- persistence and deletion ------------------------------------------------------------------

/// Writes a key, deletes the pod, and reads the key back from the pod that replaces it.
async fn key_survives_pod_deletion(nc: &NodeFixture, name: &str) -> Result<()> {
    let node = nc.wait_ready(name).await?;
    let old_pod = nc.ns.pod(&pod_name_of(&node)?).await?;
    let mut conn = valkey(&pod_ip_of(&node)?, 6379).await?;
    valkey_cmd(&mut conn, &["SET", "e2e:kept", name]).await?;
    drop(conn);
    let started = Instant::now();
    nc.ns
        .kubectl(&["delete", "pod", &old_pod.name_any(), "--wait=false"])
        .await?;
    let old_uid = uid(&old_pod);
    let node = wait_until(READY, &format!("{name}: ready on a new pod"), || async {
        let node = nc.get(name).await?;
        let Some(pod_name) = node.status.as_ref().and_then(|s| s.pod_name.clone()) else {
            return Ok(Poll::NotYet("no pod name".into()));
        };
        let Some(pod) = nc.ns.api::<Pod>().get_opt(&pod_name).await? else {
            return Ok(Poll::NotYet(format!("{pod_name} gone")));
        };
        Ok(if uid(&pod) != old_uid && ready_primary(&node) {
            Poll::Ready(node)
        } else {
            Poll::NotYet(format!("{:?}", node.status))
        })
    })
    .await?;
    eprintln!("{name}: back on a new pod after {:?}", started.elapsed());
    let mut conn = valkey(&pod_ip_of(&node)?, 6379).await?;
    let value = valkey_cmd(&mut conn, &["GET", "e2e:kept"]).await?;
    check(
        value == name,
        format!("{name}: GET e2e:kept after the pod came back = {value:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn persistent_data_survives_pod_deletion_for_both_workload_types() -> Result<()> {
    let _took = Took::start("persistent_data_survives_pod_deletion_for_both_workload_types");
    let nc = NodeFixture::start("nc-persist").await?;
    let persistent =
        json!({"persistence": {"enabled": true, "size": "1Gi"}, "config": {"appendonly": "yes"}});
    nc.create_of_each_workload("durable", persistent).await?;
    tokio::try_join!(
        key_survives_pod_deletion(&nc, "durable-sts"),
        key_survives_pod_deletion(&nc, "durable-dep"),
    )?;
    // Both pods ran on the claims the node-controller made.
    for name in ["durable-sts", "durable-dep"] {
        let pvc = nc
            .ns
            .api::<PersistentVolumeClaim>()
            .get(&format!("valkey-{name}-data"))
            .await?;
        check(
            pvc.status.and_then(|s| s.phase).as_deref() == Some("Bound"),
            format!("valkey-{name}-data is not Bound"),
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_node_removes_its_children_and_keeps_its_volume() -> Result<()> {
    let _took = Took::start("deleting_a_node_removes_its_children_and_keeps_its_volume");
    let nc = NodeFixture::start("nc-delete").await?;
    nc.create(
        "doomed",
        json!({"persistence": {"enabled": true, "size": "1Gi"}}),
    )
    .await?;
    let node = nc.wait_ready("doomed").await?;
    let pod_name = pod_name_of(&node)?;
    let pvc_before = nc
        .ns
        .api::<PersistentVolumeClaim>()
        .get("valkey-doomed-data")
        .await?;
    nc.ns.api::<ConfigMap>().get("valkey-doomed-config").await?;

    let started = Instant::now();
    nc.api().delete("doomed", &DeleteParams::default()).await?;
    let within = Duration::from_secs(60);
    wait_gone(&nc.ns.api::<StatefulSet>(), "valkey-doomed", within).await?;
    wait_gone(&nc.ns.api::<ConfigMap>(), "valkey-doomed-config", within).await?;
    wait_gone(&nc.ns.api::<Pod>(), &pod_name, within).await?;
    wait_gone(&nc.api(), "doomed", within).await?;
    eprintln!(
        "workload, ConfigMap and pod gone after {:?}",
        started.elapsed()
    );

    let pvc = nc
        .ns
        .api::<PersistentVolumeClaim>()
        .get_opt("valkey-doomed-data")
        .await?;
    check(
        pvc.as_ref()
            .is_some_and(|p| uid(p) == uid(&pvc_before) && p.metadata.deletion_timestamp.is_none()),
        format!("valkey-doomed-data was not kept: {pvc:?}"),
    )
}

// ---- scheduling ----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn scheduling_constraints_reach_the_pod() -> Result<()> {
    let _took = Took::start("scheduling_constraints_reach_the_pod");
    let nc = NodeFixture::start("nc-sched").await?;
    let toleration = json!({"key": "e2e.valkey.io/dedicated", "operator": "Equal", "value": "valkey", "effect": "NoSchedule"});
    let affinity = json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b", "zone-c"]}]}
        ]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"valkey.io/role-hint": "primary"}}}}
        ]}
    });
    nc.create(
        "placed",
        json!({
            "nodeSelector": {"topology.kubernetes.io/zone": "zone-b"},
            "tolerations": [toleration],
            "affinity": affinity,
        }),
    )
    .await?;
    let node = nc.wait_ready("placed").await?;
    let pod = nc.ns.pod(&pod_name_of(&node)?).await?;
    let spec = pod.spec.clone().unwrap_or_default();
    check(
        spec.node_name.as_deref() == Some("localkube-b") || !e2e::is_localkube(),
        format!("the pod runs on {:?}, not the zone-b node", spec.node_name),
    )?;
    check(
        node.status.as_ref().and_then(|s| s.node_name.clone()) == spec.node_name,
        format!("status.nodeName {:?}", node.status),
    )?;
    let host = Api::<k8s_openapi::api::core::v1::Node>::all(nc.ns.client.clone())
        .get(spec.node_name.as_deref().unwrap_or_default())
        .await?;
    check(
        host.labels()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str)
            == Some("zone-b"),
        format!("node {} is not in zone-b", host.name_any()),
    )?;
    check(
        spec.node_selector
            == Some(BTreeMap::from([(
                "topology.kubernetes.io/zone".to_owned(),
                "zone-b".to_owned(),
            )])),
        format!("nodeSelector {:?}", spec.node_selector),
    )?;
    let wanted: k8s_openapi::api::core::v1::Toleration =
        serde_json::from_value(toleration).map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        spec.tolerations.iter().flatten().any(|t| *t == wanted),
        format!("tolerations {:?}", spec.tolerations),
    )?;
    let wanted: k8s_openapi::api::core::v1::Affinity =
        serde_json::from_value(affinity).map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        spec.affinity.as_ref() == Some(&wanted),
        format!("affinity {:?}", spec.affinity),
    )
}

// ---- no writes in a steady state ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_node_costs_no_writes() -> Result<()> {
    let _took = Took::start("an_unchanged_node_costs_no_writes");
    let nc = NodeFixture::start("nc-steady").await?;
    nc.create(
        "steady",
        json!({"persistence": {"enabled": true, "size": "1Gi"}}),
    )
    .await?;
    nc.wait_settled("steady", READY).await?;
    // The StatefulSet controller has caught up with its pod too.
    let sts_api = nc.ns.api::<StatefulSet>();
    wait_object(&sts_api, "valkey-steady", READY, "status caught up", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.observed_generation == s.metadata.generation
                && st.available_replicas == Some(1)
                && st.current_revision == st.update_revision
        })
    })
    .await?;

    let snapshot = || async {
        Ok::<_, E2eError>([
            ("ValkeyNode", resource_version(&nc.get("steady").await?)),
            (
                "StatefulSet",
                resource_version(&sts_api.get("valkey-steady").await?),
            ),
            (
                "ConfigMap",
                resource_version(&nc.ns.api::<ConfigMap>().get("valkey-steady-config").await?),
            ),
            (
                "PersistentVolumeClaim",
                resource_version(
                    &nc.ns
                        .api::<PersistentVolumeClaim>()
                        .get("valkey-steady-data")
                        .await?,
                ),
            ),
        ])
    };
    let before = snapshot().await?;
    let from = nc.controller.reconciles().await?;
    let started = Instant::now();
    let to = nc
        .controller
        .wait_reconciles(from, 2.0, Duration::from_secs(40))
        .await?;
    let after = snapshot().await?;
    eprintln!(
        "{} reconciles in {:?}; resourceVersions {before:?}",
        to - from,
        started.elapsed()
    );
    check(
        before == after,
        format!(
            "resourceVersions moved across {} reconciles: {before:?} -> {after:?}",
            to - from
        ),
    )?;
    let errors = nc.controller.metric("reconcile_errors_total").await?;
    check(errors == 0.0, format!("{errors} reconcile errors"))
}

// ---- revisions -----------------------------------------------------------------------------------

/// Pins the node's revision, changes its config, sees the pod held, then allows the new revision
/// and sees exactly one new pod with the new config.
async fn config_change_waits_for_its_revision(nc: &NodeFixture, name: &str) -> Result<()> {
    let node = nc.wait_settled(name, READY).await?;
    let first = desired_revision(&node)?;
    nc.patch_spec(name, json!({"allowedRevision": first}))
        .await?;
    let node = nc
        .wait(name, READY, "pinned", |n| {
            settled(n) && n.spec.allowed_revision.as_deref() == Some(first.as_str())
        })
        .await?;
    let pod_before = nc.ns.pod(&pod_name_of(&node)?).await?;
    check(
        revision_annotation(&pod_before).as_deref() == Some(first.as_str()),
        format!(
            "{name}: pod revision {:?}, desired {first}",
            revision_annotation(&pod_before)
        ),
    )?;
    let uids = nc.watch_pod_uids(name).await?;

    nc.patch_spec(name, json!({"config": {"databases": "8"}}))
        .await?;
    let held = nc
        .wait(
            name,
            READY,
            "a new desiredRevision awaiting approval",
            |n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.desired_revision.as_deref())
                    .is_some_and(|d| d != first)
                    && condition_is(n, "PodUpToDate", "False", "AwaitingRestartApproval")
                    && n.status.as_ref().and_then(|s| s.observed_generation) == n.meta().generation
            },
        )
        .await?;
    let second = desired_revision(&held)?;
    let workload = format!("valkey-{name}");
    let template_revision = |annotations: Option<&BTreeMap<String, String>>| {
        annotations
            .and_then(|a| a.get(REVISION_ANNOTATION))
            .cloned()
    };
    if held.spec.workload_type == valkey_api::v1alpha1::WorkloadType::StatefulSet {
        let second = second.clone();
        wait_object(
            &nc.ns.api::<StatefulSet>(),
            &workload,
            READY,
            "new template held by partition 1",
            move |s| {
                let spec = s.spec.as_ref();
                let partition = spec
                    .and_then(|s| s.update_strategy.as_ref())
                    .and_then(|u| u.rolling_update.as_ref())
                    .and_then(|r| r.partition);
                let revision = template_revision(
                    spec.and_then(|s| s.template.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref()),
                );
                let status = s.status.as_ref();
                partition == Some(1)
                    && revision.as_deref() == Some(second.as_str())
                    && status.and_then(|st| st.observed_generation) == s.metadata.generation
                    && status.is_some_and(|st| st.update_revision != st.current_revision)
            },
        )
        .await?;
    } else {
        let second = second.clone();
        wait_object(
            &nc.ns.api::<Deployment>(),
            &workload,
            READY,
            "new template, paused",
            move |d| {
                let spec = d.spec.as_ref();
                let revision = template_revision(
                    spec.and_then(|s| s.template.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref()),
                );
                spec.and_then(|s| s.paused) == Some(true)
                    && revision.as_deref() == Some(second.as_str())
                    && d.status.as_ref().and_then(|st| st.observed_generation)
                        == d.metadata.generation
            },
        )
        .await?;
    }
    let pods = nc.live_pods(name).await?;
    check(
        pods.len() == 1
            && uid(&pods[0]) == uid(&pod_before)
            && revision_annotation(&pods[0]).as_deref() == Some(first.as_str()),
        format!(
            "{name}: the pod changed before the revision was allowed: {:?}",
            pods.iter()
                .map(|p| (p.name_any(), uid(p), revision_annotation(p)))
                .collect::<Vec<_>>()
        ),
    )?;
    let node = nc.get(name).await?;
    check(
        node.status
            .as_ref()
            .is_some_and(|s| s.ready && s.current_revision.as_deref() == Some(first.as_str())),
        format!(
            "{name}: not ready on the old revision while held: {:?}",
            node.status
        ),
    )?;

    // The held revision's valkey.conf stays beside the new one, for a pod recreated while held.
    let config_map = format!("valkey-{name}-config");
    let cms = nc.ns.api::<ConfigMap>();
    let held_keys = cms.get(&config_map).await?.data.unwrap_or_default().len();
    check(
        held_keys == 2,
        format!("{name}: {held_keys} valkey.conf keys while held"),
    )?;

    let allowed = Instant::now();
    nc.patch_spec(name, json!({"allowedRevision": second}))
        .await?;
    let node = nc
        .wait(name, READY, "ready on the new revision", |n| {
            settled(n)
                && n.status
                    .as_ref()
                    .and_then(|s| s.current_revision.as_deref())
                    == Some(second.as_str())
        })
        .await?;
    // The old pod may still be terminating: wait until one pod is left.
    let pod = wait_until(READY, &format!("{name}: one pod left"), || async {
        let pods = nc.live_pods(name).await?;
        Ok(match pods.as_slice() {
            [only] => Poll::Ready(only.clone()),
            _ => Poll::NotYet(format!("{} pods", pods.len())),
        })
    })
    .await?;
    eprintln!(
        "{name}: rolled to the new revision {:?} after it was allowed",
        allowed.elapsed()
    );
    check(
        uid(&pod) != uid(&pod_before)
            && revision_annotation(&pod).as_deref() == Some(second.as_str())
            && pod.name_any() == pod_name_of(&node)?,
        format!(
            "{name}: the new pod {} {:?}",
            pod.name_any(),
            revision_annotation(&pod)
        ),
    )?;
    let seen = uids.uids();
    check(
        seen.len() == 2 && seen.contains(&uid(&pod_before)) && seen.contains(&uid(&pod)),
        format!("{name}: pods seen during the change: {seen:?} (expected the old and one new)"),
    )?;
    // `databases` restarts the server (settings Valkey changes at runtime are set live and
    // change no revision: see the daytwo tests).
    let databases = config_get(&pod_ip_of(&node)?, "databases").await?;
    check(
        databases == "8",
        format!("{name}: CONFIG GET databases = {databases:?} on the new revision"),
    )?;
    // Rolled out: the old config goes.
    wait_object(&cms, &config_map, READY, "only the new config", |c| {
        c.data.as_ref().is_some_and(|d| d.len() == 1)
    })
    .await?;
    Ok(())
}

/// Pins the node, changes its config, then deletes the held pod: the pod that replaces it must
/// still be the held revision, with the held revision's config.
async fn a_held_pod_comes_back_as_it_was(nc: &NodeFixture, name: &str) -> Result<()> {
    let node = nc.wait_settled(name, READY).await?;
    let first = desired_revision(&node)?;
    nc.patch_spec(name, json!({"allowedRevision": first}))
        .await?;
    nc.wait(name, READY, "pinned", |n| {
        settled(n) && n.spec.allowed_revision.as_deref() == Some(first.as_str())
    })
    .await?;
    nc.patch_spec(name, json!({"config": {"databases": "8"}}))
        .await?;
    let held = nc
        .wait(name, READY, "awaiting approval", |n| {
            condition_is(n, "PodUpToDate", "False", "AwaitingRestartApproval")
                && n.status.as_ref().and_then(|s| s.observed_generation) == n.meta().generation
        })
        .await?;
    let second = desired_revision(&held)?;
    let old_pod = nc.ns.pod(&pod_name_of(&held)?).await?;
    let old_uid = uid(&old_pod);
    nc.ns
        .kubectl(&["delete", "pod", &old_pod.name_any(), "--wait=false"])
        .await?;
    let node = wait_until(
        READY,
        &format!("{name}: a replacement of the held pod"),
        || async {
            let node = nc.get(name).await?;
            let pods = nc.live_pods(name).await?;
            Ok(match pods.as_slice() {
                [pod]
                    if uid(pod) != old_uid
                        && ready_primary(&node)
                        && node.status.as_ref().and_then(|s| s.pod_name.as_deref())
                            == pod.metadata.name.as_deref() =>
                {
                    Poll::Ready(node)
                }
                _ => Poll::NotYet(format!("{} pods; {:?}", pods.len(), node.status)),
            })
        },
    )
    .await?;
    let pod = nc.ns.pod(&pod_name_of(&node)?).await?;
    check(
        revision_annotation(&pod).as_deref() == Some(first.as_str())
            && node
                .status
                .as_ref()
                .and_then(|s| s.current_revision.as_deref())
                == Some(first.as_str())
            && condition_is(&node, "PodUpToDate", "False", "AwaitingRestartApproval"),
        format!(
            "{name}: the replacement runs {:?} (held {first}, desired {second}); status {:?}",
            revision_annotation(&pod),
            node.status
        ),
    )?;
    let databases = config_get(&pod_ip_of(&node)?, "databases").await?;
    check(
        databases == "4",
        format!(
            "{name}: the replacement of the held pod runs databases {databases}, not the held revision's 4"
        ),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_pod_that_is_replaced_keeps_its_revision_and_config() -> Result<()> {
    let _took = Took::start("a_held_pod_that_is_replaced_keeps_its_revision_and_config");
    let nc = NodeFixture::start("nc-heldpod").await?;
    let config = json!({"config": {"databases": "4"}});
    nc.create_of_each_workload("kept", config).await?;
    tokio::try_join!(
        a_held_pod_comes_back_as_it_was(&nc, "kept-sts"),
        a_held_pod_comes_back_as_it_was(&nc, "kept-dep"),
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_change_waits_for_the_allowed_revision() -> Result<()> {
    let _took = Took::start("a_config_change_waits_for_the_allowed_revision");
    let nc = NodeFixture::start("nc-revision").await?;
    let config = json!({"config": {"databases": "4"}});
    nc.create_of_each_workload("held", config).await?;
    tokio::try_join!(
        config_change_waits_for_its_revision(&nc, "held-sts"),
        config_change_waits_for_its_revision(&nc, "held-dep"),
    )?;
    Ok(())
}

// ---- leader election ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn only_the_leader_reconciles_and_a_standby_takes_over() -> Result<()> {
    let _took = Took::start("only_the_leader_reconciles_and_a_standby_takes_over");
    let elect = ["--leader-elect"];
    // The fixture's controller is the first process.
    let mut nc =
        NodeFixture::start_with_env("nc-leader", &elect, &[("POD_NAME", "nc-first")]).await?;
    wait_until(
        Duration::from_secs(30),
        "the first process leads",
        || async {
            Ok(if nc.controller.is_leading().await? {
                Poll::Ready(())
            } else {
                Poll::NotYet("not leading".into())
            })
        },
    )
    .await?;
    let second = nc
        .start_another(&elect, &[("POD_NAME", "nc-second")])
        .await?;
    let holder = nc.lease_holder().await?.unwrap_or_default();
    check(
        holder.starts_with("nc-first-"),
        format!("the Lease names {holder:?}, not the first process"),
    )?;

    nc.create("before", json!({})).await?;
    nc.wait_settled("before", READY).await?;
    let led = nc.controller.reconciles().await?;
    nc.controller
        .wait_reconciles(led, 2.0, Duration::from_secs(40))
        .await?;
    check(
        second.reconciles().await? == 0.0 && !second.is_leading().await?,
        "the standby reconciled",
    )?;
    let events_by_second = nc
        .ns
        .api::<Event>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reporting_instance
                .as_deref()
                .is_some_and(|i| i.contains("nc-second"))
        })
        .count();
    check(events_by_second == 0, "the standby published events")?;

    let settled_before = versions_of(nc.resource_versions().await?, "before");
    nc.controller.kill().await?;
    let killed = Instant::now();
    nc.create("after", json!({"workloadType": "Deployment"}))
        .await?;
    wait_until(Duration::from_secs(60), "the standby leads", || async {
        Ok(if second.is_leading().await? {
            Poll::Ready(())
        } else {
            Poll::NotYet("standby".into())
        })
    })
    .await?;
    eprintln!("the standby leads {:?} after the SIGKILL", killed.elapsed());
    nc.wait_ready("after").await?;
    eprintln!(
        "a node created after the SIGKILL is Ready {:?} after it",
        killed.elapsed()
    );
    let holder = nc.lease_holder().await?.unwrap_or_default();
    check(
        holder.starts_with("nc-second-"),
        format!("the Lease names {holder:?}, not the second process"),
    )?;
    check(
        second.reconciles().await? > 0.0,
        "the new leader never reconciled",
    )?;
    // The new leader took the old leader's node over without touching it (it has passed over
    // it by now: it started with a pass over every node).
    let now_before = versions_of(nc.resource_versions().await?, "before");
    check(
        now_before == settled_before && settled_before.len() == 3,
        format!("the takeover changed {settled_before:?} into {now_before:?}"),
    )?;
    let by_second: Vec<String> = nc
        .controller_events()
        .await?
        .into_iter()
        .filter(|e| e.contains(" before: ") && e.ends_with(" by nc-second"))
        .collect();
    check(
        by_second.is_empty(),
        format!("the new leader published events about the settled node: {by_second:?}"),
    )
}

// ---- bad input and faults ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn an_image_that_cannot_be_pulled_is_reported() -> Result<()> {
    let _took = Took::start("an_image_that_cannot_be_pulled_is_reported");
    let nc = NodeFixture::start("nc-image").await?;
    nc.create(
        "unpullable",
        json!({"image": "valkey/valkey:does-not-exist"}),
    )
    .await?;
    let node = nc
        .wait("unpullable", READY, "Ready False for the image", |n| {
            condition(n, "Ready").is_some_and(|c| {
                c.status == "False"
                    && (c.reason == "ErrImagePull" || c.reason == "ImagePullBackOff")
            })
        })
        .await?;
    let ready = required_condition(&node, "Ready")?;
    eprintln!(
        "Ready: {} {}: {}",
        ready.status, ready.reason, ready.message
    );
    check(
        ready.message.contains("valkey-unpullable-0")
            && !node.status.as_ref().is_some_and(|s| s.ready),
        format!("Ready message: {}", ready.message),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_that_valkey_rejects_is_reported_as_a_crash_loop() -> Result<()> {
    let _took = Took::start("a_config_that_valkey_rejects_is_reported_as_a_crash_loop");
    let nc = NodeFixture::start("nc-crash").await?;
    nc.create(
        "misconfigured",
        json!({"config": {"maxmemory": "not-a-size"}}),
    )
    .await?;
    let node = nc
        .wait(
            "misconfigured",
            READY,
            "Ready False, CrashLoopBackOff",
            |n| condition_is(n, "Ready", "False", "CrashLoopBackOff"),
        )
        .await?;
    let ready = required_condition(&node, "Ready")?;
    eprintln!(
        "Ready: {} {}: {}",
        ready.status, ready.reason, ready.message
    );
    check(
        ready.message.contains("CrashLoopBackOff") && ready.message.contains("exit code"),
        format!("Ready message: {}", ready.message),
    )?;

    // That a crash-looping node is looked at every few seconds without a hot loop is the pure
    // functions' test (status: an unchanged observation gives an unchanged status, no write;
    // reread: a node that is not ready is re-read every 5 s, every 30 s once
    // it has been so for a minute).
    let node = nc.get("misconfigured").await?;
    check(
        !node.status.as_ref().is_some_and(|s| s.ready),
        "a crash-looping node is reported ready",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_secret_is_named_and_other_nodes_go_on() -> Result<()> {
    let _took = Took::start("a_missing_secret_is_named_and_other_nodes_go_on");
    let mut nc = NodeFixture::start("nc-nosecret").await?;
    nc.create(
        "locked",
        json!({
            "config": {"aclfile": "/etc/valkey/credentials/users.acl"},
            "credentials": {"secretName": "absent-credentials", "username": "healthcheck"},
        }),
    )
    .await?;
    nc.create("open", json!({})).await?;
    let locked = nc
        .wait("locked", READY, "Credentials False, SecretNotFound", |n| {
            condition_is(n, "Credentials", "False", "SecretNotFound")
        })
        .await?;
    let credentials = required_condition(&locked, "Credentials")?;
    eprintln!("Credentials: {}", credentials.message);
    check(
        credentials.message.contains("absent-credentials"),
        format!(
            "the message does not name the Secret: {}",
            credentials.message
        ),
    )?;
    check(
        !locked.status.as_ref().is_some_and(|s| s.ready),
        "a node without its Secret is ready",
    )?;
    nc.wait_ready("open").await?;
    check(nc.controller.is_running(), "the controller exited")?;

    // Once the Secret exists, the node comes up without anyone touching it.
    let created = Instant::now();
    nc.create_acl_secret("absent-credentials", &random_password())
        .await?;
    let locked = nc.wait_settled("locked", READY).await?;
    eprintln!("Ready {:?} after the Secret was created", created.elapsed());
    check(
        condition_is(&locked, "Credentials", "True", "SecretFound"),
        format!("Credentials: {:?}", condition(&locked, "Credentials")),
    )
}

// ---- hand edits ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn children_deleted_or_edited_by_hand_are_put_back() -> Result<()> {
    let _took = Took::start("children_deleted_or_edited_by_hand_are_put_back");
    let nc = NodeFixture::start("nc-repair").await?;
    nc.create(
        "tended",
        json!({"persistence": {"enabled": true, "size": "1Gi"}}),
    )
    .await?;
    let node = nc.wait_settled("tended", READY).await?;
    let within = Duration::from_secs(60);
    let cms = nc.ns.api::<ConfigMap>();
    let stss = nc.ns.api::<StatefulSet>();
    let pvcs = nc.ns.api::<PersistentVolumeClaim>();
    // The data is one valkey.conf, under a key named after the pod's revision.
    let conf_of = |cm: &ConfigMap| cm.data.clone().unwrap_or_default();

    // An edited valkey.conf is put back.
    let cm = cms.get("valkey-tended-config").await?;
    let conf = conf_of(&cm);
    let [key] = conf.keys().collect::<Vec<_>>()[..] else {
        return Err(E2eError::Check(format!("ConfigMap data: {conf:?}")));
    };
    check(
        key.ends_with(".conf") && conf[key].contains("protected-mode no"),
        format!("ConfigMap data: {conf:?}"),
    )?;
    let started = Instant::now();
    let edited = cms
        .patch(
            "valkey-tended-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {key.as_str(): "port 7777\n"}})),
        )
        .await?;
    let edited_version: u64 = resource_version(&edited).parse().unwrap_or(0);
    wait_object(
        &cms,
        "valkey-tended-config",
        within,
        "valkey.conf put back",
        |c| conf_of(c) == conf && resource_version(c).parse().unwrap_or(0) > edited_version,
    )
    .await?;
    eprintln!("valkey.conf put back after {:?}", started.elapsed());

    // Replicas scaled by hand are put back.
    let started = Instant::now();
    stss.patch(
        "valkey-tended",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await?;
    wait_object(&stss, "valkey-tended", within, "replicas 1 again", |s| {
        s.spec.as_ref().and_then(|s| s.replicas) == Some(1)
    })
    .await?;
    eprintln!("replicas put back after {:?}", started.elapsed());
    // (The pod comes back meanwhile; the StatefulSet's deletion below takes it again anyway.)

    // A deleted ConfigMap comes back.
    let started = Instant::now();
    cms.delete("valkey-tended-config", &DeleteParams::default())
        .await?;
    let cm_uid = uid(&cm);
    wait_object(&cms, "valkey-tended-config", within, "recreated", |c| {
        uid(c) != cm_uid && conf_of(c) == conf
    })
    .await?;
    eprintln!("ConfigMap recreated after {:?}", started.elapsed());

    // A deleted StatefulSet comes back, and with it the pod.
    let sts = stss.get("valkey-tended").await?;
    let started = Instant::now();
    stss.delete("valkey-tended", &DeleteParams::background())
        .await?;
    let sts_uid = uid(&sts);
    wait_object(&stss, "valkey-tended", within, "recreated", |s| {
        uid(s) != sts_uid
    })
    .await?;
    eprintln!("StatefulSet recreated after {:?}", started.elapsed());
    nc.wait_settled("tended", READY).await?;

    // A deleted PVC comes back. It stays Terminating while a pod uses it, so the pod goes too.
    let pvc = pvcs.get("valkey-tended-data").await?;
    let started = Instant::now();
    pvcs.delete("valkey-tended-data", &DeleteParams::default())
        .await?;
    nc.ns
        .api::<Pod>()
        .delete(&pod_name_of(&node)?, &DeleteParams::default())
        .await?;
    let pvc_uid = uid(&pvc);
    wait_object(
        &pvcs,
        "valkey-tended-data",
        Duration::from_secs(120),
        "recreated",
        |p| uid(p) != pvc_uid,
    )
    .await?;
    eprintln!("PVC recreated after {:?}", started.elapsed());
    nc.wait_settled("tended", Duration::from_secs(120)).await?;
    eprintln!("Ready on the new volume after {:?}", started.elapsed());
    Ok(())
}

// ---- crash and restart ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_killed_mid_work_converges_after_restart() -> Result<()> {
    let _took = Took::start("a_controller_killed_mid_work_converges_after_restart");
    let mut nc = NodeFixture::start("nc-crashstop").await?;
    let nodes = [
        (
            "kill-a",
            json!({"persistence": {"enabled": true, "size": "1Gi"}}),
        ),
        ("kill-b", json!({"workloadType": "Deployment"})),
        ("kill-c", json!({"image": "valkey/valkey:8.0"})),
    ];
    for (name, spec) in &nodes {
        nc.create(name, spec.clone()).await?;
    }
    // SIGKILL as soon as the controller has begun: the first child exists.
    nc.wait_labelled::<ConfigMap>(Duration::from_secs(30), "a first child", "no ConfigMap yet")
        .await?;
    nc.controller.kill().await?;
    let (killed_ready, _) = nc.status_summary().await?;
    eprintln!("killed with {killed_ready} of 3 nodes ready");
    check(
        killed_ready < 3,
        "all nodes were ready before the kill: kill sooner",
    )?;

    // A second SIGKILL once pods exist but before every node is ready, if the timing allows.
    nc.restart_controller().await?;
    nc.wait_labelled::<Pod>(Duration::from_secs(60), "a first pod", "no pod yet")
        .await?;
    nc.controller.kill().await?;
    let (second_kill_ready, _) = nc.status_summary().await?;
    eprintln!("killed again with {second_kill_ready} of 3 nodes ready");

    let started = Instant::now();
    nc.restart_controller().await?;
    for (name, _) in &nodes {
        let node = nc.wait_settled(name, READY).await?;
        // The status describes the one pod that exists.
        let pods = nc.live_pods(name).await?;
        let [pod] = pods.as_slice() else {
            return Err(E2eError::Check(format!("{name}: {} pods", pods.len())));
        };
        let status = node.status.clone().unwrap_or_default();
        check(
            status.pod_name.as_deref() == pod.metadata.name.as_deref()
                && status.pod_ip == pod.status.as_ref().and_then(|s| s.pod_ip.clone())
                && status.node_name == pod.spec.as_ref().and_then(|s| s.node_name.clone())
                && status.current_revision == revision_annotation(pod),
            format!(
                "{name}: status {status:?} does not describe pod {}",
                pod.name_any()
            ),
        )?;
        let mut conn = valkey(&pod_ip_of(&node)?, 6379).await?;
        check(
            valkey_cmd(&mut conn, &["PING"]).await? == "PONG",
            format!("{name}: no PONG"),
        )?;
    }
    eprintln!("all 3 settled {:?} after the restart", started.elapsed());
    // One workload and one ConfigMap each: the restarted controller duplicated nothing.
    let configmaps = nc
        .ns
        .api::<ConfigMap>()
        .list(&ListParams::default().labels(NODE_LABEL))
        .await?;
    check(
        configmaps.items.len() == 3,
        format!("{} ConfigMaps", configmaps.items.len()),
    )?;
    let stss = nc
        .ns
        .api::<StatefulSet>()
        .list(&ListParams::default())
        .await?;
    let deps = nc
        .ns
        .api::<Deployment>()
        .list(&ListParams::default())
        .await?;
    check(
        stss.items.len() == 2 && deps.items.len() == 1,
        format!(
            "{} StatefulSets, {} Deployments",
            stss.items.len(),
            deps.items.len()
        ),
    )?;

    // A controller that starts over settled nodes finds nothing to do: no status blip while its
    // caches fill, no write, no event.
    let before = nc.resource_versions().await?;
    let events_before = nc.controller_events().await?;
    nc.controller.kill().await?;
    nc.restart_controller().await?;
    nc.controller
        .wait_reconciles(0.0, 6.0, Duration::from_secs(40))
        .await?;
    let after = nc.resource_versions().await?;
    let changed: Vec<_> = after
        .iter()
        .filter(|(key, version)| before.get(*key) != Some(version))
        .collect();
    check(
        changed.is_empty() && before.len() == after.len(),
        format!("a restart over settled nodes changed {changed:?} (before: {before:?})"),
    )?;
    let events_after = nc.controller_events().await?;
    let new: Vec<&String> = events_after.difference(&events_before).collect();
    check(
        new.is_empty(),
        format!("a restart over settled nodes published {new:?}"),
    )
}

// ---- credentials -----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn credentials_authenticate_and_the_password_stays_secret() -> Result<()> {
    let _took = Took::start("credentials_authenticate_and_the_password_stays_secret");
    // Debug logs, so that the log check covers everything the controller could say.
    let nc = NodeFixture::start_with_env(
        "nc-creds",
        &[],
        &[(
            "RUST_LOG",
            "debug,hyper=info,h2=info,rustls=info,tower=info",
        )],
    )
    .await?;
    let password = random_password();
    nc.create_acl_secret("node-acl", &password).await?;
    nc.create(
        "guarded",
        json!({
            "config": {"protected-mode": "yes", "aclfile": "/etc/valkey/credentials/users.acl"},
            "credentials": {"secretName": "node-acl", "username": "healthcheck"},
        }),
    )
    .await?;
    let node = nc.wait_settled("guarded", READY).await?;
    check(
        condition_is(&node, "Credentials", "True", "SecretFound"),
        format!("Credentials: {:?}", condition(&node, "Credentials")),
    )?;
    let ip = pod_ip_of(&node)?;
    let mut conn = valkey_as(&ip, "healthcheck", &password).await?;
    check(
        valkey_cmd(&mut conn, &["PING"]).await? == "PONG",
        "authenticated PING did not answer PONG",
    )?;
    // The ACL is in force: without credentials nothing is allowed.
    let anonymous = match valkey(&ip, 6379).await {
        Ok(mut conn) => valkey_cmd(&mut conn, &["PING"])
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    check(
        anonymous
            .as_ref()
            .is_err_and(|e| e.contains("NOAUTH") || e.contains("WRONGPASS") || e.contains("AUTH")),
        format!("an anonymous PING answered {anonymous:?}"),
    )?;

    // Let a few more passes (and their logs) happen before looking for the password.
    let from = nc.controller.reconciles().await?;
    nc.controller
        .wait_reconciles(from, 2.0, Duration::from_secs(40))
        .await?;
    let mut leaks = Vec::new();
    let config_maps = nc
        .ns
        .api::<ConfigMap>()
        .list(&ListParams::default())
        .await?
        .items;
    let config_maps_count = config_maps.len();
    for cm in config_maps {
        if serde_json::to_string(&cm)
            .unwrap_or_default()
            .contains(&password)
        {
            leaks.push(format!("ConfigMap {}", cm.name_any()));
        }
    }
    let workload = nc.ns.api::<StatefulSet>().get("valkey-guarded").await?;
    if serde_json::to_string(&workload)
        .unwrap_or_default()
        .contains(&password)
    {
        leaks.push("the StatefulSet".into());
    }
    let node = nc.get("guarded").await?;
    if serde_json::to_string(&node.status)
        .unwrap_or_default()
        .contains(&password)
    {
        leaks.push("the ValkeyNode status".into());
    }
    let events = nc
        .ns
        .api::<Event>()
        .list(&ListParams::default())
        .await?
        .items;
    check(!events.is_empty(), "no events to look at")?;
    for event in &events {
        if serde_json::to_string(event)
            .unwrap_or_default()
            .contains(&password)
        {
            leaks.push(format!("Event {}", event.name_any()));
        }
    }
    let log = nc.controller.log_text()?;
    check(
        log.lines().count() > 10,
        format!("a short controller log: {log}"),
    )?;
    if let Some(line) = log.lines().find(|l| l.contains(&password)) {
        leaks.push(format!("controller log line: {line}"));
    }
    eprintln!(
        "looked in {config_maps_count} ConfigMaps, the StatefulSet, the status, {} Events and {} log lines",
        events.len(),
        log.lines().count()
    );
    check(
        leaks.is_empty(),
        format!("the password leaked into: {leaks:?}"),
    )
}

// ---- server: Sentinel ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_node_runs_sentinel_monitors_what_it_is_told_and_restarts_clean() -> Result<()> {
    let _took =
        Took::start("a_sentinel_node_runs_sentinel_monitors_what_it_is_told_and_restarts_clean");
    let nc = NodeFixture::start("nc-sentinel").await?;
    nc.create("watched", json!({})).await?;
    nc.create(
        "sentinel",
        json!({"server": "Sentinel", "config": {"sentinel": "resolve-hostnames no"}}),
    )
    .await?;
    let is_ready_sentinel = |n: &ValkeyNode| {
        n.status.as_ref().is_some_and(|s| {
            s.ready
                && s.role == Some(Role::Sentinel)
                && s.pod_ip.is_some()
                && s.valkey_version.is_some()
        })
    };
    let (watched, sentinel) = tokio::try_join!(
        nc.wait_ready("watched"),
        nc.wait("sentinel", READY, "a ready Sentinel", is_ready_sentinel),
    )?;
    let (watched_ip, sentinel_ip) = (pod_ip_of(&watched)?, pod_ip_of(&sentinel)?);

    // Told what to monitor, it rewrites its own file (it refuses to run on one it cannot write).
    let mut conn = valkey(&sentinel_ip, valkey_api::contract::SENTINEL_PORT).await?;
    let answer = valkey_cmd(
        &mut conn,
        &["SENTINEL", "MONITOR", "orders", &watched_ip, "6379", "1"],
    )
    .await?;
    check(answer.contains("OK"), format!("SENTINEL MONITOR: {answer}"))?;
    let primary = sentinel_primary(&sentinel_ip, "orders").await?;
    check(
        primary.contains(&watched_ip),
        format!("the Sentinel names {primary:?} for orders, not {watched_ip}"),
    )?;
    let pod = pod_name_of(&sentinel)?;
    check(
        nc.role_label(&pod).await?.as_deref() == Some("sentinel"),
        "the Sentinel's pod is not labelled role sentinel",
    )?;
    let (_, rows) = nc.rows().await?;
    check(
        rows.iter().any(|r| {
            r.first().map(String::as_str) == Some("sentinel")
                && r.get(2).map(String::as_str) == Some("sentinel")
        }),
        format!("kubectl get valkeynode does not show the Sentinel's role: {rows:?}"),
    )?;

    // Its pod replaced, it starts from the ConfigMap again: what it was told is gone, for its
    // parent to tell it again.
    let old_uid = uid(&nc.ns.pod(&pod).await?);
    nc.ns
        .kubectl(&["delete", "pod", &pod, "--wait=true"])
        .await?;
    let ip = wait_until(READY, "a new, ready Sentinel pod", || async {
        let node = nc.get("sentinel").await?;
        let replaced = match node.status.as_ref().and_then(|s| s.pod_name.clone()) {
            Some(name) => nc.ns.pod(&name).await.is_ok_and(|p| uid(&p) != old_uid),
            None => false,
        };
        Ok(match pod_ip_of(&node) {
            Ok(ip) if replaced && is_ready_sentinel(&node) => Poll::Ready(ip),
            _ => Poll::NotYet(format!("{:?}", node.status)),
        })
    })
    .await?;
    let after = wait_until(READY, "the new Sentinel answering", || async {
        Ok(match sentinel_primary(&ip, "orders").await {
            Ok(answer) => Poll::Ready(answer),
            Err(e) => Poll::NotYet(e.to_string()),
        })
    })
    .await?;
    check(
        !after.contains(&watched_ip),
        format!("the restarted Sentinel still monitors orders: {after:?}"),
    )
}
