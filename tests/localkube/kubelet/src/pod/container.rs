//! One container of a pod: its process, probes, restarts and what its status says.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::jiff::Timestamp;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use super::status::{ContainerView, State, Terminated};
use crate::backoff::Backoff;
use crate::images::ImageDir;
use crate::probe::{Kind, Tracker};
use crate::sandbox::plan::Identity;

/// A started process. The waiter task owns the child; signals go through `signals`.
#[derive(Debug)]
pub struct Process {
    pub pid: u32,
    pub generation: u64,
    pub started_at: Timestamp,
    pub started_instant: Instant,
    pub container_id: String,
    pub identity: Option<Identity>,
    pub env: Vec<(String, String)>,
    pub probes: Vec<Tracker>,
    pub signals: mpsc::UnboundedSender<Signal>,
    /// Set once a stop was requested (liveness, startup failure, deletion).
    pub stopping: bool,
    /// The preStop hook and where it runs.
    pub pre_stop: Option<(crate::probe::Action, crate::probe::run::Target)>,
}

impl Process {
    pub fn started(&self) -> bool {
        self.probes
            .iter()
            .find(|p| p.kind == Kind::Startup)
            .is_none_or(|p| p.passing)
    }

    pub fn ready(&self) -> bool {
        self.started()
            && self
                .probes
                .iter()
                .find(|p| p.kind == Kind::Readiness)
                .is_none_or(|p| p.passing)
    }

    /// The preStop hook (if any), then SIGTERM, then SIGKILL once `grace` has passed (with two
    /// more seconds when the hook used it all up, as a kubelet allows).
    pub fn stop(&mut self, grace: Duration) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let signals = self.signals.clone();
        let hook = self.pre_stop.take();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + grace;
            if let Some((action, target)) = hook {
                let _ =
                    tokio::time::timeout(grace, crate::probe::run::run(&action, &target, grace))
                        .await;
            }
            let _ = signals.send(Signal::SIGTERM);
            let extra = tokio::time::Instant::now() + Duration::from_secs(2);
            tokio::time::sleep_until(deadline.max(extra)).await;
            let _ = signals.send(Signal::SIGKILL);
        });
    }

    pub fn kill(&self) {
        let _ = self.signals.send(Signal::SIGKILL);
    }
}

#[derive(Debug)]
pub struct Runtime {
    pub spec: Container,
    pub restart_count: i32,
    pub process: Option<Process>,
    /// The current terminated state (a container that is not restarted, or waits to be).
    pub terminated: Option<Terminated>,
    pub last_terminated: Option<Terminated>,
    pub waiting: (String, Option<String>),
    pub backoff: Backoff,
    /// Not before this instant may it (re)start.
    pub next_start: Option<Instant>,
    /// The back-off before `next_start`, for the CrashLoopBackOff message.
    pub delay: Duration,
    pub image: Option<ImageDir>,
    pub image_attempts: u32,
    /// Whether it has ever been started in this pod (a start after that is a restart).
    pub ever_started: bool,
}

impl Runtime {
    pub fn new(spec: Container, backoff_cap: Duration) -> Self {
        Self {
            spec,
            restart_count: 0,
            process: None,
            terminated: None,
            last_terminated: None,
            waiting: ("ContainerCreating".into(), None),
            backoff: Backoff::new(backoff_cap),
            next_start: None,
            delay: Duration::ZERO,
            image: None,
            image_attempts: 0,
            ever_started: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn running(&self) -> bool {
        self.process.is_some()
    }

    pub fn succeeded(&self) -> bool {
        self.process.is_none() && self.terminated.as_ref().is_some_and(|t| t.exit_code == 0)
    }

    /// Records an exit; returns the terminated state.
    pub fn exited(&mut self, status: ExitStatus, now: Timestamp) -> Option<Terminated> {
        use std::os::unix::process::ExitStatusExt;
        let process = self.process.take()?;
        let signal = status.signal();
        let exit_code = status.code().unwrap_or_else(|| 128 + signal.unwrap_or(9));
        let t = Terminated {
            exit_code,
            signal: None,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: process.started_at,
            finished_at: now,
            container_id: process.container_id.clone(),
        };
        let ran_for = process.started_instant.elapsed();
        self.terminated = Some(t.clone());
        self.delay = self.backoff.next_delay(ran_for);
        self.next_start = Some(Instant::now() + self.delay);
        Some(t)
    }

    /// A start that failed before the process ran, reported as a kubelet reports StartError.
    pub fn start_failed(&mut self, message: String, now: Timestamp, container_id: String) {
        self.terminated = Some(Terminated {
            exit_code: 128,
            signal: None,
            reason: "StartError".into(),
            message: Some(message),
            started_at: Timestamp::UNIX_EPOCH,
            finished_at: now,
            container_id,
        });
        self.delay = self.backoff.next_delay(Duration::ZERO);
        self.next_start = Some(Instant::now() + self.delay);
        self.ever_started = true;
    }

    /// Whether a terminated container should start again under `restart_policy`.
    pub fn wants_restart(&self, restart_policy: &str) -> bool {
        match (&self.terminated, restart_policy) {
            (None, _) => true,
            (Some(_), "Always") => true,
            (Some(t), "OnFailure") => t.exit_code != 0,
            _ => false,
        }
    }

    /// `pod` names the pod as a kubelet does in messages: `name_namespace(uid)`.
    pub fn view(
        &self,
        image_id: &str,
        now: Instant,
        restart_policy: &str,
        pod: &str,
    ) -> ContainerView {
        let restarting = self.wants_restart(restart_policy);
        let (state, last) = match (&self.process, &self.terminated) {
            (Some(p), _) => (
                State::Running {
                    started_at: p.started_at,
                    started: p.started(),
                    ready: p.ready(),
                },
                self.last_terminated.clone(),
            ),
            (None, Some(t)) if restarting && self.next_start.is_some_and(|at| at > now) => (
                State::Waiting {
                    reason: "CrashLoopBackOff".into(),
                    // Constant while waiting, so the status is written once per back-off.
                    message: Some(format!(
                        "back-off {}s restarting failed container={} pod={pod}",
                        self.delay.as_secs(),
                        self.spec.name
                    )),
                },
                Some(t.clone()),
            ),
            (None, Some(t)) => (State::Terminated(t.clone()), self.last_terminated.clone()),
            (None, None) => (
                State::Waiting {
                    reason: self.waiting.0.clone(),
                    message: self.waiting.1.clone(),
                },
                self.last_terminated.clone(),
            ),
        };
        ContainerView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: image_id.to_string(),
            container_id: self
                .process
                .as_ref()
                .map(|p| p.container_id.clone())
                .or_else(|| self.terminated.as_ref().map(|t| t.container_id.clone())),
            state,
            last_terminated: last,
            restart_count: self.restart_count,
        }
    }
}
