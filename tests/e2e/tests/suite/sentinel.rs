//! ValkeyReplication with Sentinel (issue 31) end to end: valkey-py's `Sentinel` client (the
//! way Jedis', Lettuce's and Spring's Sentinel pools work) finds the primary through the
//! Sentinels, writes with `WAIT 1`, and keeps working through the primary's pod deleted (also
//! with everything on TLS), its process killed and restarted in place without persistence (it
//! comes back empty), and a planned switchover; `valkey-cli -p 26379 SENTINEL
//! GET-MASTER-ADDR-BY-NAME` names the primary; and the status, the read/write Service and every
//! Sentinel agree on it. The rest of the list (an image roll, one Sentinel lost, the
//! primary isolated or paused, on 9.1 and 8.0) are the chaos matrix's `replication-sentinel.`
//! rows, whose writer finds the primary through the Sentinels too.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::replication::ReplicationFixture;
use e2e::valkey_py::{Login, PyWriter, none_lost};
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;

const FORM: Duration = Duration::from_secs(240);
const HEAL: Duration = Duration::from_secs(240);
/// Status, Services and Sentinel agree within this long of a change settling.
const AGREE: Duration = Duration::from_secs(60);

/// One end-to-end case: the image, the storage, TLS, and what happens to the primary.
struct Case {
    prefix: &'static str,
    image: &'static str,
    persistence: bool,
    tls: bool,
    change: Change,
}

impl Case {
    fn spec(&self) -> String {
        format!(
            "{{image: \"{}\", replicas: 2, persistence: {{enabled: {}}}, tls: {{enabled: {}}}, \
             sentinel: {{enabled: true, downAfterMilliseconds: 3000, failoverTimeoutMilliseconds: 20000}}}}",
            self.image, self.persistence, self.tls
        )
    }
}

