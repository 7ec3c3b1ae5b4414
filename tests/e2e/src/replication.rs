//! A ValkeyReplication under test: its namespace, both controllers, and clients that reach it the
//! way an application does, through its Services: the read/write Service's EndpointSlice names
//! the primary (the client reads the slice as kube-proxy would, so the same tests run on a
//! cluster whose Service addresses the test host cannot reach),
//! and a writer that follows it records every write acknowledged (`OK`) and confirmed by a
//! replica (`WAIT 1`), so a test can prove none was lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use valkey_api::v1alpha1::{
    ReplicationState, ValkeyNode, ValkeyReplication, ValkeyReplicationStatus,
};

use valkey_api::contract::SENTINEL_PORT;

use crate::chaos::writer::Acks;
use crate::operator::{ControllerProcess, install_crds};
use crate::{E2eError, Poll, Result, TestNamespace, check, wait_until};

/// The cluster-controller's flags: this kind only, as an installation for replications runs it.
pub const CLUSTER_CONTROLLER_ARGS: &[&str] = &["--kinds=valkey-replication"];

/// The replication, its namespace and its two controllers (killed when dropped).
pub struct ReplicationFixture {
    pub ns: TestNamespace,
    pub name: String,
    pub node_controller: ControllerProcess,
    pub cluster_controller: ControllerProcess,
    _turn: Option<crate::pool::HeavyTurn>,
}

impl ReplicationFixture {
    /// Creates a namespace, starts both controllers in it and applies the ValkeyReplication
    /// `name` with `spec` (YAML of the spec mapping).
    pub async fn start(prefix: &str, name: &str, spec: &str) -> Result<Self> {
        let turn = crate::pool::heavy().await;
        install_crds().await?;
        let ns = TestNamespace::create(prefix).await?;
        let node_controller = ControllerProcess::start("node-controller", &ns, &[]).await?;
        let cluster_controller =
            ControllerProcess::start("cluster-controller", &ns, CLUSTER_CONTROLLER_ARGS).await?;
        let manifest = format!(
            "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\nmetadata: {{name: {name}}}\nspec: {spec}\n"
        );
        ns.apply(&manifest).await?;
        Ok(Self {
            ns,
            name: name.to_owned(),
            node_controller,
            cluster_controller,
            _turn: turn,
        })
    }

    pub fn api(&self) -> Api<ValkeyReplication> {
        self.ns.api::<ValkeyReplication>()
    }

    pub async fn get(&self) -> Result<ValkeyReplication> {
        Ok(self.api().get(&self.name).await?)
    }

    /// Waits until the replication is Ready for its current generation with every replica in
    /// step.
    pub async fn wait_ready(&self, within: Duration) -> Result<ValkeyReplication> {
        self.wait(within, "Ready", |r| {
            r.status.as_ref().is_some_and(|s| {
                s.state == Some(ReplicationState::Ready)
                    && s.observed_generation == r.metadata.generation
                    && s.ready_replicas == r.spec.replicas
            })
        })
        .await
    }

    /// Waits until the replication satisfies `check`.
    pub async fn wait<F>(&self, within: Duration, what: &str, check: F) -> Result<ValkeyReplication>
    where
        F: Fn(&ValkeyReplication) -> bool,
    {
        let api = self.api();
        let name = self.name.clone();
        wait_until(within, &format!("{name}: {what}"), || {
            let (api, name, check) = (api.clone(), name.clone(), &check);
            async move {
                Ok(match api.get_opt(&name).await? {
                    None => Poll::NotYet("not found".into()),
                    Some(r) if check(&r) => Poll::Ready(r),
                    Some(r) => Poll::NotYet(describe(r.status.as_ref())),
                })
            }
        })
        .await
    }

