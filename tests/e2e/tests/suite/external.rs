//! External access end to end (`spec.externalAccess`): a client in localkube's outside network
//! namespace, which reaches LoadBalancer addresses and never a pod IP, uses a ValkeyCluster
//! through the members' own load balancers, while the members keep talking over pod IPs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e::chaos::writer::{Acks, Connect, ReplicatedWriter};
use e2e::cluster::{ClusterFixture, connect, connect_tls_verified};
use e2e::replication::ReplicationFixture;
use e2e::{E2eError, Poll, Result, check, outside, wait_until};
use k8s_openapi::api::core::v1::Service;
use redis::AsyncCommands;
use valkey_api::v1alpha1::{ClusterState, Role};

const FORM: Duration = Duration::from_secs(240);
/// localkube's allocator hands out 10.213.255.1-254 (see `e2e::outside::LB_POOL`).
const POOL_PREFIX: &str = "10.213.255.";

/// Every member's external address: its Service's, which its ValkeyNode announces to clients
/// (and, unless `tls`, its server answers CONFIG GET with).
async fn external_addresses(c: &ClusterFixture) -> Result<BTreeMap<String, String>> {
    external_addresses_of(c, false).await
}

async fn external_addresses_of(c: &ClusterFixture, tls: bool) -> Result<BTreeMap<String, String>> {
    let services = c.ns.api::<Service>();
    let mut out = BTreeMap::new();
    for node in c.nodes().await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let service = services.get(&format!("{name}-external")).await?;
        let spec = service.spec.clone().unwrap_or_default();
        check(
            spec.type_.as_deref() == Some("LoadBalancer"),
            format!("{name}-external is {:?}", spec.type_),
        )?;
        let ip = service
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|i| i.first().and_then(|i| i.ip.clone()))
            .unwrap_or_default();
        check(
            ip.starts_with(POOL_PREFIX),
            format!("{name}-external has no address from the pool: {ip:?}"),
        )?;
        let in_spec = node
            .spec
            .config
            .as_ref()
            .and_then(|c| c.get("cluster-announce-client-ipv4"))
            .cloned()
            .unwrap_or_default();
        check(
            in_spec == ip,
            format!("ValkeyNode {name} announces {in_spec:?}, its Service has {ip}"),
        )?;
        if tls {
            out.insert(name, ip);
            continue;
        }
        let pod_ip = node
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| E2eError::Check(format!("{name} has no pod IP")))?;
        let announced = c
            .admin_command_on(&pod_ip, &["CONFIG", "GET", "cluster-announce-client-ipv4"])
            .await?;
        check(
            announced.contains(&ip),
            format!("{name} announces {announced:?}, its Service has {ip}"),
        )?;
        out.insert(name, ip);
    }
    Ok(out)
}

/// The bus and replication stay on pod IPs: every replica's link names its primary's pod IP,
/// never an external address (the bus port is not even behind the load balancers, so a bus on
/// them could not have formed the cluster).
async fn replicas_follow_pod_ips(c: &ClusterFixture) -> Result<()> {
    let mut replicas = 0;
    for node in c.nodes().await? {
        let ip = node.status.and_then(|s| s.pod_ip).unwrap_or_default();
        let info = c.admin_command_on(&ip, &["INFO", "replication"]).await?;
        if !info.contains("role:slave") {
            continue;
        }
        replicas += 1;
        let host = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("master_host:"))
            .unwrap_or_default()
            .to_owned();
        check(
            !host.is_empty() && !host.starts_with(POOL_PREFIX),
            format!("replica {ip} replicates from {host:?}: {info}"),
        )?;
    }
    check(replicas > 0, "no member is a replica")
}

fn urls(addresses: &BTreeMap<String, String>) -> Vec<String> {
    addresses
        .values()
        .map(|ip| format!("redis://{ip}:6379/"))
        .collect()
}

/// What the outside client did: its writer's acknowledgements and the WAIT-acknowledged keys it
/// could not read back.
struct OutsideRun {
    acks: Acks,
    missing: Vec<String>,
}

