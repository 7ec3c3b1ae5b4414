//! TLS: a cluster created with `spec.tls.enabled` serves clients, replication and the cluster bus
//! over TLS only, with a certificate the operator issues from a CA of the cluster's own; the
//! node-controller's probe and live config and the cluster-controller's engine speak TLS to it,
//! verified against that CA. A certificate of the user's (`spec.tls.certificateSecret`) is served
//! the same way, on Valkey 9.1 and 8.0, and a new one reaches every server without a restart.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::cluster::{ClusterFixture, ready_pod_ip, tls_command};
use e2e::replication::ReplicationFixture;
use e2e::{E2eError, Poll, Result, check, wait_until};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
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
        wait_link_up(&ip, &ca, password.as_deref()).await?;
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

/// Waits until the replica at `ip` says, over TLS, that its link to its primary is up.
async fn wait_link_up(ip: &str, ca: &[u8], password: Option<&str>) -> Result<()> {
    wait_until(
        Duration::from_secs(60),
        "the replica's link is up",
        || async move {
            let info = tls_command(ip, ca, password, &["INFO", "replication"]).await?;
            Ok(
                if info.lines().any(|l| l.trim() == "master_link_status:up") {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(info)
                },
            )
        },
    )
    .await
}

/// A CA the cluster's servers were not issued by.
fn other_ca() -> Result<Vec<u8>> {
    Ok(Ca::new()?.pem.into_bytes())
}

fn rcgen_error(e: rcgen::Error) -> E2eError {
    E2eError::Check(format!("making a test certificate: {e}"))
}

