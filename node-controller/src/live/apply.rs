//! Setting the live settings on the running server: one `CONFIG SET` with every live setting,
//! which Valkey applies all or none, sent again only when the server (its run id) or the
//! settings changed since it last succeeded.

use std::collections::BTreeMap;
use std::time::Duration;

use sha2::{Digest, Sha256};

use plumbing::valkey_tls::Trust;

use crate::probe::{self, Credentials};

const TIMEOUT: Duration = Duration::from_secs(5);

/// What became of the live settings on this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveSettingsOutcome {
    /// The running server has them (set now, or earlier on this same server process).
    Applied { settings: usize },
    /// Valkey refused a value; its words, and the settings sent (names only).
    Refused { keys: Vec<String>, answer: String },
    /// They could not be set for another reason (no permission, no answer): the next pass tries
    /// again, and nothing is held back for it.
    NotSet { answer: String },
    /// Not sent: the pod runs `running`, an older revision than `desired`, and the settings
    /// belong to the server of `desired` (an upgrade's server may know values the running,
    /// older one refuses, and a refusal would hold the very roll that brings the newer one).
    AwaitingRestart { running: String, desired: String },
}

/// What was last set successfully on a server process: its run id and the settings' hash.
pub fn fingerprint(run_id: &str, live: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(run_id.as_bytes());
    for (key, value) in live {
        hasher.update([0]);
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(value.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Whether the live settings wait for the pod's restart instead of going to its server: when the
/// pod runs a revision (`running`) other than the desired one. A pod without a revision is
/// older than revisions and is sent them.
pub fn awaiting_restart(running: Option<String>, desired: &str) -> Option<LiveSettingsOutcome> {
    running.filter(|running| running != desired).map(|running| {
        LiveSettingsOutcome::AwaitingRestart {
            running,
            desired: desired.to_owned(),
        }
    })
}

/// `CONFIG SET` of every live setting on the server at `ip`.
pub async fn set(
    ip: &str,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
    live: &BTreeMap<String, String>,
) -> LiveSettingsOutcome {
    if live.is_empty() {
        return LiveSettingsOutcome::Applied { settings: 0 };
    }
    let sent = || live.keys().cloned().collect::<Vec<_>>();
    let result = tokio::time::timeout(TIMEOUT, async {
        let mut connection = probe::connect(ip, credentials, trust).await?;
        let mut command = redis::cmd("CONFIG");
        command.arg("SET");
        for (key, value) in live {
            command.arg(key).arg(value);
        }
        command.query_async::<()>(&mut connection).await
    })
    .await;
    match result {
        Ok(Ok(())) => LiveSettingsOutcome::Applied {
            settings: live.len(),
        },
        // Only a value Valkey refused is the spec's fault; a user without CONFIG SET, a lost
        // connection or a busy server is not.
        Ok(Err(e))
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
        {
            LiveSettingsOutcome::Refused {
                keys: sent(),
                answer: e.to_string(),
            }
        }
        Ok(Err(e)) => LiveSettingsOutcome::NotSet {
            answer: probe::describe(ip, &e),
        },
        Err(_) => LiveSettingsOutcome::NotSet {
            answer: probe::no_answer(ip),
        },
    }
}

/// Tells a TLS server that does not reload its files by itself (older than Valkey 9.1) to read
/// them again: `CONFIG SET` of the same paths reloads them (Valkey marks these settings
/// volatile), so a renewed certificate that the kubelet wrote into the pod is served without a
/// restart. Valkey reads the files all or none: a bad set leaves the current certificate in
/// place and is answered with an error, returned here in Valkey's words.
pub async fn reload_tls(
    ip: &str,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
) -> Result<(), String> {
    use valkey_api::contract::{TLS_CA_KEY, TLS_CERT_KEY, TLS_DIR, TLS_KEY_KEY};
    let result = tokio::time::timeout(TIMEOUT, async {
        let mut connection = probe::connect(ip, credentials, trust).await?;
        let mut command = redis::cmd("CONFIG");
        command.arg("SET");
        for (setting, key) in [
            ("tls-cert-file", TLS_CERT_KEY),
            ("tls-key-file", TLS_KEY_KEY),
            ("tls-ca-cert-file", TLS_CA_KEY),
        ] {
            command.arg(setting).arg(format!("{TLS_DIR}/{key}"));
        }
        command.query_async::<()>(&mut connection).await
    })
    .await;
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(probe::describe(ip, &e)),
        Err(_) => Err(probe::no_answer(ip)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pod_on_an_older_revision_waits_for_its_restart() {
        assert_eq!(awaiting_restart(Some("r2".into()), "r2"), None);
        assert_eq!(awaiting_restart(None, "r2"), None);
        assert_eq!(
            awaiting_restart(Some("r1".into()), "r2"),
            Some(LiveSettingsOutcome::AwaitingRestart {
                running: "r1".into(),
                desired: "r2".into()
            })
        );
    }

    #[test]
    fn a_new_server_or_new_settings_change_the_fingerprint() {
        let live = BTreeMap::from([("maxmemory-policy".to_owned(), "allkeys-lru".to_owned())]);
        let other = BTreeMap::from([("maxmemory-policy".to_owned(), "noeviction".to_owned())]);
        assert_eq!(fingerprint("run1", &live), fingerprint("run1", &live));
        assert_ne!(fingerprint("run1", &live), fingerprint("run2", &live));
        assert_ne!(fingerprint("run1", &live), fingerprint("run1", &other));
    }
}