/// `valkey-cli -h <sentinel> -p 26379 SENTINEL GET-MASTER-ADDR-BY-NAME orders`, as `ip:port`.
async fn cli_names(sentinel_ip: &str, login: &Login) -> Result<String> {
    let cli = e2e::localkube_dir().join("images/valkey-9.1/bin/valkey-cli");
    let mut cmd = tokio::process::Command::new(&cli);
    cmd.args(["-h", sentinel_ip, "-p", "26379", "--no-auth-warning"]);
    if let Some(password) = &login.password {
        cmd.env("REDISCLI_AUTH", password);
    }
    if let Some(ca) = &login.ca_file {
        cmd.arg("--tls").arg("--cacert").arg(ca);
    }
    let out = cmd
        .args(["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "orders"])
        .output()
        .await
        .map_err(|e| E2eError::Check(format!("valkey-cli: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = text.lines().map(str::trim).collect();
    Ok(parts.join(":"))
}

/// Waits until the status's primary, the read/write Service's endpoint and every Sentinel (asked
/// with valkey-cli as a client) name the same member at its pod IP; returns it and its IP.
async fn all_agree(r: &ReplicationFixture, login: &Login) -> Result<(String, String)> {
    wait_until(AGREE, "status, Service and Sentinels agree", || async {
        let (primary, ip) = r.primary().await?;
        let service = r.endpoints(&r.name).await?;
        let mut named = BTreeMap::new();
        for (sentinel, sentinel_ip) in r.sentinel_ips().await? {
            named.insert(sentinel, cli_names(&sentinel_ip, login).await?);
        }
        let want = format!("{ip}:6379");
        Ok(
            if service == [ip.clone()] && named.len() == 3 && named.values().all(|n| *n == want) {
                Poll::Ready((primary, ip))
            } else {
                Poll::NotYet(format!(
                    "status {primary} at {ip}, Service {service:?}, Sentinels {named:?}"
                ))
            },
        )
    })
    .await
}

enum Change {
    DeletePrimaryPod,
    /// The primary's server killed; the kubelet starts it again in the same pod (a case
    /// without persistence: it comes back empty). With persistence it is a chaos row.
    RestartPrimaryEmptyInPlace,
    Switchover,
}

async fn through(case: Case) -> Result<()> {
    let prefix = case.prefix;
    let r = ReplicationFixture::start(prefix, "orders", &case.spec()).await?;
    r.wait_done(FORM).await?;
    let login = Login::of(&r).await?;
    let (old, _) = all_agree(&r, &login).await?;
    let writer = PyWriter::start(&r, &login, "py").await?;
    writer.wait_writing(&r, 100).await?;
    match case.change {
        Change::DeletePrimaryPod => {
            let pod = r.pod_of(&old).await?;
            r.ns.api::<Pod>()
                .delete(&pod, &DeleteParams::default())
                .await?;
            // Sentinel elects a replica (the pod's server is gone longer than down-after).
            wait_for_another_primary(&r, &old).await?;
        }
        Change::RestartPrimaryEmptyInPlace => {
            let pod = r.pod_of(&old).await?;
            let restarts = valkey_restarts(&r, &pod).await?;
            e2e::faults::kill(&r.ns.name, &pod, Some("valkey")).await?;
            wait_until(HEAL, "the primary's server restarted", || async {
                let now = valkey_restarts(&r, &pod).await?;
                Ok(if now > restarts {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{now} restarts"))
                })
            })
            .await?;
            // Back empty: it must not stay the primary its replicas sync from, whatever
            // Sentinel saw of it (it may answer again within down-after).
            wait_for_another_primary(&r, &old).await?;
        }
        Change::Switchover => {
            let target = r
                .nodes()
                .await?
                .into_iter()
                .map(|n| kube::ResourceExt::name_any(&n))
                .find(|n| *n != old)
                .ok_or_else(|| E2eError::Check("no replica".into()))?;
            r.patch_spec(serde_json::json!({"primary": target})).await?;
            r.wait(HEAL, &format!("{target} primary"), |x| {
                x.status
                    .as_ref()
                    .is_some_and(|s| s.primary.as_deref() == Some(target.as_str()))
            })
            .await?;
        }
    }
    r.wait_done(HEAL).await?;
    let (now, now_ip) = all_agree(&r, &login).await?;
    check(now != old, format!("{old} is still the primary"))?;
    writer.wait_writing(&r, 100 + 200).await?;
    let run = writer.finish().await?;
    eprintln!(
        "MEASURE sentinel {prefix}: valkey-py acknowledged {}, confirmed {}, errors {:?}, longest gap {:.2} s; Sentinels name {:?}",
        run.acked,
        run.confirmed.len(),
        run.errors,
        run.longest_gap_s,
        run.named
    );
    let want = format!("{now_ip}:6379");
    check(
        run.named.iter().all(|n| *n == want),
        format!(
            "valkey-py's Sentinels name {:?}, the primary is {want}",
            run.named
        ),
    )?;
    check(run.confirmed.len() >= 300, "valkey-py confirmed too few")?;
    none_lost(&r, &run).await?;
    r.check_roles().await?;
    Ok(())
}

/// Waits until the status names a primary other than `old` (Sentinel elected one).
async fn wait_for_another_primary(r: &ReplicationFixture, old: &str) -> Result<()> {
    r.wait(HEAL, "Sentinel's new primary in the status", |x| {
        x.status
            .as_ref()
            .and_then(|s| s.primary.as_deref())
            .is_some_and(|p| p != old)
    })
    .await
    .map(|_| ())
}

/// How often the valkey container of `pod` restarted.
async fn valkey_restarts(r: &ReplicationFixture, pod: &str) -> Result<i32> {
    let pod = r.ns.api::<Pod>().get(pod).await?;
    Ok(pod
        .status
        .and_then(|s| s.container_statuses)
        .into_iter()
        .flatten()
        .find(|c| c.name == "valkey")
        .map_or(0, |c| c.restart_count))
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinel_clients_keep_writing_through_the_primary_pod_deleted_on_valkey_8() -> Result<()> {
    through(Case {
        prefix: "sentinel-del8",
        image: "valkey/valkey:8.0",
        persistence: true,
        tls: false,
        change: Change::DeletePrimaryPod,
    })
    .await
}

/// On 9.1 with everything over TLS: the Sentinels' port, their links to the servers and to each
/// other, replication, and valkey-py's connections to the Sentinels and to the primary they
/// name. (Without TLS the same change is the 8.0 test above and the chaos rows.)
#[tokio::test(flavor = "multi_thread")]
async fn sentinel_clients_keep_writing_over_tls_through_the_primary_pod_deleted() -> Result<()> {
    through(Case {
        prefix: "sentinel-tls",
        image: "valkey/valkey:9.1",
        persistence: true,
        tls: true,
        change: Change::DeletePrimaryPod,
    })
    .await
}

/// Without persistence the primary's server comes back empty in the same pod, within seconds:
/// its replicas keep what it lost, one of them becomes the primary, and it follows.
#[tokio::test(flavor = "multi_thread")]
async fn sentinel_clients_keep_writing_through_the_primary_restarted_empty_in_place() -> Result<()>
{
    through(Case {
        prefix: "sentinel-empty",
        image: "valkey/valkey:9.1",
        persistence: false,
        tls: false,
        change: Change::RestartPrimaryEmptyInPlace,
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinel_clients_keep_writing_through_a_planned_switchover_on_valkey_9() -> Result<()> {
    through(Case {
        prefix: "sentinel-switch9",
        image: "valkey/valkey:9.1",
        persistence: true,
        tls: false,
        change: Change::Switchover,
    })
    .await
}
