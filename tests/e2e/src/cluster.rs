//! A ValkeyCluster under test: its namespace, both controllers, a cluster-aware client that follows
//! MOVED/ASK, and a writer that records every acknowledged write so a test can prove none was lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, IntoConnectionInfo};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use valkey_api::v1alpha1::{ClusterState, Role, ValkeyCluster, ValkeyClusterStatus, ValkeyNode};

use crate::operator::{ControllerProcess, install_crds, wait_cluster};
use crate::{E2eError, Poll, Result, TestNamespace, check, wait_until};

/// The cluster, its namespace and its two controllers (killed when dropped).
pub struct ClusterFixture {
    pub ns: TestNamespace,
    pub name: String,
    pub node_controller: ControllerProcess,
    pub cluster_controller: ControllerProcess,
    /// A heavy test's turn (see [`crate::pool`]), held while the cluster lives.
    _turn: Option<crate::pool::HeavyTurn>,
}

impl ClusterFixture {
    /// Creates a namespace, starts both controllers in it and applies the ValkeyCluster `name`
    /// with `spec` (YAML of the spec mapping).
    pub async fn start(prefix: &str, name: &str, spec: &str) -> Result<Self> {
        Self::start_with(prefix, name, spec, &[]).await
    }

    /// [`start`](Self::start), with extra flags for the cluster-controller.
    pub async fn start_with(
        prefix: &str,
        name: &str,
        spec: &str,
        cluster_controller_args: &[&str],
    ) -> Result<Self> {
        let fixture = Self::prepare_with(prefix, name, cluster_controller_args).await?;
        fixture.apply(spec).await?;
        Ok(fixture)
    }

    /// The namespace and both controllers, without the ValkeyCluster yet (see [`Self::apply`]):
    /// for a test that must watch from before the cluster exists.
    pub async fn prepare(prefix: &str, name: &str) -> Result<Self> {
        Self::prepare_with(prefix, name, &[]).await
    }

    /// [`prepare`](Self::prepare), with extra flags for the cluster-controller.
    pub async fn prepare_with(
        prefix: &str,
        name: &str,
        cluster_controller_args: &[&str],
    ) -> Result<Self> {
        let turn = crate::pool::heavy().await;
        install_crds().await?;
        let ns = TestNamespace::create(prefix).await?;
        let node_controller = ControllerProcess::start("node-controller", &ns, &[]).await?;
        let cluster_controller =
            ControllerProcess::start("cluster-controller", &ns, cluster_controller_args).await?;
        Ok(Self {
            ns,
            name: name.to_owned(),
            node_controller,
            cluster_controller,
            _turn: turn,
        })
    }

    /// Applies the ValkeyCluster with `spec` (YAML of the spec mapping).
    pub async fn apply(&self, spec: &str) -> Result<()> {
        let manifest = format!(
            "apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {{name: {}}}\nspec: {spec}\n",
            self.name
        );
        self.ns.apply(&manifest).await.map(|_| ())
    }

    pub fn api(&self) -> Api<ValkeyCluster> {
        self.ns.api::<ValkeyCluster>()
    }

    /// Waits until the cluster reports Ready for its current generation, with `shards` ready.
    pub async fn wait_ready(&self, within: Duration) -> Result<ValkeyCluster> {
        wait_cluster(&self.ns, &self.name, within, "Ready", |c| {
            let status = c.status.as_ref();
            status.is_some_and(|s| {
                s.state == Some(ClusterState::Ready)
                    && s.observed_generation == c.metadata.generation
                    && s.ready_shards == c.spec.shards
            })
        })
        .await
    }

    /// Waits until the cluster's status satisfies `check`, returning the cluster.
    pub async fn wait_status<F>(
        &self,
        within: Duration,
        what: &str,
        check: F,
    ) -> Result<ValkeyCluster>
    where
        F: Fn(&ValkeyClusterStatus) -> bool,
    {
        wait_cluster(&self.ns, &self.name, within, what, |c| {
            c.status.as_ref().is_some_and(&check)
        })
        .await
    }

    /// Waits until the cluster is Degraded for `reason`; returns the status message.
    pub async fn wait_degraded(&self, reason: &str, within: Duration) -> Result<String> {
        let degraded = self
            .wait_status(within, &format!("Degraded: {reason}"), |s| {
                s.state == Some(ClusterState::Degraded) && s.reason.as_deref() == Some(reason)
            })
            .await?;
        Ok(degraded.status.and_then(|s| s.message).unwrap_or_default())
    }

