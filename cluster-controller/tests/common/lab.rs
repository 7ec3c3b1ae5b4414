//! One test's world: real servers standing in for the pods of a ValkeyCluster, the members
//! the Kubernetes side would see, and the engine driving them. The lab plays the Kubernetes
//! side: it creates members when the spec grows, restarts a member when `AllowRestart` names
//! it and deletes one when `DeleteMember` does.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
use cluster_controller::engine::{
    Action, ActionOutcome, Decision, Desired, Engine, EngineConfig, Health, Member, Pass,
};
use cluster_controller::valkey::cluster_nodes::{self, ClusterNodes};
use cluster_controller::valkey::info;
use cluster_controller::valkey::slot_migrations;
use cluster_controller::valkey::value;
use redis::Value;

use super::servers::{
    self, Binary, DEFAULT_PASSWORD, OPERATOR_PASSWORD, OPERATOR_USER, Options, REPLICATION_USER,
    Server,
};

/// How a restarted member comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    Same,
    New,
}

pub struct Lab {
    pub name: String,
    pub binary: Binary,
    pub options: Options,
    root: PathBuf,
    acl: PathBuf,
    subnet: u8,
    next_host: u8,
    pub desired: Desired,
    pub members: Vec<Member>,
    servers: BTreeMap<String, Server>,
    /// Members waiting to be started again, when, and where.
    pending_starts: Vec<(String, Instant, Address)>,
    last_ips: BTreeMap<String, Ipv4Addr>,
    pub engine: Engine<RedisClient>,
    /// A client as the default user: what a client of the cluster sees.
    pub probe: RedisClient,
    /// How a member released by `AllowRestart` comes back.
    pub restart_address: Address,
    /// The most members of one shard that were down at the same time.
    pub max_down_per_shard: usize,
    /// Every distinct decision, in order.
    pub history: Vec<String>,
    pub passes: usize,
    pub errors: Vec<String>,
    /// Members whose ValkeyNode status the lab pretends, whatever their server does: the
    /// address the status names and whether it says ready (a stale status, or a member the
    /// operator cannot reach while Kubernetes still sees its pod ready).
    pretended: BTreeMap<String, (SocketAddr, bool)>,
    /// Every forced step (the ones the Kubernetes side announces with a Warning), in order.
    pub forced: Vec<String>,
    /// The most sources seen exporting slots (an unfinished atomic migration job) at once.
    pub most_sources_exporting: usize,
}

impl Lab {
    /// A lab whose servers bind `127.0.<subnet>.x`; every test uses its own subnet so tests
    /// run in parallel.
    pub fn new(name: &str, binary: Binary, subnet: u8) -> Self {
        Self::with_options(name, binary, subnet, Options::default())
    }

    /// A lab whose servers run as `options` say; a fenced lab's engine admits replication.
    pub fn with_options(name: &str, binary: Binary, subnet: u8, options: Options) -> Self {
        let root = std::env::temp_dir()
            .join("valkey-engine-tests")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let acl = servers::write_acl(&root, options);
        let credentials = Credentials::user(OPERATOR_USER, OPERATOR_PASSWORD);
        let mut config = EngineConfig::for_credentials(&credentials);
        config.execute.pass_budget = Duration::from_secs(2);
        config.fence_user = options.fenced.then(|| REPLICATION_USER.to_owned());
        let engine = Engine::new(
            RedisClient::new(RedisClientConfig {
                credentials,
                trust: None,
                connect_timeout: Duration::from_millis(500),
            }),
            config,
        );
        // `AUTH default <password>` works with and without a password on the default user (the
        // one-argument form is refused by a user without one).
        let probe = RedisClient::new(RedisClientConfig {
            credentials: Credentials::user("default", DEFAULT_PASSWORD),
            trust: None,
            connect_timeout: Duration::from_millis(300),
        });
        Self {
            name: name.to_owned(),
            binary,
            options,
            root,
            acl,
            subnet,
            next_host: 1,
            desired: Desired::new(0, 0),
            members: Vec::new(),
            servers: BTreeMap::new(),
            pending_starts: Vec::new(),
            last_ips: BTreeMap::new(),
            engine,
            probe,
            restart_address: Address::Same,
            max_down_per_shard: 0,
            history: Vec::new(),
            passes: 0,
            errors: Vec::new(),
            pretended: BTreeMap::new(),
            forced: Vec::new(),
            most_sources_exporting: 0,
        }
    }