    /// Waits until every change is done: Ready for the spec, each member it wants (and no other)
    /// ready on its desired revision, the primary the member `spec.primary` names, if any, and
    /// the read/write Service on it alone. The Service is checked in the same poll: a status that
    /// has not yet seen a fault (a pod just deleted) still says Ready, but the Service no longer
    /// names the pod that is gone.
    pub async fn wait_done(&self, within: Duration) -> Result<()> {
        let what = format!(
            "{}: Ready, every member rolled, the Service on the primary",
            self.name
        );
        wait_until(within, &what, || async {
            let replication = self.get().await?;
            let members = self.nodes().await?;
            if !done(&replication, &members) {
                return Ok(Poll::NotYet(describe(replication.status.as_ref())));
            }
            let (primary, ip) = self.primary().await?;
            let named = self.endpoints(&self.name).await?;
            Ok(if named == [ip.clone()] {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("the Service names {named:?}, {primary} is at {ip}"))
            })
        })
        .await
    }

    /// Waits until the read/write Service's EndpointSlice names exactly `ip`.
    pub async fn wait_service_names(&self, ip: &str, within: Duration) -> Result<()> {
        wait_until(
            within,
            &format!("Service {} names {ip}", self.name),
            || async move {
                let ips = self.endpoints(&self.name).await?;
                Ok(if ips == [ip.to_owned()] {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("names {ips:?}"))
                })
            },
        )
        .await
    }

    /// A merge patch of the spec.
    pub async fn patch_spec(&self, spec: serde_json::Value) -> Result<ValkeyReplication> {
        let patch = serde_json::json!({ "spec": spec });
        Ok(self
            .api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    /// The replication's member ValkeyNodes (its Sentinels, which carry its label too, left out).
    pub async fn nodes(&self) -> Result<Vec<ValkeyNode>> {
        let mut nodes = self.all_nodes().await?;
        nodes.retain(|n| n.spec.server != valkey_api::v1alpha1::NodeServer::Sentinel);
        Ok(nodes)
    }

    /// Every ValkeyNode with the replication's label: its members and its Sentinels.
    async fn all_nodes(&self) -> Result<Vec<ValkeyNode>> {
        let list = self
            .ns
            .api::<ValkeyNode>()
            .list(&ListParams::default().labels(&format!("valkey.io/replication={}", self.name)))
            .await?;
        Ok(list.items)
    }

    /// The pod IPs of the replication's Sentinels (with `spec.sentinel`), by node name.
    pub async fn sentinel_ips(&self) -> Result<BTreeMap<String, String>> {
        Ok(self
            .all_nodes()
            .await?
            .into_iter()
            .filter(|n| n.spec.server == valkey_api::v1alpha1::NodeServer::Sentinel)
            .filter_map(|n| Some((n.name_any(), n.status?.pod_ip?)))
            .collect())
    }

    pub async fn node(&self, name: &str) -> Result<ValkeyNode> {
        Ok(self.ns.api::<ValkeyNode>().get(name).await?)
    }

    /// The clients' password (from the Secret the status names), if authentication is on.
    pub async fn password(&self) -> Result<Option<String>> {
        let replication = self.get().await?;
        if !replication.spec.auth.enabled {
            return Ok(None);
        }
        let name = replication
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

    /// The ready addresses of a Service's EndpointSlices: what kube-proxy would route to.
    pub async fn endpoints(&self, service: &str) -> Result<Vec<String>> {
        ready_endpoints(&self.ns.api::<EndpointSlice>(), service).await
    }

    /// A connection to the member at `ip` as the clients' user; with `spec.tls`, over TLS
    /// verified against the replication's CA, as its clients connect.
    pub async fn connect(&self, ip: &str) -> Result<MultiplexedConnection> {
        let password = self.password().await?;
        match self.ca().await? {
            None => connect(ip, password.as_deref()).await,
            Some(ca) => connect_tls(ip, 6379, &ca, password.as_deref()).await,
        }
    }

    /// With `spec.tls`: the CA its servers' certificates chain to (`ca.crt` of the certificate
    /// Secret: the one the spec names, else the one the operator issues, `<name>-tls`).
    pub async fn ca(&self) -> Result<Option<Vec<u8>>> {
        let tls = self.get().await?.spec.tls;
        if !tls.enabled {
            return Ok(None);
        }
        let name = tls
            .certificate_secret
            .unwrap_or_else(|| format!("{}-tls", self.name));
        crate::ca_of(&self.ns, &name).await.map(Some)
    }

    /// One command on the member at `ip`, its reply as text.
    pub async fn command_on(&self, ip: &str, args: &[&str]) -> Result<String> {
        let mut conn = self.connect(ip).await?;
        crate::valkey_cmd(&mut conn, args).await
    }

    /// `role` of INFO replication at `ip` (`master`, `slave`).
    pub async fn role_at(&self, ip: &str) -> Result<String> {
        let info = self.command_on(ip, &["INFO", "replication"]).await?;
        Ok(info
            .lines()
            .find_map(|l| l.trim().strip_prefix("role:").map(str::to_owned))
            .unwrap_or_default())
    }

    /// The pod IP of a member, from its ValkeyNode's status.
    pub async fn ip_of(&self, member: &str) -> Result<String> {
        self.node(member)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| E2eError::Check(format!("{member} has no pod IP")))
    }

    /// The member the status names as the primary, and its pod IP.
    pub async fn primary(&self) -> Result<(String, String)> {
        let name = self
            .get()
            .await?
            .status
            .and_then(|s| s.primary)
            .ok_or_else(|| E2eError::Check("no primary in the status".into()))?;
        let ip = self.ip_of(&name).await?;
        Ok((name, ip))
    }

    /// Waits until [`Self::check_roles`] holds: right after a fault the kind may still say Ready
    /// from before it (a server restarted in place within a pass), so the roles are given the
    /// time of a few passes to be set right, and fail if they are not.
    pub async fn wait_roles(&self, within: Duration) -> Result<()> {
        wait_until(
            within,
            "one primary, every other member its replica",
            || async {
                Ok(match self.check_roles().await {
                    Ok(()) => Poll::Ready(()),
                    Err(e) => Poll::NotYet(e.to_string()),
                })
            },
        )
        .await
    }

    /// Every member on Valkey's word: one primary (the status's), every other its replica.
    pub async fn check_roles(&self) -> Result<()> {
        let (primary, primary_ip) = self.primary().await?;
        for node in self.nodes().await? {
            let name = node.name_any();
            let ip = self.ip_of(&name).await?;
            let role = self.role_at(&ip).await?;
            let want = if name == primary { "master" } else { "slave" };
            check(role == want, format!("{name} is {role}, expected {want}"))?;
            if name != primary {
                let info = self.command_on(&ip, &["INFO", "replication"]).await?;
                check(
                    info.contains(&format!("master_host:{primary_ip}")),
                    format!("{name} does not replicate {primary} at {primary_ip}: {info}"),
                )?;
            }
        }
        Ok(())
    }

    /// The pod of a member.
    pub async fn pod_of(&self, member: &str) -> Result<String> {
        self.node(member)
            .await?
            .status
            .and_then(|s| s.pod_name)
            .ok_or_else(|| E2eError::Check(format!("{member} has no pod")))
    }

    /// Writes `count` keys `<prefix>:<n>` through the read/write Service, each confirmed by
    /// `WAIT 1`; fails unless every one is.
    pub async fn write_confirmed(
        &self,
        prefix: &str,
        count: usize,
    ) -> Result<BTreeMap<String, String>> {
        let ip = self
            .endpoints(&self.name)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| E2eError::Check("the read/write Service has no endpoint".into()))?;
        let mut conn = self.connect(&ip).await?;
        let mut written = BTreeMap::new();
        for n in 0..count {
            let (key, value) = (format!("{prefix}:{n}"), format!("v{n}"));
            match write(&mut conn, &key, &value).await {
                Some(true) => {
                    written.insert(key, value);
                }
                other => {
                    return Err(E2eError::Check(format!(
                        "{key} was not confirmed by a replica: {other:?}"
                    )));
                }
            }
        }
        Ok(written)
    }

    /// The keys of `expected` that the primary (through the read/write Service) does not hold
    /// with their value.
    pub async fn missing<'a>(
        &self,
        expected: impl Iterator<Item = (&'a String, &'a String)>,
    ) -> Result<Vec<String>> {
        let ip = self
            .endpoints(&self.name)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| E2eError::Check("the read/write Service has no endpoint".into()))?;
        let mut conn = self.connect(&ip).await?;
        let mut missing = Vec::new();
        for (key, value) in expected {
            let got: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(|source| E2eError::Valkey {
                    addr: ip.clone(),
                    source,
                })?;
            if got.as_deref() != Some(value.as_str()) {
                missing.push(key.clone());
            }
        }
        Ok(missing)
    }

    /// A writer that finds the primary as the replication's clients do: through the Sentinels
    /// with `spec.sentinel`, else through the read/write Service.
    pub async fn start_writer(&self, prefix: &str) -> Result<ServiceWriter> {
        let slices = self.ns.api::<EndpointSlice>();
        let source = match self.sentinel_master().await? {
            Some(master_name) => PrimarySource::Sentinels {
                slices,
                service: format!("{}-sentinel", self.name),
                master_name,
            },
            None => PrimarySource::Service {
                slices,
                service: self.name.clone(),
            },
        };
        Ok(ServiceWriter::start(prefix, source, self.password().await?))
    }

    /// The master name the Sentinels watch, with `spec.sentinel`.
    pub async fn sentinel_master(&self) -> Result<Option<String>> {
        let sentinel = self.get().await?.spec.sentinel;
        Ok(sentinel
            .enabled
            .then(|| sentinel.master_name.unwrap_or_else(|| self.name.clone())))
    }

    /// With `spec.sentinel`: waits until every Sentinel names the status's primary at its pod
    /// IP, as a Sentinel client asks (`SENTINEL GET-MASTER-ADDR-BY-NAME`); returns at once
    /// without Sentinel.
    pub async fn wait_sentinels_agree(&self, within: Duration) -> Result<()> {
        let Some(master_name) = self.sentinel_master().await? else {
            return Ok(());
        };
        let password = self.password().await?;
        let wanted = usize::try_from(self.get().await?.spec.sentinel.replicas).unwrap_or(0);
        wait_until(
            within,
            "every Sentinel names the status's primary",
            || async {
                let (primary, ip) = self.primary().await?;
                let mut named = BTreeMap::new();
                for (sentinel, sentinel_ip) in self.sentinel_ips().await? {
                    let answer = sentinel_names(&sentinel_ip, password.as_deref(), &master_name)
                        .await
                        .map_or_else(|e| e.to_string(), |(ip, port)| format!("{ip}:{port}"));
                    named.insert(sentinel, answer);
                }
                let want = format!("{ip}:6379");
                Ok(
                    if named.len() == wanted && named.values().all(|n| *n == want) {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(format!("status {primary} at {ip}, Sentinels {named:?}"))
                    },
                )
            },
        )
        .await
    }
}

