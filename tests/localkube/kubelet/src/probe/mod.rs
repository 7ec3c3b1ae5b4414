//! Probes: what to run (`Action`), when (`Schedule`), and how results add up (`Tracker`).

pub mod dial;
pub mod http;
pub mod run;
pub mod valkey_cli;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Readiness,
    Liveness,
}

/// What a probe does, with ports and named ports already resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `valkey-cli ... <command>` answered by a native client.
    Valkey(valkey_cli::CliCommand),
    Exec(Vec<String>),
    Tcp {
        host: Option<String>,
        port: u16,
    },
    Http {
        https: bool,
        host: Option<String>,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A lifecycle hook's `sleep`.
    Sleep(Duration),
    /// A probe this kubelet cannot run; it always fails, with this message.
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(value: Option<i32>, default: u64, min: u64) -> Duration {
    let v = value.map(|v| v.max(0) as u64).unwrap_or(default);
    Duration::from_secs(v.max(min))
}

fn count(value: Option<i32>, default: u32) -> u32 {
    value.map(|v| v.max(1) as u32).unwrap_or(default)
}

impl Schedule {
    pub fn of(probe: &Probe) -> Self {
        Self {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: count(probe.success_threshold, 1),
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// Resolves a port that may name one of the container's ports.
fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("named port {name} not found in container"))
        }
    }
}

/// The action of a probe; `env` is the container's environment (for `REDISCLI_AUTH` and `sh -c`).
pub fn action(probe: &Probe, container: &Container, env: &[(String, String)]) -> Action {
    if let Some(exec) = &probe.exec {
        let argv = exec.command.clone().unwrap_or_default();
        return match valkey_cli::parse(&argv, env) {
            Some(cli) => Action::Valkey(cli),
            None if argv.is_empty() => Action::Unsupported("exec probe without command".into()),
            None => Action::Exec(argv),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        return match resolve_port(&tcp.port, container) {
            Ok(port) => Action::Tcp {
                host: tcp.host.clone(),
                port,
            },
            Err(e) => Action::Unsupported(e),
        };
    }
    if let Some(http) = &probe.http_get {
        return match resolve_port(&http.port, container) {
            Ok(port) => Action::Http {
                https: http.scheme.as_deref() == Some("HTTPS"),
                host: http.host.clone(),
                port,
                path: http.path.clone().unwrap_or_else(|| "/".into()),
                headers: http
                    .http_headers
                    .iter()
                    .flatten()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            },
            Err(e) => Action::Unsupported(e),
        };
    }
    Action::Unsupported("only exec, tcpSocket and httpGet probes are supported".into())
}

/// The action of a lifecycle hook (`preStop`), which takes the same handlers as a probe plus `sleep`.
pub fn hook_action(
    handler: &k8s_openapi::api::core::v1::LifecycleHandler,
    container: &Container,
    env: &[(String, String)],
) -> Action {
    if let Some(sleep) = &handler.sleep {
        return Action::Sleep(Duration::from_secs(sleep.seconds.max(0) as u64));
    }
    let as_probe = Probe {
        exec: handler.exec.clone(),
        http_get: handler.http_get.clone(),
        tcp_socket: handler.tcp_socket.clone(),
        ..Default::default()
    };
    action(&as_probe, container, env)
}

/// Consecutive results turned into a probe's verdict, with the next time it is due.
#[derive(Debug, Clone)]
pub struct Tracker {
    pub kind: Kind,
    pub action: Action,
    pub schedule: Schedule,
    pub next_due: Instant,
    pub in_flight: bool,
    successes: u32,
    failures: u32,
    /// The verdict: readiness starts false, liveness true, startup false.
    pub passing: bool,
    pub last_message: Option<String>,
}

/// What a new result changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    None,
    BecamePassing,
    BecameFailing,
}

impl Tracker {
    pub fn new(kind: Kind, action: Action, schedule: Schedule, started: Instant) -> Self {
        Self {
            kind,
            action,
            next_due: started + schedule.initial_delay,
            schedule,
            in_flight: false,
            successes: 0,
            failures: 0,
            passing: kind == Kind::Liveness,
            last_message: None,
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        !self.in_flight && now >= self.next_due
    }

    pub fn record(&mut self, ok: bool, message: Option<String>, now: Instant) -> Transition {
        self.in_flight = false;
        self.next_due = now + self.schedule.period;
        self.last_message = message;
        if ok {
            self.successes += 1;
            self.failures = 0;
            if !self.passing && self.successes >= self.schedule.success_threshold {
                self.passing = true;
                return Transition::BecamePassing;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if (self.passing || self.kind == Kind::Startup)
                && self.failures >= self.schedule.failure_threshold
            {
                self.passing = false;
                // Once over the threshold a failing startup or liveness probe starts counting anew
                // for the restarted container, as a kubelet's worker does.
                self.failures = 0;
                return Transition::BecameFailing;
            }
        }
        Transition::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, TCPSocketAction};

    fn schedule(success: u32, failure: u32) -> Schedule {
        Schedule {
            initial_delay: Duration::from_secs(5),
            period: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn readiness_needs_consecutive_successes_and_liveness_consecutive_failures() {
        let t0 = Instant::now();
        let mut ready = Tracker::new(Kind::Readiness, Action::Exec(vec![]), schedule(2, 3), t0);
        assert!(!ready.passing);
        assert!(!ready.due(t0));
        assert!(ready.due(t0 + Duration::from_secs(5)));
        assert_eq!(ready.record(true, None, t0), Transition::None);
        assert_eq!(ready.record(true, None, t0), Transition::BecamePassing);
        assert_eq!(ready.next_due, t0 + Duration::from_secs(2));

        let mut live = Tracker::new(Kind::Liveness, Action::Exec(vec![]), schedule(1, 2), t0);
        assert!(live.passing);
        assert_eq!(live.record(false, None, t0), Transition::None);
        assert_eq!(live.record(true, None, t0), Transition::None);
        assert_eq!(live.record(false, None, t0), Transition::None);
        assert_eq!(live.record(false, None, t0), Transition::BecameFailing);
        assert!(!live.passing);
    }

    #[test]
    fn startup_failures_are_reported_even_before_any_success() {
        let t0 = Instant::now();
        let mut s = Tracker::new(Kind::Startup, Action::Exec(vec![]), schedule(1, 2), t0);
        assert_eq!(s.record(false, None, t0), Transition::None);
        assert_eq!(s.record(false, None, t0), Transition::BecameFailing);
    }

    #[test]
    fn actions_resolve_named_ports_and_valkey_cli() {
        let container = Container {
            name: "valkey".into(),
            ports: Some(vec![ContainerPort {
                name: Some("client".into()),
                container_port: 6379,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("client".into()),
                host: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&tcp, &container, &[]),
            Action::Tcp {
                host: None,
                port: 6379
            }
        );
        let exec = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["valkey-cli".into(), "ping".into()]),
            }),
            ..Default::default()
        };
        assert!(matches!(action(&exec, &container, &[]), Action::Valkey(_)));
        let bad = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("nope".into()),
                host: None,
            }),
            ..Default::default()
        };
        assert!(matches!(
            action(&bad, &container, &[]),
            Action::Unsupported(_)
        ));
    }
}
