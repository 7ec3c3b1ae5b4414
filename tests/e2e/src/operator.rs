//! Running the operator in a test: its CRDs, and its controllers as local processes scoped to the
//! test's namespace, so tests that kill or restart a controller disturb no other test.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use tokio::process::{Child, Command};
use tokio::sync::OnceCell;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use crate::{
    E2eError, Poll, Result, TestNamespace, kubeconfig_path, kubectl, repo_root,
    wait_object_described, wait_until,
};

/// Where the controller binaries are: `$OPERATOR_BIN_DIR`, else the debug build of
/// `$CARGO_TARGET_DIR` (cargo builds there when it is set; a relative one is taken from the
/// checkout's root, where `make` runs cargo), else this checkout's `target/debug` (`make test`
/// builds them first).
pub fn binary(name: &str) -> PathBuf {
    let non_empty = |var| {
        std::env::var_os(var)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
    };
    non_empty("OPERATOR_BIN_DIR")
        .or_else(|| {
            non_empty("CARGO_TARGET_DIR").map(|target| repo_root().join(target).join("debug"))
        })
        .unwrap_or_else(|| repo_root().join("target/debug"))
        .join(name)
}

/// `OPERATOR_BIN_DIR=<dir> ` when the controllers come from there, for a benchmark's command
/// line (which binaries it measured is part of how to run it again); empty otherwise.
pub fn binaries_in_command() -> String {
    std::env::var("OPERATOR_BIN_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .map(|d| format!("OPERATOR_BIN_DIR={d} "))
        .unwrap_or_default()
}

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Applies the generated CRDs once per test process and waits until they are Established.
pub async fn install_crds() -> Result<()> {
    CRDS.get_or_try_init(|| async {
        let dir = repo_root().join("charts/valkey-operator/crds");
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &dir.display().to_string(),
        ])
        .await?;
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/valkeynodes.valkey.io",
            "crd/valkeyclusters.valkey.io",
            "crd/valkeyreplications.valkey.io",
            "crd/valkeybackups.valkey.io",
            "crd/valkeybackupschedules.valkey.io",
        ])
        .await?;
        Ok(())
    })
    .await
    .copied()
}

/// A controller process, killed when dropped. Its log is kept under `target/e2e-logs/`.
pub struct ControllerProcess {
    pub binary: String,
    pub metrics_port: u16,
    pub log: PathBuf,
    child: Option<Child>,
}

impl ControllerProcess {
    /// Starts `binary` (`node-controller` or `cluster-controller`) watching `ns` only.
    pub async fn start(binary_name: &str, ns: &TestNamespace, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(binary_name, ns, extra, &[]).await
    }

