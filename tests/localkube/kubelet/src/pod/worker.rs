//! The worker of one pod: sandbox, volumes, containers, probes, status, deletion.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::mpsc;

use super::container::{Process, Runtime};
use super::setup::{self, ConfigError};
use super::status::{self, PodView, Terminated};
use super::{Ctx, Msg, Slot};
use crate::config::NodeInfo;
use crate::images;
use crate::network::{self, PodNetNames};
use crate::node_faults::NodeFault;
use crate::probe::{self, Kind, Tracker};
use crate::sandbox::{self, plan};
use crate::volumes::{self, VolumeContext};

const TICK: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_secs(5);
const VOLUME_REFRESH: Duration = Duration::from_secs(60);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

struct Net {
    names: PodNetNames,
    ip: Ipv4Addr,
}

pub struct Worker {
    ctx: Arc<Ctx>,
    pod: Pod,
    node: NodeInfo,
    uid: String,
    tx: mpsc::UnboundedSender<Msg>,
    rx: mpsc::UnboundedReceiver<Msg>,
    pod_dir: PathBuf,
    log_dir: PathBuf,
    net: Option<Net>,
    net_error: Option<String>,
    net_retry: Option<Instant>,
    /// The IP the API already shows for the pod, held from the start so that a new pod cannot
    /// take it while this one is being set up again (after a kubelet restart).
    reserved_ip: Option<Ipv4Addr>,
    volumes: Option<BTreeMap<String, PathBuf>>,
    volume_error: Option<String>,
    volumes_refreshed: Option<Instant>,
    tokens: std::sync::Mutex<BTreeMap<String, (Vec<u8>, Instant)>>,
    init: Vec<Runtime>,
    main: Vec<Runtime>,
    start_time: Timestamp,
    generation: u64,
    written: Option<PodStatus>,
    written_json: Option<serde_json::Value>,
    /// The resource version our last status write produced.
    written_version: Option<u64>,
    finished: bool,
    /// The pod left the API while its node was stopped: acted on once the node is back.
    gone_while_stopped: bool,
}

fn previous(statuses: &Option<Vec<ContainerStatus>>, name: &str) -> Option<ContainerStatus> {
    statuses.iter().flatten().find(|s| s.name == name).cloned()
}

/// The last 80 lines of a log, at most its last 2,048 bytes: what a kubelet takes for
/// FallbackToLogsOnError.
fn log_tail(path: &std::path::Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let tail = &bytes[bytes.len().saturating_sub(2048)..];
    let text = String::from_utf8_lossy(tail);
    let lines: Vec<&str> = text.lines().collect();
    let message = lines[lines.len().saturating_sub(80)..].join("\n");
    (!message.trim().is_empty()).then_some(message)
}