/// Whether `replication` is done with every change (see [`ReplicationFixture::wait_done`]).
fn done(replication: &ValkeyReplication, members: &[ValkeyNode]) -> bool {
    let spec = &replication.spec;
    let ready = replication.status.as_ref().is_some_and(|s| {
        s.state == Some(ReplicationState::Ready)
            && s.observed_generation == replication.metadata.generation
            && s.ready_replicas == spec.replicas
            && (spec.primary.is_none() || s.primary == spec.primary)
    });
    let wanted = usize::try_from(spec.replicas + 1).unwrap_or(0);
    ready && crate::members_rolled(members, wanted)
}

fn describe(status: Option<&ValkeyReplicationStatus>) -> String {
    match status {
        None => "no status".into(),
        Some(s) => format!(
            "{:?} {} primary={} readyReplicas={}: {}",
            s.state,
            s.reason.as_deref().unwrap_or_default(),
            s.primary.as_deref().unwrap_or_default(),
            s.ready_replicas,
            s.message.as_deref().unwrap_or_default()
        ),
    }
}

/// The ready addresses the EndpointSlices of `service` name.
pub async fn ready_endpoints(api: &Api<EndpointSlice>, service: &str) -> Result<Vec<String>> {
    let slices = api
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await?;
    let mut ips: Vec<String> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    ips.sort();
    Ok(ips)
}

