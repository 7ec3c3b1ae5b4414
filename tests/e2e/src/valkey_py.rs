//! valkey-py's `Sentinel` client as an application runs it (tests/clients/valkey_py_sentinel.py):
//! it asks the Sentinels for the primary, writes with `WAIT 1`, and finds the primary again
//! after a failover. The Sentinel e2e tests and the chaos matrix's Sentinel rows run it beside
//! their own writers, and check that nothing it had confirmed was lost.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::replication::ReplicationFixture;
use crate::{E2eError, Poll, Result, check, wait_until};

/// How a client logs in: the clients' password, and with TLS the CA file it verifies against.
pub struct Login {
    pub password: Option<String>,
    pub ca_file: Option<std::path::PathBuf>,
}

impl Login {
    pub async fn of(r: &ReplicationFixture) -> Result<Self> {
        let ca_file = match r.ca().await? {
            None => None,
            Some(ca) => {
                // A CA certificate is public: a file beside the test's other files.
                let path = std::env::temp_dir().join(format!("{}-ca.pem", r.ns.name));
                std::fs::write(&path, ca)
                    .map_err(|e| E2eError::Check(format!("{}: {e}", path.display())))?;
                Some(path)
            }
        };
        Ok(Self {
            password: r.password().await?,
            ca_file,
        })
    }
}

/// valkey-py's Sentinel client writing until stopped (tests/clients/valkey_py_sentinel.py).
pub struct PyWriter {
    child: tokio::process::Child,
    stop: std::path::PathBuf,
    prefix: String,
}

#[derive(serde::Deserialize, Debug)]
pub struct PyRun {
    pub acked: usize,
    pub confirmed: Vec<String>,
    pub errors: BTreeMap<String, usize>,
    pub named: Vec<String>,
    pub longest_gap_s: f64,
}

impl PyWriter {
    pub async fn start(r: &ReplicationFixture, login: &Login, prefix: &str) -> Result<Self> {
        let master_name = r
            .sentinel_master()
            .await?
            .ok_or_else(|| E2eError::Check(format!("{} runs no Sentinel", r.name)))?;
        let sentinels: Vec<String> = r
            .sentinel_ips()
            .await?
            .values()
            .map(|ip| format!("{ip}:26379"))
            .collect();
        let stop = std::env::temp_dir().join(format!("{}-{prefix}.stop", r.ns.name));
        let _ = std::fs::remove_file(&stop);
        let script = crate::repo_root().join("tests/clients/valkey_py_sentinel.py");
        let mut cmd = tokio::process::Command::new("python3");
        cmd.env("PYTHONPATH", crate::localkube_dir().join("python"))
            .env(
                "VALKEY_PASSWORD",
                login.password.clone().unwrap_or_default(),
            );
        if let Some(ca) = &login.ca_file {
            cmd.env("VALKEY_TLS_CA", ca);
        }
        let child = cmd
            .arg(&script)
            .args([&sentinels.join(","), &master_name, prefix])
            .arg(&stop)
            .arg("600")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| E2eError::Check(format!("python3 {}: {e}", script.display())))?;
        Ok(Self {
            child,
            stop,
            prefix: prefix.to_owned(),
        })
    }

    /// Waits until the primary holds `n` of its keys: the client found the primary and writes.
    pub async fn wait_writing(&self, r: &ReplicationFixture, n: usize) -> Result<()> {
        let key = format!("{}:{n}", self.prefix);
        wait_until(Duration::from_secs(60), "valkey-py writes", || async {
            let (_, ip) = r.primary().await?;
            let got = r.command_on(&ip, &["EXISTS", &key]).await?;
            Ok(if got.trim() == "1" {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{key} not written yet"))
            })
        })
        .await
    }

    pub async fn finish(self) -> Result<PyRun> {
        std::fs::write(&self.stop, b"")
            .map_err(|e| E2eError::Check(format!("{}: {e}", self.stop.display())))?;
        let out = tokio::time::timeout(Duration::from_secs(60), self.child.wait_with_output())
            .await
            .map_err(|_| E2eError::Check("valkey-py did not stop".into()))?
            .map_err(|e| E2eError::Check(format!("valkey-py: {e}")))?;
        let _ = std::fs::remove_file(&self.stop);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        serde_json::from_str(text.trim()).map_err(|e| {
            E2eError::Check(format!(
                "valkey-py's Sentinel client ({e}): {text} {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })
    }
}

/// Every key valkey-py had confirmed (`WAIT 1` answered ≥ 1) is on the primary with its value.
pub async fn none_lost(r: &ReplicationFixture, run: &PyRun) -> Result<()> {
    let expected: BTreeMap<String, String> = run
        .confirmed
        .iter()
        .map(|k| {
            let n = k.rsplit(':').next().unwrap_or_default();
            (k.clone(), format!("v{n}"))
        })
        .collect();
    let missing = r.missing(expected.iter()).await?;
    check(
        missing.is_empty(),
        format!(
            "{} of {} WAIT-confirmed writes lost: {:?}",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(10)]
        ),
    )
}
