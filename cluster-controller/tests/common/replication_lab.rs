//! One test's replication: real servers standing in for the pods of a ValkeyReplication, the
//! members the Kubernetes side would see, and the replication engine driving them. The lab plays
//! the Kubernetes side: it records the primary a promotion chooses before the command runs,
//! restarts a member when `AllowRestart` names it, deletes one when `DeleteMember` does, and
//! says a member is ready when its server answers PING (the node-controller's view).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
use cluster_controller::engine::Member;
use cluster_controller::engine::Pass;
use cluster_controller::replication::engine::sentinel::{Login, Watch};
use cluster_controller::replication::engine::{
    Action, Asked, Decision, Engine, Health, Observation, Spec, engine,
};
use cluster_controller::valkey::value;
use redis::Value;

use super::sentinels::{self, SENTINEL_PASSWORD, SENTINEL_USER, Sentinel};
use super::servers::{
    self, Binary, DEFAULT_PASSWORD, OPERATOR_PASSWORD, OPERATOR_USER, Options, REPLICATION_USER,
    Server,
};

/// What one pass saw and did.
#[derive(Debug)]
pub struct Step {
    pub observed: Observation,
    pub decision: Decision,
    pub health: Health,
}

pub struct ReplicationLab {
    pub binary: Binary,
    pub options: Options,
    root: PathBuf,
    acl: PathBuf,
    subnet: u8,
    next_host: u8,
    pub spec: Spec,
    pub members: Vec<Member>,
    servers: BTreeMap<String, Server>,
    /// The primary the Kubernetes side recorded (the status).
    pub recorded: Option<String>,
    pub engine: Engine<RedisClient>,
    /// A client as the default user, for probes and checks.
    pub probe: RedisClient,
    /// Members whose readiness the lab pretends (a node-controller that still sees a server the
    /// operator cannot reach).
    pretended_ready: BTreeMap<String, bool>,
    /// Every distinct decision, in order, and every forced one.
    pub history: Vec<String>,
    pub forced: Vec<String>,
    /// Every promotion the engine carried out (`REPLICAOF NO ONE`), by member.
    pub promotions: Vec<String>,
    /// With Sentinel on: the Sentinels, by index (`None` once killed for good).
    pub sentinels: Vec<Option<Sentinel>>,
}

impl ReplicationLab {
    /// A lab of `replicas + 1` members on `127.<subnet>.0.x`; every test uses its own subnet.
    pub async fn start(
        name: &str,
        binary: Binary,
        subnet: u8,
        replicas: u32,
        options: Options,
    ) -> Self {
        Self::start_with(name, binary, subnet, replicas, options, None).await
    }

    /// A lab whose servers Sentinel watches: `watch.sentinels` real Sentinels on
    /// `127.<subnet>.2.x`, the servers holding the `sentinel` user (fenced with the replication
    /// user when `options.fenced`), and the engine telling the Sentinels to log in as it.
    pub async fn start_with_sentinels(
        name: &str,
        binary: Binary,
        subnet: u8,
        replicas: u32,
        options: Options,
        watch: Watch,
    ) -> Self {
        Self::start_with(name, binary, subnet, replicas, options, Some(watch)).await
    }

