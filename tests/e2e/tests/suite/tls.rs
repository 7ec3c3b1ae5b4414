//! TLS: a cluster created with `spec.tls.enabled` serves clients, replication and the cluster bus
//! over TLS only, with a certificate the operator issues from a CA of the cluster's own; the
//! node-controller's probe and live config and the cluster-controller's engine speak TLS to it,
//! verified against that CA.

use std::time::{Duration, Instant};

use e2e::cluster::{ClusterFixture, ready_pod_ip, tls_command};
use e2e::{E2eError, Poll, Result, check, wait_until};
use redis::AsyncCommands;
use valkey_api::contract::CONFIG_APPLIED_CONDITION;
use valkey_api::v1alpha1::Role;

const READY: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_cluster_serves_only_tls_verified_against_its_ca() -> Result<()> {
    let started = Instant::now();
    let c = ClusterFixture::start(
        "tls-serve",
        "secure",
        "{shards: 2, replicas: 1, tls: {enabled: true}}",
    )
    .await?;
    c.wait_ready(READY).await?;
    eprintln!("TLS cluster Ready after {:?}", started.elapsed());
    let ca = c.tls_ca().await?;
    let password = c.password().await?;

    // The node-controller reads each server's role and sets its live settings over TLS: the
    // roles show in the nodes' status and every node has its live settings applied.
    let nodes = c.wait_roles(2, 2, Duration::from_secs(60)).await?;
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        check(
            status.valkey_version.is_some(),
            format!("{name}: the probe read no version"),
        )?;
        let applied = status
            .conditions
            .iter()
            .flatten()
            .any(|cond| cond.type_ == CONFIG_APPLIED_CONDITION && cond.status == "True");
        check(
            applied,
            format!("{name}: live settings not applied: {status:?}"),
        )?;
    }

    // Every member: a plain connection is refused, a TLS one verified against the CA answers,
    // and a TLS client that trusts another CA is refused.
    let stranger = other_ca()?;
    for node in &nodes {
        let ip =
            ready_pod_ip(node).ok_or_else(|| E2eError::Check("a member is not ready".into()))?;
        let plain = c.command_on(&ip, &["PING"]).await;
        check(
            plain.is_err(),
            format!("{ip}: a plain client was answered: {plain:?}"),
        )?;
        let pong = tls_command(&ip, &ca, password.as_deref(), &["PING"]).await?;
        check(
            pong == "PONG",
            format!("{ip}: PING over TLS answered {pong}"),
        )?;
        let untrusted = tls_command(&ip, &stranger, password.as_deref(), &["PING"]).await;
        check(
            untrusted.is_err(),
            format!("{ip}: a client trusting another CA was answered: {untrusted:?}"),
        )?;
    }

    // Replication runs over TLS: each replica's link to its primary is up.
    for node in &nodes {
        let status = node.status.clone().unwrap_or_default();
        if status.role != Some(Role::Replica) {
            continue;
        }
        let ip = status.pod_ip.unwrap_or_default();
        wait_until(Duration::from_secs(60), "the replica's link is up", || {
            let (ip, ca, password) = (ip.clone(), ca.clone(), password.clone());
            async move {
                let info =
                    tls_command(&ip, &ca, password.as_deref(), &["INFO", "replication"]).await?;
                Ok(
                    if info.lines().any(|l| l.trim() == "master_link_status:up") {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(info)
                    },
                )
            }
        })
        .await?;
    }

    // A cluster client over TLS (following MOVED across both shards) writes and reads back.
    let mut conn = c.tls_client(ca.clone()).await?;
    for i in 0..200 {
        let (key, value) = (format!("tls:{i}"), format!("v{i}"));
        let _: () = conn
            .set(&key, &value)
            .await
            .map_err(|source| E2eError::Valkey {
                addr: key.clone(),
                source,
            })?;
    }
    let mut fresh = c.tls_client(ca.clone()).await?;
    for i in 0..200 {
        let key = format!("tls:{i}");
        let got: Option<String> = fresh.get(&key).await.map_err(|source| E2eError::Valkey {
            addr: key.clone(),
            source,
        })?;
        check(
            got.as_deref() == Some(format!("v{i}").as_str()),
            format!("{key} read back {got:?}"),
        )?;
    }

    // Valkey's own cli, over TLS with the CA, finds the cluster whole (the bus is TLS too).
    let check_output = cli_cluster_check(&c, &ca, password.as_deref()).await?;
    check(
        check_output.contains("[OK] All 16384 slots covered"),
        format!("valkey-cli --cluster check: {check_output}"),
    )?;
    eprintln!("TLS cluster checked after {:?}", started.elapsed());
    Ok(())
}

/// A CA the cluster's servers were not issued by.
fn other_ca() -> Result<Vec<u8>> {
    let key = rcgen::KeyPair::generate().map_err(|e| E2eError::Check(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| E2eError::Check(e.to_string()))?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params
        .self_signed(&key)
        .map_err(|e| E2eError::Check(e.to_string()))?;
    Ok(cert.pem().into_bytes())
}

/// `valkey-cli --tls --cacert <ca> --cluster check` (the cli of the 9.1 image, built with TLS)
/// against a ready member; its output, or an error with it.
async fn cli_cluster_check(
    c: &ClusterFixture,
    ca: &[u8],
    password: Option<&str>,
) -> Result<String> {
    let ip = c.ready_member_ip().await?;
    let ca_file = std::env::temp_dir().join(format!("{}-{}-ca.crt", c.ns.name, c.name));
    std::fs::write(&ca_file, ca).map_err(|e| E2eError::Check(format!("writing the CA: {e}")))?;
    let cli = e2e::localkube_dir().join("images/valkey-9.1/bin/valkey-cli");
    let mut cmd = tokio::process::Command::new(&cli);
    cmd.arg("--tls")
        .arg("--cacert")
        .arg(&ca_file)
        .args(["--cluster", "check", &format!("{ip}:6379")])
        .kill_on_drop(true);
    if let Some(password) = password {
        // Through the environment, not the command line.
        cmd.env("VALKEYCLI_AUTH", password)
            .env("REDISCLI_AUTH", password);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .map_err(|_| E2eError::Check("valkey-cli --cluster check timed out".into()))?
        .map_err(|source| E2eError::Spawn {
            program: cli.display().to_string(),
            source,
        })?;
    let _ = std::fs::remove_file(&ca_file);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(E2eError::Check(format!(
            "valkey-cli --cluster check failed: {text}"
        )))
    }
}