fn terminated_from(s: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Terminated {
    Terminated {
        exit_code: s.exit_code,
        signal: s.signal,
        reason: s.reason.clone().unwrap_or_else(|| "Error".into()),
        message: s.message.clone(),
        started_at: s
            .started_at
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        finished_at: s
            .finished_at
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        container_id: s.container_id.clone().unwrap_or_default(),
    }
}

/// A runtime continuing what the API says about the container (after a kubelet restart).
fn resume(mut rt: Runtime, prev: Option<ContainerStatus>, now: Timestamp) -> Runtime {
    let Some(prev) = prev else {
        return rt;
    };
    rt.restart_count = prev.restart_count;
    let state = prev.state.unwrap_or_default();
    let last = prev.last_state.and_then(|s| s.terminated);
    if let Some(t) = state.terminated {
        rt.terminated = Some(terminated_from(&t));
        rt.ever_started = true;
    } else if state.running.is_some() {
        rt.terminated = Some(Terminated {
            exit_code: 255,
            signal: None,
            reason: "Unknown".into(),
            message: Some("the container was lost while the kubelet was not running".into()),
            started_at: state
                .running
                .and_then(|r| r.started_at)
                .map(|t| t.0)
                .unwrap_or(Timestamp::UNIX_EPOCH),
            finished_at: now,
            container_id: prev.container_id.unwrap_or_default(),
        });
        rt.ever_started = true;
    } else if let Some(t) = last {
        rt.terminated = Some(terminated_from(&t));
        rt.ever_started = true;
    }
    rt
}

impl Worker {
    pub fn new(ctx: Arc<Ctx>, pod: Pod, node: NodeInfo) -> (Self, mpsc::UnboundedSender<Msg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let prev = pod.status.clone().unwrap_or_default();
        let now = status::now();
        let cap = ctx.settings.backoff_cap;
        let reserved_ip = prev
            .pod_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .and_then(|ip| match ctx.allocate_ip(&node.name, Some(ip)) {
                Some(got) if got == ip => Some(ip),
                Some(other) => {
                    ctx.release_ip(&node.name, other);
                    None
                }
                None => None,
            });
        let init = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let p = previous(&prev.init_container_statuses, &c.name);
                resume(Runtime::new(c, cap), p, now)
            })
            .collect();
        let main = spec
            .containers
            .into_iter()
            .map(|c| {
                let p = previous(&prev.container_statuses, &c.name);
                resume(Runtime::new(c, cap), p, now)
            })
            .collect();
        let worker = Self {
            pod_dir: ctx.settings.pods_dir().join(&uid),
            log_dir: ctx.settings.logs_dir().join(format!("{ns}_{name}_{uid}")),
            start_time: prev.start_time.map(|t| t.0).unwrap_or(now),
            ctx,
            pod,
            node,
            uid,
            tx: tx.clone(),
            rx,
            net: None,
            net_error: None,
            net_retry: None,
            reserved_ip,
            volumes: None,
            volume_error: None,
            volumes_refreshed: None,
            tokens: std::sync::Mutex::new(BTreeMap::new()),
            init,
            main,
            generation: 0,
            written: None,
            written_json: None,
            written_version: None,
            finished: false,
            gone_while_stopped: false,
        };
        (worker, tx)
    }

    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.pod.metadata.namespace.as_deref().unwrap_or_default(),
            self.pod.metadata.name.as_deref().unwrap_or_default()
        )
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or(self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    pub async fn run(mut self) {
        while !self.finished {
            self.sync().await;
            if self.finished {
                break;
            }
            let msg = tokio::select! {
                m = self.rx.recv() => m,
                _ = tokio::time::sleep(TICK) => continue,
            };
            let Some(msg) = msg else { break };
            self.handle(msg).await;
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg).await;
                if self.finished {
                    break;
                }
            }
        }
    }

    async fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Pod(pod) => self.pod = *pod,
            Msg::Exited { slot, status } => self.on_exit(slot, status),
            // A stopped node's kubelet learns nothing from probes.
            Msg::Probe { .. } if self.node_stopped().is_some() => {}
            Msg::Probe {
                slot,
                kind,
                ok,
                message,
            } => self.on_probe(slot, kind, ok, message),
            Msg::Gone if self.node_stopped().is_some() => self.gone_while_stopped = true,
            Msg::Gone => self.forget().await,
            Msg::Shutdown => {
                self.stop_all(self.grace().min(SHUTDOWN_GRACE)).await;
                self.cleanup(false).await;
                self.finished = true;
            }
        }
    }

    /// Stops the containers and removes the pod's traces: the pod is gone from the API.
    async fn forget(&mut self) {
        self.stop_all(Duration::from_secs(2)).await;
        self.cleanup(true).await;
        self.finished = true;
    }

    fn node_stopped(&self) -> Option<NodeFault> {
        self.ctx.node_fault(&self.node.name)
    }

    fn runtime(&mut self, slot: Slot) -> Option<&mut Runtime> {
        let list = if slot.init {
            &mut self.init
        } else {
            &mut self.main
        };
        list.get_mut(slot.index).filter(|rt| {
            rt.process
                .as_ref()
                .is_some_and(|p| p.generation == slot.generation)
        })
    }

    fn on_exit(&mut self, slot: Slot, exit: std::process::ExitStatus) {
        let pid_file = self.pod_dir.join("pids");
        let log_dir = self.log_dir.clone();
        if let Some(rt) = self.runtime(slot) {
            let name = rt.name().to_string();
            if let Some(t) = rt.exited(exit, status::now()) {
                tracing::info!(container = %name, exit_code = t.exit_code, "container exited");
                // terminationMessagePolicy FallbackToLogsOnError: a failed container's message is
                // the tail of its log, as a kubelet reports it (no termination message file here).
                let fallback =
                    rt.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
                if t.exit_code != 0 && fallback {
                    let log = log_dir
                        .join(&name)
                        .join(format!("{}.log", rt.restart_count));
                    if let (Some(message), Some(terminated)) =
                        (log_tail(&log), rt.terminated.as_mut())
                    {
                        terminated.message = Some(message);
                    }
                }
            }
            let _ = std::fs::remove_file(pid_file.join(format!("{name}.pid")));
        }
    }

    fn on_probe(&mut self, slot: Slot, kind: Kind, ok: bool, message: Option<String>) {
        let key = self.key();
        let grace_default = self.grace();
        let Some(rt) = self.runtime(slot) else { return };
        let name = rt.name().to_string();
        let Some(process) = rt.process.as_mut() else {
            return;
        };
        let Some(tracker) = process.probes.iter_mut().find(|p| p.kind == kind) else {
            return;
        };
        if !ok && message != tracker.last_message {
            // Logged when the failure changes, not at every period.
            tracing::info!(pod = %key, container = %name, ?kind, message = ?message, "probe failed");
        }
        let transition = tracker.record(ok, message.clone(), Instant::now());
        if transition == probe::Transition::BecameFailing
            && matches!(kind, Kind::Liveness | Kind::Startup)
        {
            tracing::info!(pod = %key, container = %name, ?kind, message = ?message, "probe failed, restarting container");
            process.stop(grace_default);
        } else if transition != probe::Transition::None {
            tracing::info!(pod = %key, container = %name, ?kind, ?transition, "probe changed");
        }
    }

    async fn sync(&mut self) {
        match self.node_stopped() {
            // Nothing is started, reported or deleted on a stopped node; a crashed one's
            // processes die (SIGKILL, again at each pass until they are gone).
            Some(NodeFault::Crashed) => {
                for rt in self.init.iter().chain(self.main.iter()) {
                    if let Some(p) = &rt.process {
                        p.kill();
                    }
                }
                return;
            }
            Some(NodeFault::Partitioned) => return,
            None => {}
        }
        if self.gone_while_stopped {
            self.forget().await;
            return;
        }
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.delete().await;
            return;
        }
        if self.net.is_none() && self.net_retry.is_none_or(|at| at <= Instant::now()) {
            self.setup_network().await;
        }
        if self.net.is_some() {
            self.prepare_volumes().await;
        }
        if self.net.is_some() && self.volumes.is_some() {
            self.run_containers().await;
            self.schedule_probes();
        }
        self.write_status().await;
    }

    async fn setup_network(&mut self) {
        let reserved = self.reserved_ip.take();
        let Some(ip) = reserved.or_else(|| self.ctx.allocate_ip(&self.node.name, None)) else {
            self.net_error = Some(format!("no free pod IP on node {}", self.node.name));
            self.net_retry = Some(Instant::now() + RETRY);
            return;
        };
        let names = PodNetNames::for_uid(&self.uid);
        let etc = self.pod_dir.join("etc");
        let result = async {
            let settings = &self.ctx.settings;
            network::setup(
                &names,
                &settings.bridge,
                ip,
                self.ctx.gateway,
                &settings.pod_routes,
            )
            .await
            .map_err(|e| e.to_string())?;
            setup::write_etc(&etc, &self.pod, ip, settings)
                .map_err(|e| format!("writing /etc files: {e}"))
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(pod = %self.key(), uid = %self.uid, %ip, reserved = reserved.is_some(), "pod network");
                self.net = Some(Net { names, ip });
                self.net_error = None;
            }
            Err(e) => {
                tracing::warn!(pod = %self.key(), error = %e, "pod network");
                network::teardown(&names).await;
                self.ctx.release_ip(&self.node.name, ip);
                self.net_error = Some(format!("Failed to create pod sandbox: {e}"));
                self.net_retry = Some(Instant::now() + RETRY);
            }
        }
    }

    async fn prepare_volumes(&mut self) {
        let due = match self.volumes_refreshed {
            None => true,
            Some(at) if self.volumes.is_none() => at.elapsed() >= RETRY,
            Some(at) => at.elapsed() >= VOLUME_REFRESH,
        };
        let Some(net) = &self.net else { return };
        if !due {
            return;
        }
        let refresh_only = self.volumes.is_some();
        let base = setup::base_context(&self.pod, &self.ctx.settings, net.ip, self.node.ip);
        let vctx = VolumeContext {
            client: self.ctx.client.clone(),
            pod_dir: &self.pod_dir,
            env: &base,
            fs_group: setup::fs_group(&self.pod),
            stamp: Timestamp::now().as_nanosecond().to_string(),
            tokens: &self.tokens,
        };
        let mut prepared = BTreeMap::new();
        let mut error = None;
        for v in self
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
        {
            if refresh_only && !volumes::is_refreshed(v) {
                continue;
            }
            match vctx.prepare(v).await {
                Ok(path) => {
                    prepared.insert(v.name.clone(), path);
                }
                Err(e) => {
                    error = Some(format!(
                        "MountVolume.SetUp failed for volume \"{}\": {e}",
                        v.name
                    ));
                    break;
                }
            }
        }
        self.volumes_refreshed = Some(Instant::now());
        match (error, refresh_only) {
            (Some(e), false) => {
                tracing::info!(pod = %self.key(), error = %e, "volumes not ready");
                self.volume_error = Some(e);
            }
            (Some(e), true) => tracing::warn!(pod = %self.key(), error = %e, "refreshing volumes"),
            (None, false) => {
                self.volume_error = None;
                self.volumes = Some(prepared);
            }
            (None, true) => {}
        }
    }

    async fn run_containers(&mut self) {
        let policy = self.restart_policy();
        let now = Instant::now();
        // Init containers run one at a time, in order, each to completion.
        for index in 0..self.init.len() {
            let rt = &self.init[index];
            if rt.succeeded() {
                continue;
            }
            if rt.running() {
                return;
            }
            let restart = rt.terminated.is_none() || policy != "Never";
            if restart && rt.next_start.is_none_or(|at| at <= now) {
                self.start(true, index).await;
            }
            return;
        }
        for index in 0..self.main.len() {
            let rt = &self.main[index];
            if rt.running() || !rt.wants_restart(&policy) {
                continue;
            }
            if rt.next_start.is_none_or(|at| at <= now) {
                self.start(false, index).await;
            }
        }
    }

    async fn start(&mut self, init: bool, index: usize) {
        let key = self.key();
        let Some(net) = &self.net else { return };
        let (pod_ip, netns_path) = (net.ip, net.names.netns_path());
        let list = if init { &self.init } else { &self.main };
        let Some(rt) = list.get(index) else { return };
        let spec = rt.spec.clone();
        let image_ref = spec.image.clone().unwrap_or_default();
        let images_dir = self.ctx.settings.images_dir.clone();

        let Some(image) = images::resolve(&images_dir, &image_ref) else {
            let list = if init { &mut self.init } else { &mut self.main };
            if let Some(rt) = list.get_mut(index) {
                rt.image_attempts += 1;
                let reason = if rt.image_attempts == 1 {
                    "ErrImagePull"
                } else {
                    "ImagePullBackOff"
                };
                rt.waiting = (
                    reason.into(),
                    Some(format!(
                        "Back-off pulling image \"{image_ref}\": no directory for it under {}",
                        images_dir.display()
                    )),
                );
                let wait = Duration::from_secs(5 * 2u64.pow(rt.image_attempts.min(4)));
                rt.next_start = Some(Instant::now() + wait);
            }
            return;
        };

        let prepared = self.prepare_launch(&spec, &image, pod_ip).await;
        let list = if init { &mut self.init } else { &mut self.main };
        let Some(rt) = list.get_mut(index) else {
            return;
        };
        rt.image = Some(image.clone());
        let (argv, env, rootfs, identity) = match prepared {
            Ok(p) => p,
            Err(e) => {
                rt.waiting = (e.reason.into(), Some(e.message));
                rt.next_start = Some(Instant::now() + RETRY);
                return;
            }
        };

        if rt.ever_started {
            rt.restart_count += 1;
            rt.last_terminated = rt.terminated.take();
        }
        rt.terminated = None;
        rt.ever_started = true;
        self.generation += 1;
        let generation = self.generation;
        let short: String = self
            .uid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(12)
            .collect();
        let container_id = format!("localkube://{short}-{}-{}", spec.name, rt.restart_count);
        let log_path = self
            .log_dir
            .join(&spec.name)
            .join(format!("{}.log", rt.restart_count));
        let log = std::fs::create_dir_all(log_path.parent().unwrap_or(&self.log_dir))
            .and_then(|_| OpenOptions::new().create(true).append(true).open(&log_path));
        let spawned = match log {
            Ok(log) => sandbox::spawn_container(&rootfs, &netns_path, &argv, &env, &log)
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("opening log {}: {e}", log_path.display())),
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(message) => {
                tracing::warn!(pod = %key, container = %spec.name, error = %message, "start failed");
                rt.start_failed(message, status::now(), container_id);
                return;
            }
        };
        let pid = child.id().unwrap_or_default();
        let _ = crate::procs::record(
            &self.pod_dir.join("pids").join(format!("{}.pid", spec.name)),
            pid,
        );
        let (sig_tx, mut sig_rx) = mpsc::unbounded_channel::<nix::sys::signal::Signal>();
        let slot = Slot {
            init,
            index,
            generation,
        };
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let status = loop {
                tokio::select! {
                    s = child.wait() => break s,
                    Some(sig) = sig_rx.recv() => {
                        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
                        }
                    }
                }
            };
            if let Ok(status) = status {
                let _ = tx.send(Msg::Exited { slot, status });
            }
        });
        let started = Instant::now();
        let probes = if init {
            Vec::new()
        } else {
            [
                (Kind::Startup, spec.startup_probe.as_ref()),
                (Kind::Readiness, spec.readiness_probe.as_ref()),
                (Kind::Liveness, spec.liveness_probe.as_ref()),
            ]
            .into_iter()
            .filter_map(|(kind, p)| {
                p.map(|p| {
                    Tracker::new(
                        kind,
                        probe::action(p, &spec, &env),
                        probe::Schedule::of(p),
                        started,
                    )
                })
            })
            .collect()
        };
        let pre_stop = spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .map(|handler| {
                let target = probe::run::Target {
                    pod_ip,
                    node_ip: self.node.ip,
                    netns: netns_path.clone(),
                    pid,
                    identity: identity.clone(),
                    env: env.clone(),
                };
                (probe::hook_action(handler, &spec, &env), target)
            });
        tracing::info!(pod = %key, container = %spec.name, pid, ?argv, "container started");
        rt.process = Some(Process {
            pid,
            generation,
            started_at: status::now(),
            started_instant: started,
            container_id,
            identity,
            env,
            probes,
            signals: sig_tx,
            stopping: false,
            pre_stop,
        });
    }

    #[allow(clippy::type_complexity)]
    async fn prepare_launch(
        &self,
        spec: &k8s_openapi::api::core::v1::Container,
        image: &images::ImageDir,
        pod_ip: Ipv4Addr,
    ) -> Result<
        (
            Vec<String>,
            Vec<(String, String)>,
            plan::RootfsPlan,
            Option<plan::Identity>,
        ),
        ConfigError,
    > {
        let mut base = setup::base_context(&self.pod, &self.ctx.settings, pod_ip, self.node.ip);
        if image.lib().is_some() {
            base.defaults
                .push(("LD_LIBRARY_PATH".into(), "/usr/local/lib".into()));
        }
        let identity = setup::identity(&self.pod, spec)?;
        let home = if identity.as_ref().is_some_and(|i| i.uid != 0) {
            "/"
        } else {
            "/root"
        };
        base.defaults.push(("HOME".into(), home.into()));
        let ctx = setup::env_context(&self.ctx.client, spec, &base)
            .await
            .map_err(|e| ConfigError::config(format!("reading env sources: {e}")))?;
        let env =
            crate::envvars::build(spec, &ctx).map_err(|e| ConfigError::config(e.to_string()))?;
        let argv = setup::argv(spec, image, &env)?;
        let volumes = self.volumes.clone().unwrap_or_default();
        let mounts = setup::mounts(spec, &volumes)?;
        let readonly_root = spec
            .security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem)
            == Some(true);
        let rootfs = plan::build(plan::PlanInput {
            root: self.pod_dir.join("containers").join(&spec.name),
            image_bin: image.bin(),
            image_lib: image.lib(),
            pod_etc: self.pod_dir.join("etc"),
            volumes: &mounts,
            readonly_root,
            workdir: spec.working_dir.clone(),
            hostname: setup::pod_hostname(&self.pod),
            identity: identity.clone(),
        });
        Ok((argv, env, rootfs, identity))
    }

    fn schedule_probes(&mut self) {
        let Some(net) = &self.net else { return };
        let (pod_ip, netns) = (net.ip, net.names.netns_path());
        let now = Instant::now();
        for (index, rt) in self.main.iter_mut().enumerate() {
            let Some(process) = rt.process.as_mut() else {
                continue;
            };
            if process.stopping {
                continue;
            }
            let started = process.started();
            let target = probe::run::Target {
                pod_ip,
                node_ip: self.node.ip,
                netns: netns.clone(),
                pid: process.pid,
                identity: process.identity.clone(),
                env: process.env.clone(),
            };
            let slot = Slot {
                init: false,
                index,
                generation: process.generation,
            };
            for tracker in process.probes.iter_mut() {
                let eligible = tracker.kind == Kind::Startup && !tracker.passing
                    || tracker.kind != Kind::Startup && started;
                if !eligible || !tracker.due(now) {
                    continue;
                }
                tracker.in_flight = true;
                let (action, timeout, kind) = (
                    tracker.action.clone(),
                    tracker.schedule.timeout,
                    tracker.kind,
                );
                let (tx, target) = (self.tx.clone(), target.clone());
                tokio::spawn(async move {
                    let (ok, message) = probe::run::run(&action, &target, timeout).await;
                    let _ = tx.send(Msg::Probe {
                        slot,
                        kind,
                        ok,
                        message,
                    });
                });
            }
        }
    }

    fn view(&self) -> PodView {
        let now = Instant::now();
        let policy = self.restart_policy();
        let image_id = |rt: &Runtime| rt.image.as_ref().map(|i| i.image_id()).unwrap_or_default();
        let pod = format!(
            "{}_{}({})",
            self.pod.metadata.name.as_deref().unwrap_or_default(),
            self.pod.metadata.namespace.as_deref().unwrap_or_default(),
            self.uid
        );
        PodView {
            sandbox_ready: self.net.is_some(),
            pod_ip: self.net.as_ref().map(|n| n.ip.to_string()),
            host_ip: self.node.ip.to_string(),
            start_time: self.start_time,
            init_containers: self
                .init
                .iter()
                .map(|rt| rt.view(&image_id(rt), now, &policy, &pod))
                .collect(),
            containers: self
                .main
                .iter()
                .map(|rt| rt.view(&image_id(rt), now, &policy, &pod))
                .collect(),
            message: self.net_error.clone().or(self.volume_error.clone()),
        }
    }

    async fn write_status(&mut self) {
        // Our own conditions as last written are the base, so their transition times stay put
        // even before the watch delivers our last write.
        let mut base = self.pod.clone();
        if let Some(written) = &self.written {
            let status = base.status.get_or_insert_with(Default::default);
            let mut conditions = status.conditions.clone().unwrap_or_default();
            for c in written.conditions.iter().flatten() {
                match conditions.iter_mut().find(|o| o.type_ == c.type_) {
                    Some(slot) => *slot = c.clone(),
                    None => conditions.push(c.clone()),
                }
            }
            status.conditions = Some(conditions);
            status.start_time = status.start_time.clone().or(written.start_time.clone());
        }
        let desired = status::build(&base, &self.view(), status::now());
        let json = status::owned_json(&desired);
        let observed = self.pod.status.as_ref().map(status::owned_json);
        // What we wrote last stands until the watch shows a newer status from someone else: the
        // node controller marks every pod of a node NotReady while the node is, and once the
        // node is back a kubelet that kept thinking "Ready, as written" would leave them so.
        let overwritten = match (version(&self.pod), self.written_version) {
            (Some(seen), Some(written)) => seen > written,
            _ => false,
        };
        if observed.as_ref() == Some(&json)
            || (self.written_json.as_ref() == Some(&json) && !overwritten)
        {
            return;
        }
        let api: Api<Pod> = Api::namespaced(
            self.ctx.client.clone(),
            self.pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        let patch = status::patch_body(&desired, &self.uid);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(pod) => {
                self.written = Some(desired);
                self.written_json = Some(json);
                self.written_version = version(&pod);
                if version(&pod) > version(&self.pod) {
                    self.pod = pod;
                }
            }
            // Gone, or another pod under its name now (the UID precondition).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => tracing::warn!(pod = %self.key(), error = %e, "writing pod status"),
        }
    }

    fn running_count(&self) -> usize {
        self.init
            .iter()
            .chain(self.main.iter())
            .filter(|rt| rt.running())
            .count()
    }

    /// SIGTERM to every container, SIGKILL after `grace`, and wait for them to exit.
    async fn stop_all(&mut self, grace: Duration) {
        for rt in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let Some(p) = rt.process.as_mut() {
                p.stop(grace);
            }
        }
        let deadline = tokio::time::Instant::now() + grace + Duration::from_secs(5);
        while self.running_count() > 0 {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Msg::Exited { slot, status })) => self.on_exit(slot, status),
                Ok(Some(Msg::Pod(pod))) => self.pod = *pod,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        for rt in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let Some(p) = rt.process.take() {
                tracing::warn!(pod = %self.pod.metadata.name.as_deref().unwrap_or_default(), pid = p.pid, "process did not exit");
                p.kill();
            }
        }
    }

    /// Removes the network; with `remove_dir` also the pod's directory (its emptyDirs).
    async fn cleanup(&mut self, remove_dir: bool) {
        if let Some(ip) = self.reserved_ip.take() {
            self.ctx.release_ip(&self.node.name, ip);
        }
        if let Some(net) = self.net.take() {
            network::teardown(&net.names).await;
            tracing::info!(pod = %self.key(), uid = %self.uid, ip = %net.ip, "pod network removed");
            self.ctx.release_ip(&self.node.name, net.ip);
        }
        if remove_dir {
            let _ = std::fs::remove_dir_all(&self.pod_dir);
        }
    }

    async fn delete(&mut self) {
        let grace = self.grace();
        tracing::info!(pod = %self.key(), ?grace, "deleting pod");
        self.stop_all(grace).await;
        self.cleanup(true).await;
        let api: Api<Pod> = Api::namespaced(
            self.ctx.client.clone(),
            self.pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %self.key(), error = %e, "final delete");
                return;
            }
        }
        self.finished = true;
    }
}

/// A pod's resource version as a number (etcd's revision), when it is one.
fn version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::log_tail;

    #[test]
    fn the_termination_message_is_the_logs_last_80_lines_and_2048_bytes() {
        let dir = std::env::temp_dir().join(format!("kubelet-log-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("0.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &text).expect("log");
        let tail = log_tail(&log).expect("tail");
        assert_eq!(tail.lines().count(), 80);
        assert_eq!(tail.lines().last(), Some("line 99"));
        std::fs::write(&log, "x".repeat(5000)).expect("log");
        assert_eq!(log_tail(&log).expect("tail").len(), 2048);
        std::fs::write(&log, "\n").expect("log");
        assert_eq!(log_tail(&log), None);
        assert_eq!(log_tail(&dir.join("missing.log")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