    /// A merge patch of the cluster's spec.
    pub async fn patch_spec(&self, spec: serde_json::Value) -> Result<ValkeyCluster> {
        let patch = serde_json::json!({ "spec": spec });
        Ok(self
            .api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    pub async fn nodes(&self) -> Result<Vec<ValkeyNode>> {
        let list = self
            .ns
            .api::<ValkeyNode>()
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("valkey.io/cluster={}", self.name)),
            )
            .await?;
        Ok(list.items)
    }

    /// One ready member that Valkey itself says has `role` (a ValkeyNode re-reads its role every
    /// few seconds, so right after formation its status may still say primary for a replica).
    pub async fn member_with_role(&self, role: Role) -> Result<ValkeyNode> {
        let wanted = match role {
            Role::Primary => "role:master",
            Role::Replica => "role:slave",
            Role::Sentinel => {
                return Err(E2eError::Check("a cluster has no Sentinel member".into()));
            }
        };
        wait_until(
            Duration::from_secs(60),
            &format!("a member that Valkey says is {role:?}"),
            || async move {
                for node in self.nodes().await? {
                    let Some(ip) = ready_pod_ip(&node) else {
                        continue;
                    };
                    let info = self
                        .command_on(&ip, &["INFO", "replication"])
                        .await
                        .unwrap_or_default();
                    if info.lines().any(|l| l.trim() == wanted) {
                        return Ok(Poll::Ready(node));
                    }
                }
                Ok(Poll::NotYet(format!("no ready member is {wanted}")))
            },
        )
        .await
    }

    /// Waits until the ValkeyNodes report `primaries` primaries and `replicas` replicas (a node
    /// re-reads its role every few seconds, so its status may trail Valkey's own view briefly).
    pub async fn wait_roles(
        &self,
        primaries: usize,
        replicas: usize,
        within: Duration,
    ) -> Result<Vec<ValkeyNode>> {
        wait_until(
            within,
            &format!("{primaries} primaries and {replicas} replicas"),
            || async move {
                let nodes = self.nodes().await?;
                let count = |role| {
                    nodes
                        .iter()
                        .filter(|n| {
                            n.status
                                .as_ref()
                                .is_some_and(|s| s.ready && s.role == Some(role))
                        })
                        .count()
                };
                let (p, r) = (
                    count(valkey_api::v1alpha1::Role::Primary),
                    count(valkey_api::v1alpha1::Role::Replica),
                );
                Ok(if p == primaries && r == replicas && nodes.len() == p + r {
                    Poll::Ready(nodes)
                } else {
                    Poll::NotYet(format!(
                        "{p} primaries, {r} replicas, {} nodes",
                        nodes.len()
                    ))
                })
            },
        )
        .await
    }

    /// The clients' password (from the Secret the status names), if auth is on.
    pub async fn password(&self) -> Result<Option<String>> {
        let cluster = self.api().get(&self.name).await?;
        if !cluster.spec.auth.enabled {
            return Ok(None);
        }
        let name = cluster
            .status
            .and_then(|s| s.password_secret_name)
            .ok_or_else(|| E2eError::Check("status names no password Secret".into()))?;
        let secret = self.ns.api::<Secret>().get(&name).await?;
        let bytes = secret
            .data
            .and_then(|d| d.get("password").cloned())
            .ok_or_else(|| E2eError::Check(format!("Secret {name} has no password")))?;
        Ok(Some(String::from_utf8_lossy(&bytes.0).into_owned()))
    }

    /// `redis://<podIP>:6379/` of every member that has a pod IP.
    pub async fn seed_urls(&self) -> Result<Vec<String>> {
        let seeds: Vec<String> = self
            .nodes()
            .await?
            .iter()
            .filter_map(|n| n.status.as_ref()?.pod_ip.clone())
            .map(|ip| format!("redis://{ip}:6379/"))
            .collect();
        check(!seeds.is_empty(), "no member has a pod IP")?;
        Ok(seeds)
    }

    /// The CA the servers of a TLS cluster present certificates of: `ca.crt` of the Secret
    /// `spec.tls.certificateSecret` names, or of the operator's `<name>-tls`.
    pub async fn tls_ca(&self) -> Result<Vec<u8>> {
        let cluster = self.api().get(&self.name).await?;
        let name = cluster
            .spec
            .tls
            .certificate_secret
            .unwrap_or_else(|| format!("{}-tls", self.name));
        crate::ca_of(&self.ns, &name).await
    }

    /// A cluster-aware connection over TLS verified against `ca`, seeded with every member's IP.
    pub async fn tls_client(&self, ca: Vec<u8>) -> Result<ClusterConnection> {
        let seeds = self
            .seed_urls()
            .await?
            .iter()
            .map(|url| url.replacen("redis://", "rediss://", 1))
            .collect();
        connect_tls(seeds, self.password().await?, ca).await
    }

