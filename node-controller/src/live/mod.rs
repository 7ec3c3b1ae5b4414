//! Live config: the settings of `spec.config` that the running Valkey changes with `CONFIG SET`,
//! so that changing them restarts no pod.
//!
//! Which settings are live depends on the server's version: a table per version, read from the
//! real servers (`live-config/valkey-<version>.txt`, checked by `tests/live_config_tables.rs`).
//! The build stage leaves live settings out of the pod's revision (so they never ask for a
//! restart) but keeps them in valkey.conf (so a restarted pod comes up with them); the reconcile
//! pass then sets them on the running server. Restart-only settings change the revision and roll
//! as before, through `spec.allowedRevision`.

pub mod apply;
#[cfg(test)]
mod tables_check;

use std::collections::BTreeMap;

/// A server version as Valkey reports it (`valkey_version:9.1.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    /// `9.1.2` → 9.1; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The setting with which a server (Valkey 9.1 and later) reloads its TLS files by itself when
/// they change: how a renewed certificate reaches it without a restart.
pub const TLS_AUTO_RELOAD: &str = "tls-auto-reload-interval";
/// How often, in seconds, a TLS server looks at its files: by itself with [`TLS_AUTO_RELOAD`],
/// or when the node-controller tells an older one to (at each re-read of a ready node).
pub const TLS_RELOAD_SECONDS: u32 = 10;

/// The tables, oldest first: the settings each version changes at runtime.
const TABLES: &[(Version, &str)] = &[
    (
        Version { major: 8, minor: 0 },
        include_str!("../../live-config/valkey-8.0.txt"),
    ),
    (
        Version { major: 9, minor: 1 },
        include_str!("../../live-config/valkey-9.1.txt"),
    ),
];

/// Settings the pod template owns (its data directory, the port its probes use): never set at
/// runtime, whatever a config says.
const OWNED_BY_THE_POD: &[&str] = &["dir", "port"];

fn keys(table: &str) -> impl Iterator<Item = &str> {
    table
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Whether `key` is live on a server of `version`. The table of the newest version not newer
/// than the server is used (an older server gets the oldest). Without a version (no server has
/// answered yet) a key is live only when every table says so, so that learning the version can
/// only move a key into the live set where all versions agree.
pub fn is_live(version: Option<Version>, key: &str) -> bool {
    if OWNED_BY_THE_POD.contains(&key) {
        return false;
    }
    match version {
        Some(v) => {
            let table = TABLES
                .iter()
                .rev()
                .find(|(t, _)| *t <= v)
                .or(TABLES.first())
                .map(|(_, table)| *table)
                .unwrap_or_default();
            keys(table).any(|k| k == key)
        }
        None => TABLES
            .iter()
            .all(|(_, table)| keys(table).any(|k| k == key)),
    }
}

/// The table a version is checked against.
#[cfg(test)]
pub fn table(version: Version) -> Option<&'static str> {
    TABLES.iter().find(|(t, _)| *t == version).map(|(_, t)| *t)
}

/// `config` split into (restart-only, live) settings for a server of `version`.
pub fn split(
    config: Option<&BTreeMap<String, String>>,
    version: Option<Version>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    config
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| !is_live(version, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_valkey_reports_them() {
        assert_eq!(
            Version::parse("9.1.2"),
            Some(Version { major: 9, minor: 1 })
        );
        assert_eq!(Version::parse("8.0"), Some(Version { major: 8, minor: 0 }));
        assert_eq!(Version::parse("nine"), None);
        assert!(Version::parse("8.0.1") < Version::parse("9.1.0"));
    }

    #[test]
    fn the_table_of_the_servers_version_decides() {
        let v9 = Version::parse("9.1.2");
        let v8 = Version::parse("8.0.1");
        assert!(is_live(v9, "maxmemory-policy") && is_live(v8, "maxmemory-policy"));
        assert!(is_live(None, "maxmemory-policy"));
        // io-threads changes at runtime from 9 on; before, and when unknown, it restarts.
        assert!(is_live(v9, "io-threads"));
        assert!(!is_live(v8, "io-threads") && !is_live(None, "io-threads"));
        // 9.0 has no table of its own: 8.0's is the newest not newer.
        assert!(!is_live(Version::parse("9.0.0"), "io-threads"));
        for restart_only in ["cluster-enabled", "databases", "aclfile", "dir", "port"] {
            assert!(!is_live(v9, restart_only), "{restart_only}");
        }
        assert!(!is_live(v9, "no-such-setting"));
    }

    #[test]
    fn a_config_splits_into_restart_only_and_live() {
        let config = BTreeMap::from([
            ("cluster-enabled".to_owned(), "yes".to_owned()),
            ("maxmemory-policy".to_owned(), "allkeys-lru".to_owned()),
        ]);
        let (restart, live) = split(Some(&config), Version::parse("9.1.2"));
        assert_eq!(restart.keys().collect::<Vec<_>>(), ["cluster-enabled"]);
        assert_eq!(live.keys().collect::<Vec<_>>(), ["maxmemory-policy"]);
    }
}