/// A CA of the test's own, as a user's (or cert-manager's) would be.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Result<Self> {
        let key = rcgen::KeyPair::generate().map_err(rcgen_error)?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
        // A name of its own: a certificate whose issuer name equals its subject name reads as
        // self-signed, and two CAs of one name cannot be told apart in a bundle.
        let id: u64 = rand::random();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("e2e test CA {id:016x}"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let pem = params.self_signed(&key).map_err(rcgen_error)?.pem();
        Ok(Self {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// A server certificate and its key (PEM), as cert-manager issues one for a Service name.
    fn issue(&self, name: &str) -> Result<(String, String)> {
        let key = rcgen::KeyPair::generate().map_err(rcgen_error)?;
        let mut params =
            rcgen::CertificateParams::new(vec![name.to_owned()]).map_err(rcgen_error)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).map_err(rcgen_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// Writes the user's certificate Secret in cert-manager's shape (created or replaced whole).
async fn put_certificate(
    c: &ClusterFixture,
    name: &str,
    cert: &str,
    key: &str,
    ca: &str,
) -> Result<()> {
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert, "tls.key": key, "ca.crt": ca},
    });
    c.ns.api::<Secret>()
        .patch(
            name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// Every member's pod: its UID and its containers' restart counts, to prove nothing restarted.
async fn pod_lives(c: &ClusterFixture) -> Result<BTreeMap<String, (String, i32)>> {
    let mut lives = BTreeMap::new();
    for node in c.nodes().await? {
        let pod_name = node
            .status
            .as_ref()
            .and_then(|s| s.pod_name.clone())
            .ok_or_else(|| E2eError::Check(format!("{} has no pod", node.name_any())))?;
        let pod = c.ns.pod(&pod_name).await?;
        let restarts = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|s| s.restart_count)
            .sum();
        lives.insert(pod_name, (pod.metadata.uid.unwrap_or_default(), restarts));
    }
    Ok(lives)
}

/// The user's certificate Secret, replaced by one from another CA (with both CAs trusted, as a
/// CA rotation is done): every server presents the new certificate within a minute, a client that
/// trusts only the new CA is served by each and one that trusts only the old CA by none, the cluster
/// is whole (Valkey's cli, the new CA only) and no pod restarted. Valkey 9.1 reloads its files
/// itself; 8.0 is told to by the node-controller.
async fn a_renewed_user_certificate_reaches_every_server_without_a_restart(
    prefix: &str,
    image: &str,
) -> Result<()> {
    const SECRET: &str = "secure-cert";
    let c = ClusterFixture::start(
        prefix,
        "secure",
        &format!(
            "{{shards: 2, replicas: 1, image: '{image}', tls: {{enabled: true, certificateSecret: {SECRET}}}}}"
        ),
    )
    .await?;
    let service = format!("secure.{}.svc", c.ns.name);
    let (old_ca, new_ca) = (Ca::new()?, Ca::new()?);
    let (cert, key) = old_ca.issue(&service)?;
    put_certificate(&c, SECRET, &cert, &key, &old_ca.pem).await?;
    c.wait_ready(READY).await?;
    let password = c.password().await?;
    let nodes = c.wait_roles(2, 2, Duration::from_secs(60)).await?;
    let ips: Vec<String> = nodes.iter().filter_map(ready_pod_ip).collect();
    check(ips.len() == 4, format!("four ready members: {ips:?}"))?;
    for ip in &ips {
        let plain = c.command_on(ip, &["PING"]).await;
        check(
            plain.is_err(),
            format!("{ip}: a plain client was answered: {plain:?}"),
        )?;
    }
    let before = pod_lives(&c).await?;

    let (cert, key) = new_ca.issue(&service)?;
    let bundle = format!("{}{}", old_ca.pem, new_ca.pem);
    put_certificate(&c, SECRET, &cert, &key, &bundle).await?;
    let renewed = Instant::now();
    let (old_pem, new_pem) = (
        old_ca.pem.clone().into_bytes(),
        new_ca.pem.clone().into_bytes(),
    );
    for ip in &ips {
        wait_until(
            Duration::from_secs(150),
            &format!("{ip} presents the certificate of the new CA"),
            || {
                let (new_pem, password) = (new_pem.clone(), password.clone());
                async move {
                    Ok(
                        match tls_command(ip, &new_pem, password.as_deref(), &["PING"]).await {
                            Ok(pong) if pong == "PONG" => Poll::Ready(()),
                            Ok(other) => Poll::NotYet(other),
                            Err(e) => Poll::NotYet(e.to_string()),
                        },
                    )
                }
            },
        )
        .await?;
        let old = tls_command(ip, &old_pem, password.as_deref(), &["PING"]).await;
        check(
            old.is_err(),
            format!("{ip}: a client trusting only the old CA is still served: {old:?}"),
        )?;
    }
    eprintln!(
        "MEASURE tls renewal ({image}): every server presents the new certificate {:?} after the Secret changed",
        renewed.elapsed()
    );
    c.wait_ready(READY).await?;
    let check_output = cli_cluster_check(&c, &new_pem, password.as_deref()).await?;
    check(
        check_output.contains("[OK] All 16384 slots covered"),
        format!("valkey-cli --cluster check with the new CA: {check_output}"),
    )?;
    let after = pod_lives(&c).await?;
    check(
        after == before,
        format!("pods restarted or replaced: before {before:?}, after {after:?}"),
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_user_certificate_reaches_every_server_without_a_restart_on_valkey_9()
-> Result<()> {
    a_renewed_user_certificate_reaches_every_server_without_a_restart(
        "tls-renew9",
        "valkey/valkey:9.1",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_user_certificate_reaches_every_server_without_a_restart_on_valkey_8()
-> Result<()> {
    a_renewed_user_certificate_reaches_every_server_without_a_restart(
        "tls-renew8",
        "valkey/valkey:8.0",
    )
    .await
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

/// A ValkeyReplication with `spec.tls.enabled`: every member refuses plain clients and answers TLS
/// ones verified against the CA the operator issued for it (`<name>-tls`); the replica's link to
/// the primary is up (replication runs over TLS, as nothing plain is served), and a write the
/// replica confirmed (`WAIT 1`) is read back from it.
#[tokio::test(flavor = "multi_thread")]
async fn a_tls_replication_serves_only_tls_and_replicates_over_it() -> Result<()> {
    let r = ReplicationFixture::start(
        "tls-repl",
        "orders",
        "{image: 'valkey/valkey:9.1', replicas: 1, tls: {enabled: true}}",
    )
    .await?;
    r.wait_ready(READY).await?;
    let ca =
        r.ns.api::<Secret>()
            .get("orders-tls")
            .await?
            .data
            .and_then(|d| d.get("ca.crt").cloned())
            .map(|v| v.0)
            .ok_or_else(|| E2eError::Check("Secret orders-tls has no ca.crt".into()))?;
    let password = r.password().await?;
    let (primary, primary_ip) = r.primary().await?;
    let mut replica_ip = None;
    for node in r.nodes().await? {
        let name = node.name_any();
        let ip = r.ip_of(&name).await?;
        // A plain connection on purpose (the fixture's own would speak TLS to a TLS spec).
        let plain = match e2e::replication::connect(&ip, password.as_deref()).await {
            Ok(mut conn) => e2e::valkey_cmd(&mut conn, &["PING"]).await,
            Err(e) => Err(e),
        };
        check(
            plain.is_err(),
            format!("{name}: a plain client was answered: {plain:?}"),
        )?;
        let pong = tls_command(&ip, &ca, password.as_deref(), &["PING"]).await?;
        check(
            pong == "PONG",
            format!("{name}: PING over TLS answered {pong}"),
        )?;
        if name != primary {
            replica_ip = Some(ip);
        }
    }
    let replica_ip = replica_ip.ok_or_else(|| E2eError::Check("no replica".into()))?;
    wait_link_up(&replica_ip, &ca, password.as_deref()).await?;
    let set = tls_command(
        &primary_ip,
        &ca,
        password.as_deref(),
        &["SET", "tls:k", "v"],
    )
    .await?;
    check(set == "OK", format!("SET over TLS answered {set}"))?;
    let confirmed = tls_command(
        &primary_ip,
        &ca,
        password.as_deref(),
        &["WAIT", "1", "5000"],
    )
    .await?;
    check(
        confirmed == "1",
        format!("WAIT 1: {confirmed} replicas confirmed"),
    )?;
    let read = tls_command(&replica_ip, &ca, password.as_deref(), &["GET", "tls:k"]).await?;
    check(read == "v", format!("the replica read back {read:?}"))
}