/// A connection to `ip:6379`, as the default user with `password` when there is one.
pub async fn connect(ip: &str, password: Option<&str>) -> Result<MultiplexedConnection> {
    connect_to(ip, 6379, password).await
}

/// A connection over TLS to `ip:port`, verified against `ca`, as the default user with
/// `password` when there is one.
pub async fn connect_tls(
    ip: &str,
    port: u16,
    ca: &[u8],
    password: Option<&str>,
) -> Result<MultiplexedConnection> {
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    let trust = plumbing::valkey_tls::Trust::from_pem(ca.to_vec());
    let client = plumbing::valkey_tls::client(ip, port, Some(&trust), settings);
    open(client, ip, port).await
}

/// A connection to `ip:port` (a server, or a Sentinel on 26379), as the default user with
/// `password` when there is one.
async fn connect_to(ip: &str, port: u16, password: Option<&str>) -> Result<MultiplexedConnection> {
    let url = match password {
        Some(p) => format!("redis://:{p}@{ip}:{port}/"),
        None => format!("redis://{ip}:{port}/"),
    };
    open(redis::Client::open(url), ip, port).await
}

/// Opens `client`'s connection, with the timeouts every test client uses.
async fn open(
    client: redis::RedisResult<redis::Client>,
    ip: &str,
    port: u16,
) -> Result<MultiplexedConnection> {
    let err = |source| E2eError::Valkey {
        addr: format!("{ip}:{port}"),
        source,
    };
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(3)));
    client
        .map_err(err)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(err)
}