    fn fresh_ip(&mut self) -> Ipv4Addr {
        assert!(self.next_host < 255, "{}: out of addresses", self.name);
        let ip = Ipv4Addr::new(127, 0, self.subnet, self.next_host);
        self.next_host += 1;
        ip
    }

    /// Changes the spec; creates (and starts) the members it adds, as the Kubernetes side
    /// would. Members it drops stay until the engine deletes them.
    pub fn scale(&mut self, desired: Desired) {
        let (formed, held_keys) = (self.desired.formed, self.desired.held_keys);
        self.desired = Desired {
            persistent: self.options.persistence,
            formed,
            held_keys,
            ..desired
        };
        let wanted: Vec<(u32, u32)> = self.desired.slots_of_members().collect();
        for (shard, index) in wanted {
            if self
                .members
                .iter()
                .any(|m| m.shard == shard && m.index == index)
            {
                continue;
            }
            let name = format!("c-{shard}-{index}");
            let mut member = Member::new(shard, index, name.clone());
            member.current_revision = Some("r1".into());
            member.desired_revision = Some("r1".into());
            member.allowed_revision = Some("r1".into());
            self.members.push(member);
            let mut server = Server::new(self.root.join(&name));
            let ip = self.fresh_ip();
            server.start(&self.binary, &self.acl, ip, self.options.persistence);
            self.last_ips.insert(name.clone(), ip);
            self.servers.insert(name, server);
        }
    }

