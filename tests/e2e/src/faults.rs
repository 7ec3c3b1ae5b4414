//! Faults on the local cluster, for tests: network partitions, paused and killed containers,
//! stopped nodes, API server restarts.
//!
//! Each call runs `localkube fault ...` (see tests/localkube/README.md). A fault that lasts comes
//! back as a [`Fault`] guard that undoes it when dropped: at the end of the test's scope, and also
//! while a failing test unwinds. Every fault is also owned by the test process (`--owner`), so the
//! cluster's supervisor undoes it within seconds should the process end without unwinding
//! (killed, aborted), and `localkube stop`/`start` sweep whatever is left.
//!
//! Faults exist only on localkube: every call fails with a clear error on another cluster.

use std::path::PathBuf;
use std::process::Stdio;

use crate::{E2eError, Result};

/// The localkube binary: `$LOCALKUBE_BIN`, else this checkout's `.localkube/bin/localkube`.
pub fn localkube_program() -> PathBuf {
    match std::env::var_os("LOCALKUBE_BIN").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => crate::localkube_dir().join("bin/localkube"),
    }
}

/// One side of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// One pod (by its IP when the fault starts).
    Pod { namespace: String, name: String },
    /// Every pod of a node, including pods started later.
    Node(String),
    /// Every pod of a zone's nodes.
    Zone(String),
    /// The host: where the API server listens and every host process (the controllers under
    /// test, the test itself) connects from. Kubelet probes are not cut.
    Host,
    /// Every pod not on the other side (only as the receiving side).
    Rest,
    /// The client of localkube's outside namespace ([`crate::outside`]), cut from pods, nodes
    /// or zones: what it sends to a NodePort or a LoadBalancer address served by them is dropped.
    Outside,
}

impl Endpoint {
    pub fn pod(namespace: &str, name: &str) -> Self {
        Self::Pod {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn arg(&self) -> String {
        match self {
            Self::Pod { namespace, name } => format!("pod/{namespace}/{name}"),
            Self::Node(n) => format!("node/{n}"),
            Self::Zone(z) => format!("zone/{z}"),
            Self::Host => "host".into(),
            Self::Rest => "rest".into(),
            Self::Outside => "outside".into(),
        }
    }
}

fn list(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(Endpoint::arg)
        .collect::<Vec<_>>()
        .join(",")
}

/// How a stopped node stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStop {
    /// Its containers die (SIGKILL) and come back restarted when the node returns.
    Crash,
    /// Its containers live on, cut from every other pod and the host.
    Partition,
}

/// A fault in force; dropping it undoes it.
#[must_use = "the fault is undone as soon as this guard is dropped"]
#[derive(Debug)]
pub struct Fault {
    id: String,
    what: String,
    done: bool,
}

impl Fault {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    /// Undoes the fault now and says whether that worked (dropping does the same, quietly).
    pub async fn undo(mut self) -> Result<()> {
        self.done = true;
        run(&["fault", "undo", &self.id]).await.map(|_| ())
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Drop cannot await, and must not return before the fault is gone: the next statement
        // of the test (or the next test) counts on it.
        let out = std::process::Command::new(localkube_program())
            .args(["fault", "undo", &self.id])
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "undoing fault {} ({}): {}",
                self.id,
                self.what,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("undoing fault {} ({}): {e}", self.id, self.what),
        }
    }
}

/// Runs `localkube ARGS`; stdout on success.
async fn run(args: &[&str]) -> Result<String> {
    if !crate::is_localkube() {
        return Err(E2eError::Check(format!(
            "fault injection needs localkube; KUBECONFIG names another cluster (localkube {})",
            args.join(" ")
        )));
    }
    let program = localkube_program();
    let out = tokio::process::Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| E2eError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(E2eError::Check(format!(
            "localkube {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a `localkube fault` command that makes a fault owned by this process.
async fn inject(args: &[&str], what: String) -> Result<Fault> {
    let owner = std::process::id().to_string();
    let mut all = vec!["fault"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--owner", &owner]);
    let out = run(&all).await?;
    let id = out.trim().to_string();
    if id.is_empty() {
        return Err(E2eError::Check(format!(
            "localkube fault {} printed no fault id",
            args.join(" ")
        )));
    }
    Ok(Fault {
        id,
        what,
        done: false,
    })
}

/// Drops every packet between the two sides, both ways, until the guard drops.
pub async fn partition(from: &[Endpoint], to: &[Endpoint]) -> Result<Fault> {
    let (a, b) = (list(from), list(to));
    inject(
        &["partition", "--from", &a, "--to", &b],
        format!("partition {a} <-> {b}"),
    )
    .await
}

/// Drops every packet from `from` to `to` (and only those) until the guard drops.
pub async fn partition_one_way(from: &[Endpoint], to: &[Endpoint]) -> Result<Fault> {
    let (a, b) = (list(from), list(to));
    inject(
        &["partition", "--from", &a, "--to", &b, "--one-way"],
        format!("partition {a} -> {b}"),
    )
    .await
}

/// Stops (SIGSTOP) every process of the pod's containers until the guard drops (SIGCONT).
pub async fn pause(namespace: &str, pod: &str) -> Result<Fault> {
    let target = format!("pod/{namespace}/{pod}");
    inject(&["pause", &target], format!("pause {target}")).await
}

/// Kills (SIGKILL) a container's process group; the kubelet restarts the container in the same
/// pod, by its restart policy. `container` may be `None` for a pod of one container.
pub async fn kill(namespace: &str, pod: &str, container: Option<&str>) -> Result<()> {
    let target = format!("pod/{namespace}/{pod}");
    let mut args = vec!["fault", "kill", target.as_str()];
    if let Some(c) = container {
        args.extend_from_slice(&["--container", c]);
    }
    run(&args).await.map(|_| ())
}

/// Stops a node until the guard drops: its kubelet goes silent (the node turns NotReady after the
/// node controller's grace period, 50 s, and its pods stay Terminating when deleted) and its pods
/// are cut from every other pod and the host; with [`NodeStop::Crash`] its containers are killed
/// too. Returns once the kubelet has acted on it.
pub async fn stop_node(node: &str, how: NodeStop) -> Result<Fault> {
    let mode = match how {
        NodeStop::Crash => "crash",
        NodeStop::Partition => "partition",
    };
    inject(
        &["node-stop", node, "--mode", mode],
        format!("stop node {node} ({mode})"),
    )
    .await
}

/// Restarts the API server (SIGTERM, or SIGKILL as a crash with `crash`); returns once the new
/// one answers `/readyz`.
pub async fn restart_apiserver(crash: bool) -> Result<()> {
    let mut args = vec!["restart", "apiserver"];
    if crash {
        args.push("--kill");
    }
    run(&args).await.map(|_| ())
}