    /// A cluster-aware connection (follows MOVED and ASK), seeded with every member's IP.
    pub async fn client(&self) -> Result<ClusterConnection> {
        connect(self.seed_urls().await?, self.password().await?).await
    }
    /// Writes `count` keys `pre:<i>` and returns them (all acknowledged, or an error).
    pub async fn write_keys(&self, prefix: &str, count: u64) -> Result<BTreeMap<String, String>> {
        let mut conn = self.client().await?;
        let mut written = BTreeMap::new();
        for i in 0..count {
            let (key, value) = (format!("{prefix}:{i}"), format!("v{i}"));
            let _: () = conn
                .set(&key, &value)
                .await
                .map_err(|source| E2eError::Valkey {
                    addr: key.clone(),
                    source,
                })?;
            written.insert(key, value);
        }
        Ok(written)
    }

    /// Reads every key back through a fresh cluster connection; fails naming the missing ones.
    pub async fn verify(&self, expected: &BTreeMap<String, String>) -> Result<()> {
        let missing = self.missing(expected.iter()).await?;
        check(
            missing.is_empty(),
            format!(
                "{} of {} acknowledged writes lost: {:?}",
                missing.len(),
                expected.len(),
                &missing[..missing.len().min(10)]
            ),
        )
    }

    /// The keys of `expected` that do not read back with their value (through a fresh cluster
    /// connection that follows MOVED and ASK).
    pub async fn missing<'a>(
        &self,
        expected: impl Iterator<Item = (&'a String, &'a String)>,
    ) -> Result<Vec<String>> {
        missing_on(&mut self.client().await?, expected).await
    }

    /// `valkey-cli --cluster check` against a ready member (the cli of the 8.0 image, on the
    /// host); its output, or an error with it when the check fails.
    pub async fn cluster_check(&self) -> Result<String> {
        let ip = self.ready_member_ip().await?;
        let cli = crate::localkube_dir().join("images/valkey-8.0/bin/valkey-cli");
        let mut cmd = tokio::process::Command::new(&cli);
        cmd.args(["--cluster", "check", &format!("{ip}:6379")])
            .kill_on_drop(true);
        if let Some(password) = self.password().await? {
            // The password reaches the cli through its environment, not its command line.
            cmd.env("VALKEYCLI_AUTH", &password)
                .env("REDISCLI_AUTH", &password);
        }
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .map_err(|_| E2eError::Check("valkey-cli --cluster check timed out".into()))?
            .map_err(|source| E2eError::Spawn {
                program: cli.display().to_string(),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(E2eError::Check(format!(
                "valkey-cli --cluster check failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    }

    /// CLUSTER INFO of one member, as a map.
    pub async fn cluster_info(&self) -> Result<BTreeMap<String, String>> {
        let text = self.command_on_any(&["CLUSTER", "INFO"]).await?;
        Ok(text
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    /// The pod IP of some ready member.
    pub async fn ready_member_ip(&self) -> Result<String> {
        self.nodes()
            .await?
            .iter()
            .find_map(ready_pod_ip)
            .ok_or_else(|| E2eError::Check("no ready member".into()))
    }

    /// One command on one ready member (plain connection, default user).
    pub async fn command_on_any(&self, args: &[&str]) -> Result<String> {
        let ip = self.ready_member_ip().await?;
        self.command_on(&ip, args).await
    }

    /// One command on the member at `ip`, as the clients' default user.
    pub async fn command_on(&self, ip: &str, args: &[&str]) -> Result<String> {
        let password = self.password().await?;
        command_as(ip, None, password.as_deref(), args).await
    }

    /// One command on the member at `ip` with every right, for tests that inject faults (pause a
    /// server, take a right away from the operator). The clients' user may not administer, so
    /// the test logs in as the operator, with its password from the cluster's ACL Secret, and
    /// adds a user of its own for the purpose on that server.
    pub async fn admin_command_on(&self, ip: &str, args: &[&str]) -> Result<String> {
        let (user, password) = self.admin_login(ip).await?;
        command_as(ip, Some(&user), Some(&password), args).await
    }

    /// A user with every right on the member at `ip` and its password, for a tool run from the
    /// host (`valkey-cli --rdb`) or [`Self::admin_command_on`]: the test logs in as the operator,
    /// with its password from the cluster's ACL Secret, and adds the user on that server.
    pub async fn admin_login(&self, ip: &str) -> Result<(String, String)> {
        const ADMIN: &str = "e2e-admin";
        let acl = self
            .ns
            .api::<Secret>()
            .get(&format!("{}-acl", self.name))
            .await?;
        let operator = acl
            .data
            .and_then(|d| d.get("operator-password").cloned())
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| E2eError::Check("the ACL Secret has no operator-password".into()))?;
        let admin_password = format!("{ADMIN}-{operator}");
        command_as(
            ip,
            Some("operator"),
            Some(&operator),
            &[
                "ACL",
                "SETUSER",
                ADMIN,
                "on",
                &format!(">{admin_password}"),
                "~*",
                "&*",
                "+@all",
            ],
        )
        .await?;
        Ok((ADMIN.to_owned(), admin_password))
    }

    /// Every member's CLUSTER NODES: no slot may be left importing or migrating.
    pub async fn assert_no_open_slots(&self) -> Result<()> {
        match self.open_slots().await?.first() {
            Some((name, myself)) => check(false, format!("{name} has an open slot: {myself}")),
            None => Ok(()),
        }
    }

    /// Each member whose server holds a slot open (importing or migrating), with its own line of
    /// CLUSTER NODES.
    pub async fn open_slots(&self) -> Result<Vec<(String, String)>> {
        let mut open = Vec::new();
        for node in self.nodes().await? {
            let Some(ip) = node.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            let text = self.command_on(&ip, &["CLUSTER", "NODES"]).await?;
            let myself = text
                .lines()
                .find(|l| l.contains("myself"))
                .unwrap_or_default();
            if myself.contains("->-") || myself.contains("-<-") {
                open.push((
                    node.metadata.name.clone().unwrap_or_default(),
                    myself.to_owned(),
                ));
            }
        }
        Ok(open)
    }

    /// Waits until some server holds a slot open: a legacy move under way, seen on the servers
    /// themselves (a move may start and end within one pass, before the status says so).
    pub async fn wait_open_slot(&self, within: Duration) -> Result<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some((name, _)) = self.open_slots().await?.into_iter().next() {
                return Ok(name);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(E2eError::Timeout {
                    what: "a slot held open on some server".into(),
                    after: within,
                    last: "no server holds a slot open".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The zone of the Kubernetes node each member's pod runs on.
    pub async fn zones(&self) -> Result<BTreeMap<String, String>> {
        let nodes_api: Api<Node> = Api::all(self.ns.client.clone());
        let mut zones = BTreeMap::new();
        for member in self.nodes().await? {
            let Some(node_name) = member.status.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let node = nodes_api.get(&node_name).await?;
            let zone = node
                .metadata
                .labels
                .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
                .unwrap_or_default();
            zones.insert(member.metadata.name.clone().unwrap_or_default(), zone);
        }
        Ok(zones)
    }

    /// Starts a writer that keeps writing `w:<n>` until stopped.
    pub async fn start_writer(&self) -> Result<Writer> {
        let conn = self.client().await?;
        Ok(Writer::start(conn))
    }
}

/// The pod IP of a member whose ValkeyNode says it is ready.
pub fn ready_pod_ip(node: &ValkeyNode) -> Option<String> {
    node.status
        .as_ref()
        .filter(|s| s.ready)
        .and_then(|s| s.pod_ip.clone())
}

/// One command on the server at `ip` as `user` (the default user when `None`).
pub async fn command_as(
    ip: &str,
    user: Option<&str>,
    password: Option<&str>,
    args: &[&str],
) -> Result<String> {
    let mut info = redis::ConnectionAddr::Tcp(ip.to_owned(), 6379)
        .into_connection_info()
        .map_err(|source| E2eError::Valkey {
            addr: ip.to_owned(),
            source,
        })?;
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some(user) = user {
        settings = settings.set_username(user);
    }
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    info = info.set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(|source| E2eError::Valkey {
        addr: ip.to_owned(),
        source,
    })?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|source| E2eError::Valkey {
            addr: ip.to_owned(),
            source,
        })?;
    crate::valkey_cmd(&mut conn, args).await
}

/// A cluster connection from seed URLs, with the clients' password when there is one.
pub async fn connect(seeds: Vec<String>, password: Option<String>) -> Result<ClusterConnection> {
    open_cluster(cluster_builder(seeds, password)).await
}

/// The keys of `expected` that `conn` does not read back with their value.
pub async fn missing_on<'a>(
    conn: &mut ClusterConnection,
    expected: impl Iterator<Item = (&'a String, &'a String)>,
) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    for (key, value) in expected {
        let got: Option<String> = conn.get(key).await.map_err(|source| E2eError::Valkey {
            addr: key.clone(),
            source,
        })?;
        if got.as_deref() != Some(value.as_str()) {
            missing.push(key.clone());
        }
    }
    Ok(missing)
}

/// The harness's cluster client settings: retries and timeouts, and the password if any.
fn cluster_builder(
    seeds: Vec<String>,
    password: Option<String>,
) -> redis::cluster::ClusterClientBuilder {
    let builder = redis::cluster::ClusterClientBuilder::new(seeds)
        .retries(8)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5));
    match password {
        Some(password) => builder.password(password),
        None => builder,
    }
}

async fn open_cluster(builder: redis::cluster::ClusterClientBuilder) -> Result<ClusterConnection> {
    let client = builder.build().map_err(|source| E2eError::Valkey {
        addr: "cluster".into(),
        source,
    })?;
    client
        .get_async_connection()
        .await
        .map_err(|source| E2eError::Valkey {
            addr: "cluster".into(),
            source,
        })
}

/// A cluster connection over TLS (`rediss://` seeds), the servers' chains verified against `ca`
/// (PEM). Members are reached by pod IP, which no certificate names, so the host name is not
/// checked; the chain is.
pub async fn connect_tls(
    seeds: Vec<String>,
    password: Option<String>,
    ca: Vec<u8>,
) -> Result<ClusterConnection> {
    let builder = cluster_builder(seeds, password)
        .certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        })
        .danger_accept_invalid_hostnames(true);
    open_cluster(builder).await
}

/// A cluster connection over TLS that verifies each server's chain against `ca` (PEM) and its
/// certificate's names against the address the client was sent to: what a client outside the
/// cluster does with external addresses the certificate names.
pub async fn connect_tls_verified(
    seeds: Vec<String>,
    password: Option<String>,
    ca: Vec<u8>,
) -> Result<ClusterConnection> {
    let builder = cluster_builder(seeds, password).certs(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca),
    });
    open_cluster(builder).await
}