    pub fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    fn member_mut(&mut self, name: &str) -> &mut Member {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    fn server(&mut self, name: &str) -> &mut Server {
        self.servers
            .get_mut(name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    /// kill -9, as a crashed pod.
    pub fn kill(&mut self, name: &str) {
        self.server(name).kill();
        self.probe.disconnect_all();
        let member = self.member_mut(name);
        member.address = None;
        member.ready = false;
    }

    /// SIGTERM, as a deleted pod (data flushed).
    pub fn stop(&mut self, name: &str) {
        self.server(name).stop();
        self.probe.disconnect_all();
        let member = self.member_mut(name);
        member.address = None;
        member.ready = false;
    }

    /// Starts a stopped member again, from its own folder.
    pub fn start(&mut self, name: &str, address: Address) {
        let ip = match (address, self.servers[name].ip) {
            (Address::Same, Some(ip)) => ip,
            (Address::Same, None) => self
                .last_ip(name)
                .unwrap_or_else(|| panic!("{name} has no previous address")),
            (Address::New, _) => self.fresh_ip(),
        };
        let (binary, acl) = (self.binary.clone(), self.acl.clone());
        let persistence = self.options.persistence;
        self.server(name).start(&binary, &acl, ip, persistence);
        self.last_ips.insert(name.to_owned(), ip);
    }

    /// kill -9 and start again at once at the same address from the same folder: the same
    /// node id (nodes.conf), and without persistence no data.
    pub fn restart_in_place(&mut self, name: &str) {
        self.server(name).kill();
        self.probe.disconnect_all();
        self.start(name, Address::Same);
    }

    /// From now on the member's ValkeyNode status says `address` and `ready`, whatever its
    /// server does.
    pub fn pretend_status(&mut self, name: &str, address: SocketAddr, ready: bool) {
        self.pretended.insert(name.to_owned(), (address, ready));
    }

    /// The operator can no longer reach the member, while Kubernetes still sees its pod ready:
    /// its status names an address where nothing answers (for the engine only; clients and
    /// other servers still reach it).
    pub fn hide_from_operator(&mut self, name: &str) {
        let ip = self
            .last_ip(name)
            .unwrap_or_else(|| panic!("{name} never ran"));
        self.pretend_status(name, SocketAddr::from((ip, 1)), true);
    }

    /// The member's status follows its server again.
    pub fn stop_pretending(&mut self, name: &str) {
        self.pretended.remove(name);
    }

    /// The address `name` last ran at.
    pub fn ip_of(&self, name: &str) -> Ipv4Addr {
        self.last_ip(name)
            .unwrap_or_else(|| panic!("{name} never ran"))
    }

    /// The folder and ACL file of this lab, for servers a test runs beside the members.
    pub fn paths(&self) -> (PathBuf, PathBuf) {
        (self.root.clone(), self.acl.clone())
    }

    fn last_ip(&self, name: &str) -> Option<Ipv4Addr> {
        self.last_ips.get(name).copied()
    }

    /// Deletes a stopped member's data: it comes back as a new node.
    pub fn wipe(&mut self, name: &str) {
        self.server(name).wipe();
    }

    /// Starts members whose restart is due; updates every member's address and readiness.
    pub async fn refresh(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, Address)> = self
            .pending_starts
            .iter()
            .filter(|(_, at, _)| *at <= now)
            .map(|(name, _, address)| (name.clone(), *address))
            .collect();
        self.pending_starts.retain(|(_, at, _)| *at > now);
        for (name, address) in due {
            self.start(&name, address);
            let member = self.member_mut(&name);
            member.current_revision = member.desired_revision.clone();
        }
        let names: Vec<String> = self.members.iter().map(|m| m.name.clone()).collect();
        for name in names {
            let (running, address) = {
                let server = self.server(&name);
                (server.running(), server.address())
            };
            let ready = match (running, address) {
                (true, Some(addr)) => self.ping(addr).await,
                _ => false,
            };
            let pretended = self.pretended.get(&name).copied();
            let member = self.member_mut(&name);
            member.address = address.filter(|_| running);
            member.ready = ready;
            if let Some((address, ready)) = pretended {
                member.address = Some(address);
                member.ready = ready;
            }
        }
        let mut down: BTreeMap<u32, usize> = BTreeMap::new();
        for member in &self.members {
            if !member.ready {
                *down.entry(member.shard).or_default() += 1;
            }
        }
        let worst = down.values().copied().max().unwrap_or(0);
        self.max_down_per_shard = self.max_down_per_shard.max(worst);
    }

    /// Readiness as the node-controller sees it: PING as a user that is never fenced.
    async fn ping(&self, addr: SocketAddr) -> bool {
        let reply = self
            .engine
            .client()
            .command(addr, &redis::cmd("PING"), Duration::from_millis(300))
            .await;
        matches!(reply.as_ref().map(value::text), Ok(Some(pong)) if pong == "PONG")
    }

    /// One engine pass; carries out the Kubernetes actions it names.
    pub async fn pass(&mut self) -> Pass {
        self.refresh().await;
        let pass = self.engine.pass(&self.desired, &self.members).await;
        self.passes += 1;
        let exporting = pass
            .observation
            .members
            .values()
            .filter_map(|reach| reach.state())
            .filter(|state| {
                state.migrations().iter().any(|job| {
                    job.operation == slot_migrations::Operation::Export && !job.state.is_finished()
                })
            })
            .count();
        self.most_sources_exporting = self.most_sources_exporting.max(exporting);
        // The steps a pass took before its last decision, then that decision.
        let decisions = pass
            .earlier
            .iter()
            .map(|step| &step.decision)
            .chain(std::iter::once(&pass.decision));
        for decision in decisions {
            let line = decision.to_string();
            if decision.is_forced() {
                eprintln!("[{}] forced: {line}", self.name);
                self.forced.push(line.clone());
            }
            if self.history.last() != Some(&line) {
                eprintln!("[{}] {line}", self.name);
                self.history.push(line);
            }
        }
        match &pass.outcome {
            Some(Err(e)) => {
                eprintln!("[{}]   error: {e}", self.name);
                self.errors.push(e.to_string());
            }
            Some(Ok(ActionOutcome::Blocked(why))) => {
                panic!("[{}] migration blocked: {why}", self.name)
            }
            Some(Ok(ActionOutcome::Progress(what))) => eprintln!("[{}]   {what}", self.name),
            _ => {}
        }
        if let Decision::Act { action, .. } = &pass.decision {
            self.kubernetes(action);
        }
        // What the Kubernetes side keeps between passes: each member's node, and whether the
        // cluster ever served slots.
        for member in &mut self.members {
            member.node_id = pass.bindings.get(&member.name).cloned();
        }
        if pass.health.as_ref().is_some_and(|h| h.shards > 0) {
            self.desired.formed = true;
        }
        if pass
            .observation
            .members
            .values()
            .filter_map(|reach| reach.state())
            .any(|state| state.keys() > 0)
        {
            self.desired.held_keys = true;
        }
        pass
    }

    /// True when some decision so far mentions `text`.
    pub fn saw_text(&self, text: &str) -> bool {
        self.history.iter().any(|line| line.contains(text))
    }

    fn kubernetes(&mut self, action: &Action) {
        match action {
            Action::AllowRestart { member } => {
                let name = member.clone();
                let m = self.member_mut(&name);
                m.allowed_revision = m.desired_revision.clone();
                self.stop(&name);
                let address = self.restart_address;
                self.pending_starts.push((
                    name,
                    Instant::now() + Duration::from_millis(200),
                    address,
                ));
            }
            Action::DeleteMember { member } => {
                if let Some(mut server) = self.servers.remove(member) {
                    server.kill();
                }
                self.members.retain(|m| &m.name != member);
            }
            _ => {}
        }
    }

    /// Passes until the engine reports a steady cluster; panics with the history on a block
    /// or at the deadline.
    pub async fn converge(&mut self, within: Duration) -> Health {
        let deadline = Instant::now() + within;
        loop {
            let pass = self.pass().await;
            match pass.decision {
                Decision::Steady(health) => return health,
                Decision::Blocked { reason, message } => {
                    panic!("[{}] blocked: {reason}: {message}", self.name)
                }
                Decision::Act { .. } => {}
                Decision::Wait { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            if Instant::now() > deadline {
                self.dump();
                panic!(
                    "[{}] not steady within {within:?}; last: {}",
                    self.name,
                    self.history.last().map_or("", String::as_str)
                );
            }
        }
    }

    /// Passes until `done` holds for a pass; panics at the deadline.
    pub async fn run_until(&mut self, within: Duration, mut done: impl FnMut(&Pass) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            let pass = self.pass().await;
            if done(&pass) {
                return;
            }
            if let Decision::Blocked { reason, message } = &pass.decision {
                panic!("[{}] blocked: {reason}: {message}", self.name);
            }
            if Instant::now() > deadline {
                self.dump();
                panic!(
                    "[{}] condition not reached within {within:?}; last: {}",
                    self.name,
                    self.history.last().map_or("", String::as_str)
                );
            }
            if !matches!(pass.decision, Decision::Act { .. }) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Passes for `window` (a fault's duration), a pass every 200 ms or so; returns the
    /// decisions taken meanwhile.
    pub async fn run_for(&mut self, window: Duration) -> Vec<Decision> {
        let until = Instant::now() + window;
        let mut seen = Vec::new();
        while Instant::now() < until {
            let pass = self.pass().await;
            seen.extend(pass.earlier.into_iter().map(|step| step.decision));
            seen.push(pass.decision);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    }

    /// True when some decision so far had `reason`.
    pub fn saw(&self, reason: &str) -> bool {
        self.history
            .iter()
            .any(|line| line.starts_with(&format!("{reason}:")))
    }

    pub async fn node_id(&self, name: &str) -> String {
        let reply = self.command(name, &["CLUSTER", "MYID"]).await;
        value::text(&reply).unwrap_or_else(|| panic!("CLUSTER MYID of {name}"))
    }

    /// Waits until every replica has processed everything its primary has sent, so a primary
    /// can be killed without losing what was written before.
    pub async fn wait_replicas_caught_up(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let mut behind = Vec::new();
            for member in &self.members {
                let info = self.command(&member.name, &["INFO", "replication"]).await;
                let info = info::parse(&value::text(&info).unwrap_or_default()).expect("INFO");
                if let Ok(Some(offset)) = info.slave_repl_offset() {
                    let primary = info.get("master_host").unwrap_or_default().to_owned();
                    let primary_offset = self
                        .members
                        .iter()
                        .find(|m| m.address.is_some_and(|a| a.ip().to_string() == primary))
                        .map(|m| m.name.clone());
                    if let Some(primary) = primary_offset {
                        let p = self.command(&primary, &["INFO", "replication"]).await;
                        let p = info::parse(&value::text(&p).unwrap_or_default()).expect("INFO");
                        if p.master_repl_offset().unwrap_or(0) > offset {
                            behind.push(member.name.clone());
                        }
                    }
                }
            }
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] replicas still behind: {behind:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Prints every live node's view, to explain a failure.
    pub fn dump(&self) {
        for (name, server) in &self.servers {
            eprintln!(
                "--- {name} ({:?}) log tail:\n{}",
                server.ip,
                server.log_tail(15)
            );
        }
    }

    /// The addresses of the members that are up.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.members.iter().filter_map(|m| m.address).collect()
    }

    pub async fn command(&self, name: &str, args: &[&str]) -> Value {
        let addr = self
            .member(name)
            .address
            .unwrap_or_else(|| panic!("{name} is down"));
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        self.probe
            .command(addr, &cmd, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{args:?} on {name}: {e}"))
    }

    /// A command sent as the operator (a user with every right here), whatever the clients'
    /// users may do at that moment.
    pub async fn command_as_operator(&self, name: &str, args: &[&str]) -> Value {
        self.try_with(self.engine.client(), name, args)
            .await
            .unwrap_or_else(|e| panic!("{args:?} on {name} as the operator: {e}"))
    }

    /// [`Lab::command_as_operator`], with an error as a value (`Value::Nil`).
    pub async fn try_as_operator(&self, name: &str, args: &[&str]) -> Value {
        self.try_with(self.engine.client(), name, args)
            .await
            .unwrap_or(Value::Nil)
    }

    /// A command as a client (the default user), with Valkey's refusal as an error.
    pub async fn try_command(&self, name: &str, args: &[&str]) -> Result<Value, String> {
        self.try_with(&self.probe, name, args).await
    }

    async fn try_with(
        &self,
        client: &RedisClient,
        name: &str,
        args: &[&str],
    ) -> Result<Value, String> {
        let addr = self
            .member(name)
            .address
            .ok_or_else(|| format!("{name} is down"))?;
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        client
            .command(addr, &cmd, Duration::from_secs(5))
            .await
            .map_err(|e| e.to_string())
    }

    /// A hash tag whose keys land in a slot `name` serves, found with CLUSTER KEYSLOT.
    pub async fn tag_served_by(&self, name: &str) -> String {
        let nodes = self.cluster_nodes(name).await;
        let slots = nodes.myself().expect("myself").slots.clone();
        for n in 0..10_000 {
            let tag = format!("t{n}");
            let reply = self.command(name, &["CLUSTER", "KEYSLOT", &tag]).await;
            let slot = value::int(&reply).unwrap_or(-1);
            if u16::try_from(slot).is_ok_and(|s| slots.contains(s)) {
                return tag;
            }
        }
        panic!("no hash tag of {name}'s slots found")
    }

    pub async fn cluster_nodes(&self, name: &str) -> ClusterNodes {
        let reply = self.command(name, &["CLUSTER", "NODES"]).await;
        cluster_nodes::parse(&value::text(&reply).unwrap_or_default())
            .unwrap_or_else(|e| panic!("CLUSTER NODES of {name}: {e}"))
    }

    pub async fn cluster_info_field(&self, name: &str, field: &str) -> String {
        let reply = self.command(name, &["CLUSTER", "INFO"]).await;
        let text = value::text(&reply).unwrap_or_default();
        text.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(&format!("{field}:"))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("{name}: no {field} in CLUSTER INFO"))
    }

    /// No slot is left importing or migrating, and no atomic migration job is unfinished.
    pub async fn assert_no_open_slots(&self) {
        for member in self.members.iter().filter(|m| m.address.is_some()) {
            let nodes = self.cluster_nodes(&member.name).await;
            let me = nodes.myself().expect("myself");
            if !(me.migrating.is_empty() && me.importing.is_empty()) {
                self.dump();
                panic!(
                    "[{}] {} ({}) has open slots: migrating {:?} importing {:?}\n{nodes:?}",
                    self.name,
                    member.name,
                    if me.is_primary() {
                        "primary"
                    } else {
                        "replica"
                    },
                    me.migrating,
                    me.importing
                );
            }
            let version = self.command(&member.name, &["INFO", "server"]).await;
            if value::text(&version).is_some_and(|t| t.contains("valkey_version:9")) {
                let jobs = slot_migrations::parse(
                    &self
                        .command(&member.name, &["CLUSTER", "GETSLOTMIGRATIONS"])
                        .await,
                )
                .expect("GETSLOTMIGRATIONS");
                assert!(
                    jobs.iter().all(|j| j.state.is_finished()),
                    "{} has unfinished jobs: {jobs:?}",
                    member.name
                );
            }
        }
    }

    /// Every shard has one primary serving slots, and every other member replicates the
    /// primary of its own shard.
    pub async fn assert_topology(&self) {
        let mut ids = BTreeMap::new();
        let mut mes = Vec::new();
        for member in &self.members {
            let nodes = self.cluster_nodes(&member.name).await;
            let me = nodes.myself().expect("myself").clone();
            ids.insert(me.id.clone(), member.clone());
            mes.push((member.clone(), me));
        }
        let mut primaries = 0;
        for (member, me) in &mes {
            if me.is_primary() {
                assert!(
                    !me.slots.is_empty(),
                    "{} is a primary without slots",
                    member.name
                );
                primaries += 1;
                continue;
            }
            let primary = me.primary_id.as_ref().expect("a replica has a primary");
            let primary_member = ids
                .get(primary)
                .unwrap_or_else(|| panic!("{} replicates a node of no member", member.name));
            assert_eq!(
                primary_member.shard, member.shard,
                "{} replicates {} of another shard",
                member.name, primary_member.name
            );
        }
        assert_eq!(primaries, self.desired.shards as usize);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for server in self.servers.values_mut() {
            server.kill();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
