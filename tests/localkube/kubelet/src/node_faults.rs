//! Stopped nodes, for fault injection: `localkube fault node-stop` writes `<state>/faults/<node>`
//! holding `crash` or `partition`, and removes it to bring the node back.
//!
//! A stopped node's kubelet goes silent: no Lease renewal and no node status (so the node
//! controller marks it NotReady), no pod status, no container restarts, and deletions wait (its
//! pods stay Terminating), exactly what the control plane sees of a node that crashed or was cut
//! off. With `crash` the node's containers are also killed (SIGKILL) and come back, restarted,
//! when the node returns, as after a reboot; with `partition` they run on unseen. The network
//! side of either (the node's pods unreachable) is the fault command's own nftables table.
//!
//! Once the kubelet acts on a file it writes `<node>.applied` with the same word, and removes it
//! when the node is back, so the command knows when the fault is in force.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

const POLL: Duration = Duration::from_millis(500);
const APPLIED_SUFFIX: &str = ".applied";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFault {
    /// The node's processes die; nothing is reported.
    Crashed,
    /// The node's processes live on; nothing is reported.
    Partitioned,
}

impl NodeFault {
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim() {
            "crash" => Some(Self::Crashed),
            "partition" => Some(Self::Partitioned),
            _ => None,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Crashed => "crash",
            Self::Partitioned => "partition",
        }
    }
}

/// Node name → fault, as the files say now.
pub type Stopped = BTreeMap<String, NodeFault>;

/// Reads the fault files of `dir`; a file naming no node of ours, or an unknown word, is ignored.
pub fn read(dir: &Path, nodes: &[String]) -> Stopped {
    let mut out = Stopped::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(APPLIED_SUFFIX) || name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        match NodeFault::parse(&text) {
            Some(fault) if nodes.contains(&name) => {
                out.insert(name, fault);
            }
            // The fault command writes only valid files; anything else is not ours to act on.
            _ => tracing::debug!(file = %entry.path().display(), "not a node fault file"),
        }
    }
    out
}

fn applied_path(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}{APPLIED_SUFFIX}"))
}

/// Keeps `tx` equal to what the files say, and the `.applied` files equal to what was published.
pub async fn watch_files(
    dir: PathBuf,
    nodes: Vec<String>,
    tx: watch::Sender<Stopped>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let now = read(&dir, &nodes);
        if *tx.borrow() != now {
            tracing::info!(stopped = ?now, "node faults changed");
            tx.send_replace(now.clone());
        }
        for node in &nodes {
            let path = applied_path(&dir, node);
            let result = match now.get(node) {
                Some(fault)
                    if std::fs::read_to_string(&path).ok().as_deref() != Some(fault.word()) =>
                {
                    std::fs::write(&path, fault.word())
                }
                None if path.exists() => std::fs::remove_file(&path),
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(path = %path.display(), error = %e, "recording an applied node fault");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_name_our_nodes_and_a_known_fault() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("lk-node-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("localkube-b"), "crash\n")?;
        std::fs::write(dir.join("localkube-c"), "partition")?;
        std::fs::write(dir.join("localkube-c.applied"), "partition")?;
        std::fs::write(dir.join("localkube-z"), "crash")?;
        std::fs::write(dir.join("localkube-a"), "reboot")?;
        let nodes: Vec<String> = ["localkube-a", "localkube-b", "localkube-c"]
            .into_iter()
            .map(String::from)
            .collect();
        let got = read(&dir, &nodes);
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(
            got,
            Stopped::from([
                ("localkube-b".to_string(), NodeFault::Crashed),
                ("localkube-c".to_string(), NodeFault::Partitioned),
            ])
        );
        Ok(())
    }
}