/// One command on the server at `ip` over TLS verified against `ca` (PEM), as the clients'
/// default user.
pub async fn tls_command(
    ip: &str,
    ca: &[u8],
    password: Option<&str>,
    args: &[&str],
) -> Result<String> {
    let mut conn = crate::replication::connect_tls(ip, 6379, ca, password).await?;
    crate::valkey_cmd(&mut conn, args).await
}

/// Writes keys one after another; remembers which were acknowledged.
pub struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<String, String>>>,
    failed: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Writer {
    fn start(conn: ClusterConnection) -> Self {
        Self::start_named(conn, "w")
    }

    /// A writer of keys `<prefix>:<n>`, so that two writers of one test never write the same key.
    pub fn start_named(mut conn: ClusterConnection, prefix: &str) -> Self {
        let prefix = prefix.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(BTreeMap::new()));
        let failed = Arc::new(AtomicU64::new(0));
        let (s, a, f) = (stop.clone(), acked.clone(), failed.clone());
        let task = tokio::spawn(async move {
            let mut n: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                let (key, value) = (format!("{prefix}:{n}"), format!("v{n}"));
                let result: redis::RedisResult<()> = conn.set(&key, &value).await;
                match result {
                    Ok(()) => {
                        a.lock().await.insert(key, value);
                    }
                    Err(_) => {
                        f.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Self {
            stop,
            acked,
            failed,
            task,
        }
    }

    /// How many writes were acknowledged so far.
    pub async fn acked_count(&self) -> usize {
        self.acked.lock().await.len()
    }

    /// Stops and returns the acknowledged writes and the number of refused ones.
    pub async fn stop(self) -> (BTreeMap<String, String>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let acked = self.acked.lock().await.clone();
        (acked, self.failed.load(Ordering::Relaxed))
    }
}

/// A writer that counts its acknowledged writes.
pub trait Acknowledged {
    /// How many writes were acknowledged so far.
    fn acknowledged(&self) -> impl std::future::Future<Output = usize>;
}

impl Acknowledged for Writer {
    async fn acknowledged(&self) -> usize {
        self.acked_count().await
    }
}

/// Waits until the writer has had `n` more writes acknowledged (proof the cluster serves).
pub async fn wait_writes(writer: &impl Acknowledged, n: usize, within: Duration) -> Result<()> {
    let start = writer.acknowledged().await;
    wait_until(
        within,
        &format!("{n} more acknowledged writes"),
        || async move {
            let now = writer.acknowledged().await;
            Ok(if now >= start + n {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{} so far", now - start))
            })
        },
    )
    .await
}