/// How long `WAIT` may block for a replica's confirmation.
const WAIT_MS: u64 = 500;

/// One write: `Some(confirmed by a replica)` when the server answered `OK`, `None` otherwise.
async fn write(conn: &mut MultiplexedConnection, key: &str, value: &str) -> Option<bool> {
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(key)
        .arg(value)
        .cmd("WAIT")
        .arg(1)
        .arg(WAIT_MS);
    let replies: Vec<Value> = tokio::time::timeout(
        Duration::from_millis(WAIT_MS + 3_000),
        pipe.query_async(conn),
    )
    .await
    .ok()?
    .ok()?;
    match replies.as_slice() {
        [Value::Okay, Value::Int(replicas)] => Some(*replicas >= 1),
        [Value::Okay, ..] => Some(false),
        _ => None,
    }
}

/// Where a writer learns the primary's address, as the replication's applications do.
#[derive(Clone)]
enum PrimarySource {
    /// The read/write Service: the address its EndpointSlice names.
    Service {
        slices: Api<EndpointSlice>,
        service: String,
    },
    /// The Sentinels behind the Sentinel Service (with `spec.sentinel`), asked
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` one after another, the first answer taken: what
    /// Sentinel clients (valkey-py's `Sentinel`, Jedis' and Lettuce's Sentinel pools) do.
    Sentinels {
        slices: Api<EndpointSlice>,
        service: String,
        master_name: String,
    },
}

impl PrimarySource {
    /// The primary's IP as the source names it now, if it names one.
    async fn primary(&self, password: Option<&str>) -> Option<String> {
        match self {
            PrimarySource::Service { slices, service } => ready_endpoints(slices, service)
                .await
                .ok()?
                .into_iter()
                .next(),
            PrimarySource::Sentinels {
                slices,
                service,
                master_name,
            } => {
                for sentinel in ready_endpoints(slices, service).await.ok()? {
                    if let Ok(named) = sentinel_names(&sentinel, password, master_name).await {
                        return Some(named.0);
                    }
                }
                None
            }
        }
    }
}

/// What the Sentinel at `ip` names as the primary of `master_name`: its IP and port.
pub async fn sentinel_names(
    ip: &str,
    password: Option<&str>,
    master_name: &str,
) -> Result<(String, u16)> {
    let mut conn = connect_to(ip, SENTINEL_PORT, password).await?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master_name)
        .query_async(&mut conn)
        .await
        .map_err(|source| E2eError::Valkey {
            addr: format!("{ip}:{SENTINEL_PORT}"),
            source,
        })?;
    reply.ok_or_else(|| E2eError::Check(format!("the Sentinel at {ip} names no {master_name}")))
}

/// A writer that reaches the primary as an application does, through the read/write Service or
/// (with Sentinel) through the Sentinels: it writes to the address its source names, and after a
/// refused write (a connection lost, a replica's READONLY) asks again.
pub struct ServiceWriter {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Acks>>,
    task: JoinHandle<()>,
}

impl ServiceWriter {
    fn start(prefix: &str, source: PrimarySource, password: Option<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Acks::default()));
        let (s, a, prefix) = (stop.clone(), acks.clone(), prefix.to_owned());
        let task = tokio::spawn(async move {
            let mut conn: Option<MultiplexedConnection> = None;
            let mut n: u64 = 0;
            let mut last_ack = Instant::now();
            while !s.load(Ordering::Relaxed) {
                if conn.is_none() {
                    conn = match source.primary(password.as_deref()).await {
                        Some(ip) => connect(&ip, password.as_deref()).await.ok(),
                        None => None,
                    };
                    if conn.is_none() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                let (key, value) = (format!("{prefix}:{n}"), format!("v{n}"));
                n += 1;
                match write(c, &key, &value).await {
                    Some(replicated) => {
                        let now = Instant::now();
                        let mut acks = a.lock().await;
                        acks.note_gap(now - last_ack);
                        last_ack = now;
                        if replicated {
                            acks.replicated.insert(key.clone(), value.clone());
                        }
                        acks.acked_at.insert(key.clone(), now);
                        acks.plain.insert(key, value);
                    }
                    None => {
                        a.lock().await.refused += 1;
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut acks = a.lock().await;
            acks.note_gap(last_ack.elapsed());
        });
        Self { stop, acks, task }
    }

    /// Writes acknowledged so far.
    pub async fn acked(&self) -> usize {
        self.acks.lock().await.plain.len()
    }

    /// Writes confirmed by a replica so far.
    pub async fn confirmed(&self) -> usize {
        self.acks.lock().await.replicated.len()
    }

    /// Waits until `n` more writes have been confirmed by a replica (proof the replication
    /// serves, through its Service).
    pub async fn wait_confirmed(&self, n: usize, within: Duration) -> Result<()> {
        let from = self.confirmed().await;
        wait_until(
            within,
            &format!("{n} more confirmed writes"),
            || async move {
                let now = self.confirmed().await;
                Ok(if now >= from + n {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{} so far", now - from))
                })
            },
        )
        .await
    }

    /// Stops the writer and returns what it saw.
    pub async fn stop(self) -> Acks {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.acks.lock().await.clone()
    }
}

impl crate::cluster::Acknowledged for ServiceWriter {
    async fn acknowledged(&self) -> usize {
        self.acked().await
    }
}

/// Fails naming the confirmed writes lost, if any; returns how many plain ones were lost.
pub async fn check_losses(
    r: &ReplicationFixture,
    acks: &Acks,
    before: &BTreeMap<String, String>,
) -> Result<usize> {
    let missing = r.missing(before.iter().chain(acks.plain.iter())).await?;
    let confirmed_lost: Vec<&String> = missing
        .iter()
        .filter(|k| acks.replicated.contains_key(*k) || before.contains_key(*k))
        .collect();
    check(
        confirmed_lost.is_empty(),
        format!(
            "{} of {} WAIT-confirmed writes lost: {:?}",
            confirmed_lost.len(),
            acks.replicated.len() + before.len(),
            &confirmed_lost[..confirmed_lost.len().min(10)]
        ),
    )?;
    Ok(missing.len())
}