/// `valkey-cli -c` from the outside namespace, through `host:port`, sets six keys `<tag>:<a..f>`
/// (spread over the slots): MOVED sends it on to the other members' external addresses.
async fn cli_sets_from_outside(
    host: &str,
    port: u16,
    password: Option<&str>,
    tag: &str,
) -> Result<()> {
    let cli = e2e::localkube_dir().join("images/valkey-9.1/bin/valkey-cli");
    for key in ["a", "b", "c", "d", "e", "f"] {
        let mut cmd = outside::command(&cli.to_string_lossy());
        cmd.args([
            "-c",
            "-h",
            host,
            "-p",
            &port.to_string(),
            "--no-auth-warning",
        ]);
        if let Some(password) = password {
            cmd.args(["-a", password]);
        }
        let out = cmd
            .args(["SET", &format!("{tag}:{key}"), key])
            .output()
            .await
            .map_err(|e| E2eError::Check(format!("valkey-cli: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        check(
            out.status.success() && text.trim() == "OK",
            format!(
                "valkey-cli -c SET {tag}:{key} from outside: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
    }
    Ok(())
}

/// A cluster client in the outside namespace writing with WAIT 1 (`ReplicatedWriter`) through
/// `seeds` until [`OutsideWriter::finish`], which reads every WAIT-acknowledged key back.
struct OutsideWriter {
    acked: Arc<AtomicUsize>,
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Result<Result<OutsideRun>>>,
}

impl OutsideWriter {
    fn start(seeds: Vec<String>, password: Option<String>) -> Self {
        let acked = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let seen = acked.clone();
        let run = tokio::spawn(outside::run(move || async move {
            let conn = connect(seeds.clone(), password.clone()).await?;
            let again: Connect = Arc::new(move || {
                let (seeds, password) = (seeds.clone(), password.clone());
                Box::pin(async move { connect(seeds, password).await.ok() })
            });
            let writer = ReplicatedWriter::start("out", conn, again.clone());
            let mut stopped = stopped;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    () = tokio::time::sleep(Duration::from_millis(200)) => {
                        seen.store(writer.acked().await, Ordering::Relaxed);
                    }
                }
            }
            let acks = writer.stop().await;
            let mut reader = again()
                .await
                .ok_or_else(|| E2eError::Check("no cluster connection for reading back".into()))?;
            let mut missing = Vec::new();
            for (key, value) in &acks.replicated {
                let got: Option<String> = reader.get(key).await.ok().flatten();
                if got.as_deref() != Some(value.as_str()) {
                    missing.push(key.clone());
                }
            }
            Ok::<_, E2eError>(OutsideRun { acks, missing })
        }));
        Self { acked, stop, run }
    }

    /// Waits (up to a minute) until `more` writes beyond those counted so far are acknowledged.
    async fn more_acked(&self, more: usize) -> Result<()> {
        let at_least = self.acked.load(Ordering::Relaxed) + more;
        wait_until(
            Duration::from_secs(60),
            "the outside writer's acknowledged writes",
            || async {
                let now = self.acked.load(Ordering::Relaxed);
                Ok(if now >= at_least {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{now} of {at_least}"))
                })
            },
        )
        .await
    }

    /// Stops the writer; fails naming the WAIT-acknowledged writes not read back, or when fewer
    /// than `at_least` were acknowledged.
    async fn finish(self, at_least: usize) -> Result<()> {
        let _ = self.stop.send(());
        let run = self
            .run
            .await
            .map_err(|e| E2eError::Check(format!("the outside client: {e}")))???;
        check(
            run.missing.is_empty() && run.acks.replicated.len() >= at_least,
            format!(
                "{} of {} WAIT-acknowledged writes are not read back from outside (at least {at_least} wanted): {:?}",
                run.missing.len(),
                run.acks.replicated.len(),
                run.missing.iter().take(10).collect::<Vec<_>>()
            ),
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outside_client_uses_every_shard_through_the_load_balancers_across_a_scale_out_and_a_failover()
-> Result<()> {
    // The first member asks for an address of its own (high in the pool, which hands out the
    // lowest free one otherwise).
    let c = ClusterFixture::start(
        "external",
        "ext",
        "{shards: 3, replicas: 1, externalAccess: {fixed: {ext-0-0: {loadBalancerIP: 10.213.255.250}}}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let addresses = external_addresses(&c).await?;
    check(
        addresses.len() == 6
            && addresses.get("ext-0-0").map(String::as_str) == Some("10.213.255.250"),
        format!("{addresses:?}"),
    )?;
    replicas_follow_pod_ips(&c).await?;
    let password = c.password().await?;

    // valkey-cli -c from outside: sent on by MOVED to external addresses only.
    let first = addresses.values().next().cloned().unwrap_or_default();
    cli_sets_from_outside(&first, 6379, password.as_deref(), "cli").await?;

    // A cluster client outside, writing with WAIT 1 until told to stop, then reading back.
    let writer = OutsideWriter::start(urls(&addresses), password.clone());
    writer.more_acked(100).await?;

    // Scale out: the new members get Services and addresses before they join.
    c.patch_spec(serde_json::json!({"shards": 4})).await?;
    c.wait_ready(FORM).await?;
    let grown = external_addresses(&c).await?;
    check(grown.len() == 8, format!("{grown:?}"))?;
    writer.more_acked(100).await?;

    // A primary's pod deleted: its replica takes over, clients follow through the new
    // primary's external address.
    let primary = c.member_with_role(Role::Primary).await?;
    let pod = primary
        .status
        .and_then(|s| s.pod_name)
        .ok_or_else(|| E2eError::Check("the primary has no pod".into()))?;
    c.ns.kubectl(&["delete", "pod", &pod, "--wait=false"])
        .await?;
    c.wait_status(FORM, "Ready after the failover", |s| {
        s.state == Some(ClusterState::Ready) && s.ready_shards == 4
    })
    .await?;
    writer.more_acked(100).await?;

    // A rolling restart (a new pod label restarts every member, one per shard at a time): the
    // outside client follows each switchover through the external addresses.
    let patched = c
        .patch_spec(serde_json::json!({"podLabels": {"restarted": "once"}}))
        .await?;
    let generation = patched.metadata.generation;
    wait_until(FORM, "every member restarted for the new label", || async {
        let cluster = c.api().get(&c.name).await?;
        let nodes = c.nodes().await?;
        let ready = cluster.status.as_ref().is_some_and(|s| {
            s.state == Some(ClusterState::Ready) && s.observed_generation == generation
        });
        Ok(if ready && e2e::members_rolled(&nodes, 8) {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!("{:?}", cluster.status.map(|s| s.message)))
        })
    })
    .await?;
    writer.more_acked(100).await?;
    writer.finish(300).await?;
    let addresses = external_addresses(&c).await?;
    replicas_follow_pod_ips(&c).await?;

    // valkey-py's cluster client, as an application outside would use it: every key written
    // (WAIT 1) and read back, and the nodes it learnt are the external addresses only.
    let learnt = valkey_py_cluster(&first, 6379, password.as_deref(), 200).await?;
    let external: std::collections::BTreeSet<String> =
        addresses.values().map(|a| format!("{a}:6379")).collect();
    let nodes: Vec<String> = learnt["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    check(
        learnt["written"] == 200
            && learnt["read"] == 200
            && !nodes.is_empty()
            && nodes.iter().all(|n| external.contains(n)),
        format!("valkey-py from outside: {learnt}; the external addresses {external:?}"),
    )?;

    // A client inside still works (through the same announced addresses: the test host, like a
    // pod, reaches them).
    let mut inside = c.client().await?;
    let valkey = |source| E2eError::Valkey {
        addr: "the cluster, from inside".into(),
        source,
    };
    let _: () = inside.set("inside", "yes").await.map_err(valkey)?;
    let got: Option<String> = inside.get("inside").await.map_err(valkey)?;
    check(
        got.as_deref() == Some("yes"),
        format!("inside read {got:?}"),
    )?;
    Ok(())
}

/// Runs tests/clients/valkey_py_cluster.py from outside through `seed`; its JSON line.
async fn valkey_py_cluster(
    seed: &str,
    port: u16,
    password: Option<&str>,
    keys: usize,
) -> Result<serde_json::Value> {
    let script = e2e::repo_root().join("tests/clients/valkey_py_cluster.py");
    let mut cmd = outside::command("python3");
    cmd.env("PYTHONPATH", e2e::localkube_dir().join("python"))
        .env("VALKEY_PASSWORD", password.unwrap_or_default())
        .arg(&script)
        .args([seed, &port.to_string(), &keys.to_string()]);
    let out = cmd
        .output()
        .await
        .map_err(|e| E2eError::Check(format!("python3 {}: {e}", script.display())))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    serde_json::from_str(text.trim()).map_err(|e| {
        E2eError::Check(format!(
            "valkey-py from outside ({e}): {text} {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

/// Writes and reads back one key per shard's worth of slots through `conn`.
async fn every_shard(conn: &mut redis::cluster_async::ClusterConnection, tag: &str) -> Result<()> {
    for n in 0..30 {
        let key = format!("{tag}:{n}");
        let valkey = |source| E2eError::Valkey {
            addr: format!("{key}, from outside"),
            source,
        };
        let _: () = conn.set(&key, n).await.map_err(valkey)?;
        let got: Option<u32> = conn.get(&key).await.map_err(valkey)?;
        check(got == Some(n), format!("{key} read back as {got:?}"))?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_tls_an_outside_client_verifies_the_external_address_in_the_certificate() -> Result<()>
{
    let c = ClusterFixture::start(
        "external-tls",
        "ext",
        "{shards: 3, replicas: 0, tls: {enabled: true}, externalAccess: {tlsNames: [valkey.example.com]}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let addresses = external_addresses_of(&c, true).await?;
    let seeds: Vec<String> = addresses
        .values()
        .map(|ip| format!("rediss://{ip}:6379/"))
        .collect();
    verified_from_outside(&c, seeds).await
}

/// Behind NodePorts with TLS: the certificate names the nodes' addresses, and a client that
/// checks names reaches every shard at the nodes' addresses and TLS ports its servers announce.
#[tokio::test(flavor = "multi_thread")]
async fn with_tls_behind_node_ports_an_outside_client_verifies_the_node_address() -> Result<()> {
    let c = ClusterFixture::start(
        "external-nodeport-tls",
        "npt",
        "{shards: 3, replicas: 0, image: 'valkey/valkey:9.1', tls: {enabled: true}, externalAccess: {type: NodePort}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let mut seeds = Vec::new();
    for node in c.nodes().await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let config = node.spec.config.clone().unwrap_or_default();
        let host = node.status.and_then(|s| s.host_ip).unwrap_or_default();
        let port = config
            .get("cluster-announce-client-tls-port")
            .cloned()
            .unwrap_or_default();
        check(
            !host.is_empty()
                && config.get("cluster-announce-client-ipv4") == Some(&host)
                && port.parse::<u16>().is_ok_and(|p| p > 6379),
            format!("{name} on {host:?} announces {config:?}"),
        )?;
        seeds.push(format!("rediss://{host}:{port}/"));
    }
    verified_from_outside(&c, seeds).await
}

/// A TLS cluster client in the outside namespace that verifies the servers' names against the
/// cluster's CA writes and reads on every shard through `seeds`. The certificate is issued again
/// once the external addresses are known, and the servers load it by themselves: until then a
/// client that checks names refuses them, so this tries for a while.
async fn verified_from_outside(c: &ClusterFixture, seeds: Vec<String>) -> Result<()> {
    let (ca, password) = (c.tls_ca().await?, c.password().await?);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (seeds, password, ca) = (seeds.clone(), password.clone(), ca.clone());
        let tried = outside::run(move || async move {
            let mut conn = connect_tls_verified(seeds, password, ca).await?;
            every_shard(&mut conn, "tls").await
        })
        .await?;
        match tried {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("TLS from outside not verified yet: {e}");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => {
                return Err(E2eError::Check(format!(
                    "TLS from outside, names checked: {e}"
                )));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_8_0_announces_the_external_addresses_too() -> Result<()> {
    let c = ClusterFixture::start(
        "external-80",
        "ext",
        "{shards: 3, replicas: 0, image: 'valkey/valkey:8.0', externalAccess: {}}",
    )
    .await?;
    c.wait_ready(FORM).await?;
    let addresses = external_addresses(&c).await?;
    let (seeds, password) = (urls(&addresses), c.password().await?);
    outside::run(move || async move {
        let mut conn = connect(seeds, password).await?;
        every_shard(&mut conn, "v8").await
    })
    .await?
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replications_external_address_follows_a_failover() -> Result<()> {
    let r = ReplicationFixture::start(
        "external-repl",
        "orders",
        "{image: 'valkey/valkey:9.1', replicas: 1, persistence: {enabled: false}, externalAccess: {}}",
    )
    .await?;
    r.wait_ready(FORM).await?;
    let services = r.ns.api::<Service>();
    let address = |name: &'static str| {
        let services = services.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let ip = services
                    .get(name)
                    .await?
                    .status
                    .and_then(|s| s.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .and_then(|i| i.first().and_then(|i| i.ip.clone()));
                match ip {
                    Some(ip) if ip.starts_with(POOL_PREFIX) => return Ok::<_, E2eError>(ip),
                    _ if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    other => {
                        return Err(E2eError::Check(format!("{name} has no address: {other:?}")));
                    }
                }
            }
        }
    };
    let (primary_ip, replicas_ip) = (
        address("orders-external").await?,
        address("orders-replicas-external").await?,
    );
    let password = r.password().await?;
    let url = |ip: &str| match &password {
        Some(p) => format!("redis://:{p}@{ip}:6379/"),
        None => format!("redis://{ip}:6379/"),
    };
    let (to_primary, to_replicas) = (url(&primary_ip), url(&replicas_ip));
    // One command through an address from outside: the role of whoever answers, and a write
    // confirmed by a replica (`WAIT 1`) when it is the primary.
    let ask = |url: String, write: Option<&'static str>| async move {
        outside::run(move || async move {
            let client = redis::Client::open(url.as_str()).map_err(|source| E2eError::Valkey {
                addr: url.clone(),
                source,
            })?;
            let valkey = |source| E2eError::Valkey {
                addr: "an external address".into(),
                source,
            };
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(valkey)?;
            // The clients' user may not run ROLE; INFO's replication section says the same.
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .map_err(valkey)?;
            let role = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("role:"))
                .unwrap_or_default()
                .to_owned();
            let mut value: Option<String> = None;
            if let Some(key) = write {
                let _: () = conn.set(key, "v").await.map_err(valkey)?;
                let replicas: i64 = redis::cmd("WAIT")
                    .arg(1)
                    .arg(2000)
                    .query_async(&mut conn)
                    .await
                    .map_err(valkey)?;
                check(replicas >= 1, format!("WAIT 1 confirmed {replicas}"))?;
            }
            if let Some(key) = write.map(|_| "before") {
                value = conn.get(key).await.map_err(valkey)?;
            }
            Ok::<_, E2eError>((role, value))
        })
        .await?
    };
    // The addresses are given before kube-proxy has the Services' endpoints: until then a
    // connection is refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let primary = ask(to_primary.clone(), Some("before")).await;
        let replica = ask(to_replicas.clone(), None).await;
        match (primary, replica) {
            (Ok((p, _)), Ok((r, _))) if p == "master" && r == "slave" => break,
            (Ok((p, _)), Ok((r, _))) => {
                return Err(E2eError::Check(format!(
                    "orders-external answered as {p}, orders-replicas-external as {r}"
                )));
            }
            (p, r) if tokio::time::Instant::now() >= deadline => {
                return Err(E2eError::Check(format!(
                    "the external addresses did not answer: {:?} {:?}",
                    p.err(),
                    r.err()
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }

    let (old, _) = r.primary().await?;
    let pod = r.pod_of(&old).await?;
    r.ns.api::<k8s_openapi::api::core::v1::Pod>()
        .delete(&pod, &Default::default())
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let now = r.primary().await.ok().map(|(name, _)| name);
        let answered = match now.as_deref() {
            Some(name) if name != old => ask(to_primary.clone(), Some("after")).await.ok(),
            _ => None,
        };
        match answered {
            Some((role, before)) if role == "master" => {
                check(
                    before.as_deref() == Some("v"),
                    format!("the write acknowledged before the failover reads back as {before:?}"),
                )?;
                break;
            }
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => {
                return Err(E2eError::Check(format!(
                    "orders-external did not reach a new primary after {old} was deleted: {other:?} (status primary {now:?})"
                )));
            }
        }
    }
    Ok(())
}

/// The node port fixed for the first member in the NodePort test: in the API server's default
/// range, and used by no other test.
const FIXED_NODE_PORT: u16 = 31379;

/// Every member's external address behind NodePorts: the address of the Kubernetes node its pod
/// runs on and its Service's node port, as its ValkeyNode announces them and its server answers
/// CONFIG GET with.
async fn node_port_addresses(c: &ClusterFixture) -> Result<BTreeMap<String, (String, u16)>> {
    let services = c.ns.api::<Service>();
    let mut out = BTreeMap::new();
    for node in c.nodes().await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = services
            .get(&format!("{name}-external"))
            .await?
            .spec
            .unwrap_or_default();
        let port = spec
            .ports
            .as_ref()
            .and_then(|p| p.first().and_then(|p| p.node_port))
            .unwrap_or_default();
        check(
            spec.type_.as_deref() == Some("NodePort") && port > 0,
            format!("{name}-external is {:?} with node port {port}", spec.type_),
        )?;
        let status = node.status.clone().unwrap_or_default();
        let host = status.host_ip.clone().unwrap_or_default();
        let config = node.spec.config.clone().unwrap_or_default();
        let setting = |key: &str| config.get(key).cloned().unwrap_or_default();
        check(
            setting("cluster-announce-client-ipv4") == host
                && setting("cluster-announce-client-port") == port.to_string()
                && setting("cluster-announce-client-tls-port") == port.to_string(),
            format!("ValkeyNode {name} announces {config:?}; its node is {host}, its port {port}"),
        )?;
        let pod_ip = status.pod_ip.unwrap_or_default();
        let live = c
            .admin_command_on(&pod_ip, &["CONFIG", "GET", "cluster-announce-client-port"])
            .await?;
        check(
            live.contains(&port.to_string()),
            format!("{name} announces port {live:?}, its Service has {port}"),
        )?;
        out.insert(name, (host, u16::try_from(port).unwrap_or_default()));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_node_ports_an_outside_client_reaches_every_shard_at_node_addresses_across_a_failover()
-> Result<()> {
    let c = ClusterFixture::start(
        "external-nodeport",
        "np",
        &format!(
            "{{shards: 3, replicas: 1, image: 'valkey/valkey:9.1', externalAccess: {{type: NodePort, fixed: {{np-0-0: {{nodePort: {FIXED_NODE_PORT}}}}}}}}}"
        ),
    )
    .await?;
    c.wait_ready(FORM).await?;
    let addresses = node_port_addresses(&c).await?;
    check(
        addresses.len() == 6 && addresses.get("np-0-0").map(|a| a.1) == Some(FIXED_NODE_PORT),
        format!("{addresses:?}"),
    )?;
    replicas_follow_pod_ips(&c).await?;
    let password = c.password().await?;

    // valkey-cli -c from outside, through one node address and port: MOVED sends it on to the
    // others' node addresses and ports.
    let (host, port) = addresses.values().next().cloned().unwrap_or_default();
    cli_sets_from_outside(&host, port, password.as_deref(), "np").await?;

    // A cluster client outside writes with WAIT 1 while a primary's pod is deleted.
    let seeds: Vec<String> = addresses
        .values()
        .map(|(host, port)| format!("redis://{host}:{port}/"))
        .collect();
    let writer = OutsideWriter::start(seeds, password.clone());
    writer.more_acked(100).await?;
    let primary = c.member_with_role(Role::Primary).await?;
    let member = primary.metadata.name.clone().unwrap_or_default();
    let pod = primary
        .status
        .and_then(|s| s.pod_name)
        .ok_or_else(|| E2eError::Check("the primary has no pod".into()))?;
    let old_uid = c.ns.pod(&pod).await?.metadata.uid;
    c.ns.kubectl(&["delete", "pod", &pod, "--wait=false"])
        .await?;
    // Its new pod ready (a NodePort forwards only to ready pods) and the cluster Ready again.
    wait_until(FORM, "the deleted primary's new pod ready", || async {
        let node =
            c.ns.api::<valkey_api::v1alpha1::ValkeyNode>()
                .get(&member)
                .await?;
        let replaced =
            c.ns.pod(&pod)
                .await
                .is_ok_and(|p| p.metadata.uid != old_uid);
        Ok(
            if replaced && node.status.as_ref().is_some_and(|s| s.ready) {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{:?}", node.status.map(|s| s.ready)))
            },
        )
    })
    .await?;
    c.wait_status(FORM, "Ready after the failover", |s| {
        s.state == Some(ClusterState::Ready) && s.ready_shards == 3
    })
    .await?;
    writer.more_acked(100).await?;
    writer.finish(200).await?;

    // Every member announces its node's address and port again (a pod that moved to another
    // node included), and valkey-py's cluster client learns those and nothing else.
    let addresses = wait_until(
        FORM,
        "every member announcing its node and port",
        || async {
            Ok(match node_port_addresses(&c).await {
                Ok(found) => Poll::Ready(found),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        },
    )
    .await?;
    let learnt = valkey_py_cluster(&host, port, password.as_deref(), 200).await?;
    let external: std::collections::BTreeSet<String> = addresses
        .values()
        .map(|(host, port)| format!("{host}:{port}"))
        .collect();
    let nodes: Vec<String> = learnt["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    check(
        learnt["written"] == 200
            && learnt["read"] == 200
            && !nodes.is_empty()
            && nodes.iter().all(|n| external.contains(n)),
        format!("valkey-py from outside: {learnt}; the node addresses and ports {external:?}"),
    )?;
    replicas_follow_pod_ips(&c).await
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_8_0_behind_node_ports_is_refused_with_a_reason() -> Result<()> {
    let c = ClusterFixture::start(
        "external-nodeport-80",
        "np8",
        "{shards: 1, replicas: 0, image: 'valkey/valkey:8.0', externalAccess: {type: NodePort}}",
    )
    .await?;
    let status = c
        .wait_status(FORM, "the reason NodePorts need Valkey 9", |s| {
            s.reason.as_deref() == Some("ExternalNodePortNeedsValkey9")
        })
        .await?
        .status
        .unwrap_or_default();
    check(
        status.state != Some(ClusterState::Ready)
            && status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("np8-0-0") && m.contains("LoadBalancer")),
        format!("{status:?}"),
    )?;
    // Nothing announced: the server runs (8.0 would not start with a client port setting).
    let node = c.nodes().await?.into_iter().next();
    let config = node.and_then(|n| n.spec.config).unwrap_or_default();
    check(
        !config.contains_key("cluster-announce-client-port"),
        format!("the 8.0 member is given {config:?}"),
    )
}
