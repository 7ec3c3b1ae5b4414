//! `valkey-cli --cluster ...` of the cluster's own Valkey version, run on the host against pod IPs.

use std::path::PathBuf;
use std::time::Duration;

use crate::{E2eError, Result};

/// The cli of the localkube image an image reference names (`valkey/valkey:9.1` → `valkey-9.1`).
pub fn cli_for(image: &str) -> PathBuf {
    let tag = image.rsplit(':').next().unwrap_or("9.1");
    crate::localkube_dir().join(format!("images/valkey-{tag}/bin/valkey-cli"))
}

/// Runs `cli` with `args` (no password: the bare clusters have none); its output, or an error
/// with it when the cli fails or outlives `within`.
pub async fn run(cli: &PathBuf, args: &[&str], within: Duration) -> Result<String> {
    let mut cmd = tokio::process::Command::new(cli);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let what = format!("valkey-cli {}", args.join(" "));
    let out = tokio::time::timeout(within, cmd.output())
        .await
        .map_err(|_| E2eError::Check(format!("{what} timed out after {within:?}")))?
        .map_err(|source| E2eError::Spawn {
            program: cli.display().to_string(),
            source,
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // valkey-cli exits 0 after some failures it only prints ("[ERR] ...", "... failed: ..."):
    // those count too.
    if out.status.success() && !text.contains("[ERR]") && !text.contains("failed") {
        Ok(text)
    } else {
        Err(E2eError::Check(format!("{what} failed: {text}")))
    }
}