    async fn start_with(
        name: &str,
        binary: Binary,
        subnet: u8,
        replicas: u32,
        options: Options,
        watch: Option<Watch>,
    ) -> Self {
        let root = std::env::temp_dir()
            .join("valkey-engine-tests")
            .join(format!(
                "replication-{name}-{subnet}-{}",
                std::process::id()
            ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let acl = servers::write_acl(&root, options);
        if watch.is_some() {
            let mut text = std::fs::read_to_string(&acl).unwrap_or_default();
            text.push_str(&sentinels::server_acl_line());
            text.push('\n');
            std::fs::write(&acl, text).unwrap_or_else(|e| panic!("{}: {e}", acl.display()));
        }
        let watch = watch.map(|w| Watch {
            login: Some(Login {
                user: SENTINEL_USER.to_owned(),
                password: SENTINEL_PASSWORD.to_owned(),
            }),
            ..w
        });
        let engine = engine(RedisClient::new(RedisClientConfig {
            credentials: Credentials::user(OPERATOR_USER, OPERATOR_PASSWORD),
            trust: None,
            connect_timeout: Duration::from_millis(500),
        }));
        let probe = RedisClient::new(RedisClientConfig {
            credentials: Credentials::user("default", DEFAULT_PASSWORD),
            trust: None,
            connect_timeout: Duration::from_millis(300),
        });
        let spec = Spec {
            replicas,
            preferred: None,
            failover_after: Duration::from_secs(3),
            fence_user: options.fenced.then(|| REPLICATION_USER.to_owned()),
            switchover_timeout: Duration::from_secs(5),
            restored: None,
            sentinel: watch,
        };
        let mut lab = Self {
            binary,
            options,
            root,
            acl,
            subnet,
            next_host: 1,
            spec,
            members: Vec::new(),
            servers: BTreeMap::new(),
            recorded: None,
            engine,
            probe,
            pretended_ready: BTreeMap::new(),
            history: Vec::new(),
            forced: Vec::new(),
            promotions: Vec::new(),
            sentinels: Vec::new(),
        };
        for i in 0..=replicas {
            lab.add_member(i);
        }
        let count = lab.spec.sentinel.as_ref().map_or(0, |w| w.sentinels);
        for i in 0..count {
            let ip = Ipv4Addr::new(127, subnet, 2, u8::try_from(i + 1).unwrap_or(1));
            let dir = lab.root.join(format!("sentinel-{i}"));
            lab.sentinels
                .push(Some(Sentinel::start(&lab.binary, &dir, ip)));
        }
        lab
    }

    /// Sentinel `i`'s name, as the engine knows it.
    pub fn sentinel_name(i: usize) -> String {
        format!("s-{i}")
    }

    /// SIGKILL Sentinel `i`; nobody starts it again.
    pub fn kill_sentinel(&mut self, i: usize) {
        if let Some(mut sentinel) = self.sentinels.get_mut(i).and_then(Option::take) {
            sentinel.kill();
        }
    }

    /// What every live Sentinel tells a client (the default user) the primary is, by index.
    pub async fn sentinels_name(&self) -> Vec<Option<SocketAddr>> {
        let Some(watch) = &self.spec.sentinel else {
            return Vec::new();
        };
        let mut answers = Vec::new();
        for sentinel in self.sentinels.iter().flatten() {
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&watch.master_name);
            let reply = self
                .probe
                .command(sentinel.address(), &cmd, Duration::from_secs(1))
                .await
                .ok();
            let address = reply.as_ref().and_then(value::list).and_then(|parts| {
                let ip: std::net::IpAddr = value::text(parts.first()?)?.parse().ok()?;
                let port: u16 = value::text(parts.get(1)?)?.parse().ok()?;
                Some(SocketAddr::new(ip, port))
            });
            answers.push(address);
        }
        answers
    }

    /// How many replicas each live Sentinel knows of the master name (`num-slaves`).
    pub async fn sentinels_replicas_known(&self) -> Vec<Option<String>> {
        let Some(watch) = &self.spec.sentinel else {
            return Vec::new();
        };
        let mut known = Vec::new();
        for sentinel in self.sentinels.iter().flatten() {
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg("MASTER").arg(&watch.master_name);
            let reply = self
                .engine
                .client()
                .command(sentinel.address(), &cmd, Duration::from_secs(1))
                .await
                .ok();
            known.push(reply.as_ref().and_then(value::pairs).and_then(|pairs| {
                pairs
                    .into_iter()
                    .find(|(k, _)| k == "num-slaves")
                    .and_then(|(_, v)| value::text(v))
            }));
        }
        known
    }

    /// The last lines of every Sentinel's log, for a failing test's message.
    pub fn sentinel_logs(&self) -> String {
        self.sentinels
            .iter()
            .flatten()
            .map(|s| format!("--- {}\n{}", s.ip, s.log_tail(30)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn name(i: u32) -> String {
        format!("r-{i}")
    }

    fn fresh_ip(&mut self) -> Ipv4Addr {
        let ip = Ipv4Addr::new(127, self.subnet, 0, self.next_host);
        self.next_host += 1;
        ip
    }

    /// Creates member `i` and starts its server on a new address.
    pub fn add_member(&mut self, i: u32) {
        let name = Self::name(i);
        let mut member = Member::new(0, i, &name);
        let ip = self.fresh_ip();
        let mut server = Server::new(self.root.join(&name));
        server.start_parked(&self.binary, &self.acl, ip, self.options.persistence);
        member.address = server.address();
        self.members.push(member);
        self.servers.insert(name, server);
    }

    fn server(&mut self, i: u32) -> &mut Server {
        let name = Self::name(i);
        self.servers
            .get_mut(&name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    /// Member `i`'s data folder (its pod's volume).
    #[allow(dead_code)]
    pub fn folder(&self, i: u32) -> std::path::PathBuf {
        let name = Self::name(i);
        self.servers
            .get(&name)
            .map(|s| s.dir.clone())
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    /// Where member `i`'s server listens (whatever the operator is told).
    pub fn address(&self, i: u32) -> SocketAddr {
        self.servers
            .get(&Self::name(i))
            .and_then(Server::address)
            .unwrap_or_else(|| panic!("r-{i} has no address"))
    }

    /// The operator finds member `i` again at its server's address.
    pub fn show_to_operator(&mut self, i: u32) {
        let address = self.address(i);
        if let Some(m) = self.members.iter_mut().find(|m| m.index == i) {
            m.address = Some(address);
        }
        self.pretended_ready.remove(&Self::name(i));
    }

    /// SIGKILL, and the kubelet restarts it in place: same address, same data folder (empty
    /// without persistence).
    pub fn kill_and_restart(&mut self, i: u32) {
        let (binary, acl, persistence) = (
            self.binary.clone(),
            self.acl.clone(),
            self.options.persistence,
        );
        let ip = match self.address(i).ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => panic!("IPv4 only"),
        };
        let server = self.server(i);
        server.kill();
        server.start_parked(&binary, &acl, ip, persistence);
    }

    /// SIGSTOP: the process hangs (a paused VM, a stuck disk); its address stays.
    pub fn pause(&mut self, i: u32) {
        self.server(i).signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&mut self, i: u32) {
        self.server(i).signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// SIGKILL; the member keeps its address and nobody restarts it.
    pub fn kill(&mut self, i: u32) {
        self.server(i).kill();
    }

    /// Starts a stopped member again on a new address (a new pod).
    pub fn start_again(&mut self, i: u32) {
        let ip = self.fresh_ip();
        let (binary, acl, persistence) = (
            self.binary.clone(),
            self.acl.clone(),
            self.options.persistence,
        );
        self.server(i).start_parked(&binary, &acl, ip, persistence);
        let address = SocketAddr::from((ip, servers::PORT));
        if let Some(m) = self.members.iter_mut().find(|m| m.index == i) {
            m.address = Some(address);
        }
    }

    /// The operator loses its way to member `i` (its address now leads nowhere) while the server
    /// runs on and its replicas still reach it; the node-controller cannot reach it either.
    pub fn hide_from_operator(&mut self, i: u32) {
        let nowhere = SocketAddr::from((Ipv4Addr::new(127, self.subnet, 1, 1), servers::PORT));
        if let Some(m) = self.members.iter_mut().find(|m| m.index == i) {
            m.address = Some(nowhere);
        }
        self.pretend_ready(i, false);
    }

    pub fn pretend_ready(&mut self, i: u32, ready: bool) {
        self.pretended_ready.insert(Self::name(i), ready);
    }

    /// The node-controller's view: ready when the server answers PING.
    async fn refresh(&mut self) {
        for i in 0..self.members.len() {
            let name = self.members[i].name.clone();
            let ready = match self.pretended_ready.get(&name) {
                Some(ready) => *ready,
                None => match self.members[i].address {
                    Some(address) => self.ping(address).await,
                    None => false,
                },
            };
            self.members[i].ready = ready;
        }
    }

    async fn ping(&self, address: SocketAddr) -> bool {
        matches!(
            self.probe
                .command(address, &redis::cmd("PING"), Duration::from_millis(300))
                .await,
            Ok(Value::SimpleString(ref s)) if s == "PONG"
        )
    }

    /// One pass: observe, decide, record a chosen primary, act.
    pub async fn pass(&mut self) -> Step {
        self.refresh().await;
        let sentinels: Vec<(String, SocketAddr)> = if self.spec.sentinel.is_some() {
            self.sentinels
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((Self::sentinel_name(i), s.as_ref()?.address())))
                .collect()
        } else {
            Vec::new()
        };
        let asked = Asked {
            spec: self.spec.clone(),
            recorded_primary: self.recorded.clone(),
            sentinels,
        };
        let Pass {
            observation: observed,
            decision,
            health,
            ..
        } = self.engine.pass(&asked, &self.members).await;
        let line = format!("{:?}: {}", decision.reason(), decision.message());
        if self.history.last() != Some(&line) {
            eprintln!("[replication lab] {line}");
            self.history.push(line.clone());
        }
        if let Decision::Act { action, forced, .. } = &decision {
            if *forced {
                self.forced.push(line);
            }
            if let Action::Promote { on } = action {
                self.recorded = Some(on.member.clone());
                self.promotions.push(on.member.clone());
            }
            match action {
                Action::AllowRestart { member } => self.restart(member),
                Action::DeleteMember { member } => self.delete(member),
                // Recorded above, as the Kubernetes side records it, before the command.
                Action::Promote { .. } => {
                    let _ = self.engine.act(&decision).await;
                }
                // The engine's pass carried it out.
                _ => {}
            }
        } else if let Some(primary) = &health.primary {
            // The status follows the primary a switchover moved to.
            self.recorded = Some(primary.clone());
        }
        Step {
            observed,
            decision,
            health,
        }
    }

    fn restart(&mut self, member: &str) {
        let Some(m) = self.members.iter_mut().find(|m| m.name == member) else {
            return;
        };
        m.current_revision = m.desired_revision.clone();
        m.allowed_revision = m.desired_revision.clone();
        let i = m.index;
        self.kill_and_restart(i);
    }

    fn delete(&mut self, member: &str) {
        if let Some(mut server) = self.servers.remove(member) {
            server.stop();
        }
        self.members.retain(|m| m.name != member);
    }

    /// Passes until `done` holds for a pass, or panics after `within` with the history.
    pub async fn run_until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&Step) -> bool,
    ) -> Step {
        let deadline = Instant::now() + within;
        loop {
            let step = self.pass().await;
            if done(&step) {
                return step;
            }
            assert!(
                Instant::now() < deadline,
                "not done within {within:?}; last: {:?}\nhistory:\n{}",
                step.decision,
                self.history.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Passes until steady.
    pub async fn converge(&mut self, within: Duration) -> Health {
        self.run_until(within, |s| s.decision == Decision::Steady(()))
            .await
            .health
    }

    /// One command as the default user on member `i`.
    pub async fn command(&self, i: u32, args: &[&str]) -> Result<Value, String> {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        self.probe
            .command(self.address(i), &cmd, Duration::from_secs(2))
            .await
            .map_err(|e| e.to_string())
    }

    /// `INFO replication`'s `role` of member `i`.
    pub async fn role(&self, i: u32) -> String {
        let info = self.command(i, &["INFO", "replication"]).await.ok();
        let text = info.as_ref().and_then(value::text).unwrap_or_default();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("role:").map(str::to_owned))
            .unwrap_or_default()
    }

    /// Writes `count` keys `<prefix>:<n>` on member `i` (the primary), each confirmed by
    /// `WAIT 1`; returns the keys a replica confirmed.
    pub async fn write_confirmed(&self, i: u32, prefix: &str, count: usize) -> Vec<String> {
        let mut confirmed = Vec::new();
        for n in 0..count {
            let key = format!("{prefix}:{n}");
            if self.command(i, &["SET", &key, "v"]).await.is_err() {
                continue;
            }
            if let Ok(Value::Int(acks)) = self.command(i, &["WAIT", "1", "1000"]).await
                && acks >= 1
            {
                confirmed.push(key);
            }
        }
        confirmed
    }

    /// Waits until member `i` has written and synced its append-only file: with `appendfsync
    /// everysec` Valkey acknowledges a write before its file has it (up to two seconds when a
    /// sync is slow), and a process killed meanwhile comes back without it.
    pub async fn wait_aof_synced(&self, i: u32, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info = self.command(i, &["INFO", "persistence"]).await.ok();
            let text = info.as_ref().and_then(value::text).unwrap_or_default();
            let field = |key: &str| {
                text.lines().find_map(|l| {
                    l.trim()
                        .strip_prefix(key)?
                        .strip_prefix(':')
                        .map(str::to_owned)
                })
            };
            if field("aof_buffer_length").as_deref() == Some("0")
                && field("aof_pending_bio_fsync").as_deref() == Some("0")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "r-{i}'s append-only file is not synced: {text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The keys of `keys` that member `i` does not hold.
    pub async fn missing(&self, i: u32, keys: &[String]) -> Vec<String> {
        let mut missing = Vec::new();
        for key in keys {
            match self.command(i, &["EXISTS", key]).await {
                Ok(Value::Int(1)) => {}
                _ => missing.push(key.clone()),
            }
        }
        missing
    }
}