    /// [`start`](Self::start) with extra environment variables, set last so they win: for
    /// example `POD_NAME` (the base of the Lease identity) or `RUST_LOG`.
    pub async fn start_with_env(
        binary_name: &str,
        ns: &TestNamespace,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let metrics_port = free_port()?;
        let logs = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| E2eError::Check(format!("{}: {e}", logs.display())))?;
        let log = logs.join(format!("{}-{binary_name}-{metrics_port}.log", ns.name));
        let file = std::fs::File::create(&log)
            .map_err(|e| E2eError::Check(format!("{}: {e}", log.display())))?;
        let err_file = file
            .try_clone()
            .map_err(|e| E2eError::Check(e.to_string()))?;
        let program = binary(binary_name);
        let metrics = format!("127.0.0.1:{metrics_port}");
        let mut args = vec![
            "--namespace",
            ns.name.as_str(),
            "--metrics-addr",
            metrics.as_str(),
        ];
        args.extend_from_slice(extra);
        let child = Command::new(&program)
            .args(&args)
            .env("KUBECONFIG", kubeconfig_path()?)
            .env(
                "RUST_LOG",
                std::env::var("E2E_CONTROLLER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| E2eError::Spawn {
                program: program.display().to_string(),
                source,
            })?;
        let process = Self {
            binary: binary_name.to_owned(),
            metrics_port,
            log,
            child: Some(child),
        };
        process.wait_live().await?;
        Ok(process)
    }

    async fn wait_live(&self) -> Result<()> {
        let port = self.metrics_port;
        wait_until(
            Duration::from_secs(30),
            &format!("{} /live", self.binary),
            || async move {
                Ok(match http_get(port, "/live").await {
                    Ok((200, _)) => Poll::Ready(()),
                    Ok((code, _)) => Poll::NotYet(format!("HTTP {code}")),
                    Err(e) => Poll::NotYet(e),
                })
            },
        )
        .await
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> Result<String> {
        match http_get(self.metrics_port, "/metrics").await {
            Ok((200, body)) => Ok(body),
            Ok((code, _)) => Err(E2eError::Check(format!("/metrics answered {code}"))),
            Err(e) => Err(E2eError::Check(e)),
        }
    }

    /// The value of a counter or gauge line that starts with `prefix` (summed over its labels).
    pub async fn metric(&self, prefix: &str) -> Result<f64> {
        let text = self.metrics().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// How many reconcile passes the controller has started (`reconciles_total`).
    pub async fn reconciles(&self) -> Result<f64> {
        self.metric("reconciles_total").await
    }

    /// Waits until the controller has started `more` reconcile passes after `from`; returns the
    /// count then.
    pub async fn wait_reconciles(&self, from: f64, more: f64, within: Duration) -> Result<f64> {
        wait_until(within, &format!("{more} more reconciles"), || async move {
            let now = self.reconciles().await?;
            Ok(if now >= from + more {
                Poll::Ready(now)
            } else {
                Poll::NotYet(format!("reconciles_total {now}, started at {from}"))
            })
        })
        .await
    }

    /// Whether the controller leads (its `leader` gauge is 1), with `--leader-elect`.
    pub async fn is_leading(&self) -> Result<bool> {
        Ok(self.metric("leader ").await? == 1.0)
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .map_err(|e| E2eError::Check(format!("killing {}: {e}", self.binary)))?;
        }
        Ok(())
    }

    /// SIGTERM, then wait for the exit (graceful shutdown).
    pub async fn terminate(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()
                    .await;
            }
            match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill().await;
                    return Err(E2eError::Check(format!(
                        "{} ignored SIGTERM for 30 s",
                        self.binary
                    )));
                }
            }
        }
        Ok(())
    }

    /// Everything the process has logged so far.
    pub fn log_text(&self) -> Result<String> {
        std::fs::read_to_string(&self.log)
            .map_err(|e| E2eError::Check(format!("{}: {e}", self.log.display())))
    }

    /// Resident memory of the process (VmRSS), in KiB, from /proc.
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
    }

    /// The process id, while the process is not killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| E2eError::Check(format!("no free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| E2eError::Check(e.to_string()))
}

/// A tiny HTTP/1.0 GET against the controller's health server.
async fn http_get(port: u16, path: &str) -> std::result::Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// Waits until the ValkeyNode `name` satisfies `check`, returning it.
pub async fn wait_node<F>(
    ns: &TestNamespace,
    name: &str,
    within: Duration,
    what: &str,
    check: F,
) -> Result<ValkeyNode>
where
    F: Fn(&ValkeyNode) -> bool,
{
    wait_object_described(&ns.api::<ValkeyNode>(), name, within, what, check, |n| {
        format!("{:?}", n.status)
    })
    .await
}

/// Waits until the ValkeyCluster `name` satisfies `check`, returning it.
pub async fn wait_cluster<F>(
    ns: &TestNamespace,
    name: &str,
    within: Duration,
    what: &str,
    check: F,
) -> Result<ValkeyCluster>
where
    F: Fn(&ValkeyCluster) -> bool,
{
    wait_object_described(&ns.api::<ValkeyCluster>(), name, within, what, check, |c| {
        format!("{:?}", c.status)
    })
    .await
}

/// A merge patch of a ValkeyNode's spec (how a parent or a person edits it).
pub async fn patch_node_spec(
    ns: &TestNamespace,
    name: &str,
    spec: serde_json::Value,
) -> Result<ValkeyNode> {
    let patch = serde_json::json!({ "spec": spec });
    Ok(ns
        .api::<ValkeyNode>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?)
}
