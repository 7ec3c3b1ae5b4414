//! Item 1: settings Valkey changes at runtime are set on every running server, no pod restarted;
//! restart-only settings roll as before; a value Valkey refuses shows Valkey's words and changes
//! nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::ClusterFixture;
use e2e::record::Record;
use e2e::{Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use serde_json::json;
use valkey_api::v1alpha1::ValkeyNode;

const FORM: Duration = Duration::from_secs(240);

/// Pod name → UID of every member's pod.
pub async fn pod_uids(c: &ClusterFixture) -> Result<BTreeMap<String, String>> {
    let pods =
        c.ns.api::<Pod>()
            .list(&ListParams::default().labels(&format!("valkey.io/cluster={}", c.name)))
            .await?;
    Ok(pods
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect())
}

/// Waits until every member's server reports `value` for `key`.
async fn wait_config_everywhere(c: &ClusterFixture, key: &str, value: &str) -> Result<()> {
    wait_until(
        Duration::from_secs(30),
        &format!("every server has {key} {value}"),
        || async move {
            let mut differ = Vec::new();
            for node in c.nodes().await? {
                let Some(ip) = node.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                    differ.push(format!("{:?}: no pod IP", node.metadata.name));
                    continue;
                };
                let got = c.admin_command_on(&ip, &["CONFIG", "GET", key]).await;
                let got = got.unwrap_or_else(|e| e.to_string());
                if !got.contains(value) {
                    differ.push(format!("{:?}: {got}", node.metadata.name));
                }
            }
            Ok(if differ.is_empty() {
                Poll::Ready(())
            } else {
                Poll::NotYet(differ.join("; "))
            })
        },
    )
    .await
}

async fn config_maps(c: &ClusterFixture) -> Result<BTreeMap<String, String>> {
    let maps = c.ns.api::<ConfigMap>().list(&ListParams::default()).await?;
    Ok(maps
        .items
        .into_iter()
        .filter_map(|m| Some((m.metadata.name?, m.metadata.resource_version?)))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_setting_reaches_every_server_without_a_restart() -> Result<()> {
    let c = ClusterFixture::start("d2-live", "live", "{shards: 3, replicas: 1}").await?;
    c.wait_ready(FORM).await?;
    let before = pod_uids(&c).await?;
    check(before.len() == 6, format!("pods: {before:?}"))?;

    // A live key: every server has it within seconds, no pod is replaced.
    let statuses = Record::start(c.api(), None).await?;
    let members = Record::start(
        c.ns.api::<ValkeyNode>(),
        Some(&format!("valkey.io/cluster={}", c.name)),
    )
    .await?;
    let patched = c
        .patch_spec(json!({"config": {"maxmemory-policy": "allkeys-lru"}}))
        .await?;
    wait_config_everywhere(&c, "maxmemory-policy", "allkeys-lru").await?;
    let ready = c.wait_ready(Duration::from_secs(60)).await?;
    // Ready for this generation only once every member's node-controller has seen its new spec:
    // the pass that sends the members the setting still sees them as they were.
    e2e::record::ready_only_when_rolled(
        &statuses,
        &ready,
        &members,
        &c.nodes().await?,
        patched.metadata.generation,
        6,
    )
    .await?;
    check(
        pod_uids(&c).await? == before,
        "a live setting replaced a pod",
    )?;

    // A value Valkey refuses: its words in the cluster's status, nothing else changes.
    let maps = config_maps(&c).await?;
    c.patch_spec(json!({"config": {"maxmemory-policy": "most-keys-please"}}))
        .await?;
    let message = c
        .wait_degraded("ConfigRefused", Duration::from_secs(60))
        .await?;
    check(
        message.contains("most-keys-please") || message.contains("argument"),
        format!("the status does not quote Valkey: {message}"),
    )?;
    check(
        message.contains("CONFIG SET") && message.contains("maxmemory-policy"),
        message.clone(),
    )?;
    wait_config_everywhere(&c, "maxmemory-policy", "allkeys-lru").await?;
    check(
        pod_uids(&c).await? == before,
        "a refused value replaced a pod",
    )?;
    check(
        config_maps(&c).await? == maps,
        "a refused value changed a ConfigMap (valkey.conf)",
    )?;

    // Corrected, and a restart-only key with it: that one rolls, one member at a time, and every
    // server comes back with both.
    c.patch_spec(json!({"config": {"maxmemory-policy": "volatile-lru", "tcp-backlog": "256"}}))
        .await?;
    wait_config_everywhere(&c, "maxmemory-policy", "volatile-lru").await?;
    wait_until(
        Duration::from_secs(600),
        "every pod replaced by the roll",
        || async {
            let now = pod_uids(&c).await?;
            let kept = before
                .iter()
                .filter(|(name, uid)| now.get(*name) == Some(uid))
                .count();
            Ok(if kept == 0 && now.len() == 6 {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{kept} pod(s) not replaced yet"))
            })
        },
    )
    .await?;
    c.wait_ready(FORM).await?;
    wait_config_everywhere(&c, "tcp-backlog", "256").await?;
    wait_config_everywhere(&c, "maxmemory-policy", "volatile-lru").await
}
