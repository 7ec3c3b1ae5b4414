//! What every parent kind's context shares: the controller's settings, and what it keeps per
//! object (a cluster, a replication) between passes: its engine, its memory, the objects last
//! applied beside its members (forgotten when the object goes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plumbing::ObjectKey;
use plumbing::valkey_tls::Trust;

use super::auth;
use crate::access::rights::OPERATOR_USER;
use crate::access::{AccessState, OperatorPasswords};
use crate::client::Credentials;

/// How the controller behaves, from its flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a client user's previous password keeps working once every server accepts the
    /// new one: the time clients have to pick up the new value of the Secret.
    pub password_rotation_grace: Duration,
    /// The namespace the controllers' pods run in (`$POD_NAMESPACE`), whose operator pods the
    /// clusters' NetworkPolicies let in; none when the controller runs outside the cluster.
    pub operator_namespace: Option<String>,
    /// How long a cluster must have been steady before a planned failover spreads its primaries
    /// apart (the engine's `Desired::spread_after`).
    pub spread_after: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            password_rotation_grace: Duration::from_secs(120),
            operator_namespace: None,
            spread_after: Duration::from_secs(300),
        }
    }
}

/// What the controller remembers of one parent (a cluster, a replication) between passes.
#[derive(Debug, Default)]
pub struct ParentMemory {
    /// Which servers hold which users.
    pub access: AccessState,
    /// Which Sentinels (a replication's, with Sentinel on) hold which users.
    pub sentinel_users: crate::access::sentinels::SentinelUsers,
    /// The operator's passwords last used: kept so that losing both of the cluster's Secrets
    /// while the controller runs does not lock it out.
    passwords: Mutex<Option<OperatorPasswords>>,
    /// The clients' password the operator generated, as last read: kept so that losing its
    /// Secret and the operator's copy together while the controller runs locks no client out.
    client_password: Mutex<Option<crate::client::Secret>>,
    /// The CA the servers' certificates were last verified against (with TLS): what the
    /// engine's safety rules reach the servers with while the TLS stage cannot run.
    trust: Mutex<Option<Trust>>,
    /// The operator's CA (with TLS and no certificate of the user's), as last used: what brings
    /// its Secret back when both it and the operator's copy are gone while the controller runs.
    ca: Mutex<Option<crate::tls::Pem>>,
    /// The other controller last found holding the cluster, so it is announced once.
    other_holder: Mutex<Option<String>>,
    /// The primary this controller last recorded in the parent's status (a replication's),
    /// which the cache may not show yet: a decision never acts on a record older than its own
    /// last write. Forgotten when another controller holds the parent.
    primary_written: Mutex<Option<String>>,
    /// The PodMonitor last applied or deleted (as JSON, `null` for deleted), likewise.
    pod_monitor: Mutex<Option<String>>,
    /// Whether the cluster held keys when a pass looked (sticky): what tells a primary that lost
    /// its data from one that came up new (see the engine's `Desired::held_keys`).
    held_keys: std::sync::atomic::AtomicBool,
    /// Since when the passes found the cluster steady with nothing to do (since the first of
    /// them); none when the last did not.
    steady_since: Mutex<Option<std::time::Instant>>,
    /// A restore's plan (`spec.restoreFrom`), once read from the backup and its store: not read
    /// again each pass.
    restore_plan: Mutex<Option<Arc<Vec<crate::parent::restore::ShardRestore>>>>,
    /// The append-only file of each restored first member, as the last pass saw it.
    restore_aof: Mutex<HashMap<String, crate::parent::restore::Aof>>,
}

impl ParentMemory {
    /// Records whether this pass found the cluster steady; true when the one before did too.
    pub fn note_steady(&self, steady: bool) -> bool {
        let mut since = self.steady_since.lock().unwrap_or_else(|e| e.into_inner());
        let before = since.is_some();
        if !steady {
            *since = None;
        } else if !before {
            *since = Some(std::time::Instant::now());
        }
        before && steady
    }

    /// How long the passes have found the cluster steady, from the first of them; zero when the
    /// last did not. Forgotten with the controller: a new one waits the whole time again.
    pub fn steady_for(&self) -> Duration {
        self.steady_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// The restore's plan, if read.
    pub fn restore_plan(&self) -> Option<Arc<Vec<crate::parent::restore::ShardRestore>>> {
        self.restore_plan
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn remember_restore_plan(&self, plan: Arc<Vec<crate::parent::restore::ShardRestore>>) {
        *self.restore_plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
    }

    /// A restored first member's append-only file as last seen.
    pub fn restore_aof(&self, member: &str) -> Option<crate::parent::restore::Aof> {
        self.restore_aof
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(member)
            .copied()
    }

    pub fn note_restore_aof(&self, member: &str, aof: Option<crate::parent::restore::Aof>) {
        let mut seen = self.restore_aof.lock().unwrap_or_else(|e| e.into_inner());
        match aof {
            Some(aof) => seen.insert(member.to_owned(), aof),
            None => seen.remove(member),
        };
    }

    /// Whether a pass of this controller saw the cluster hold keys.
    pub fn held_keys(&self) -> bool {
        self.held_keys.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records what a pass saw: any member holding a key.
    pub fn note_keys(&self, observed: &crate::engine::Observation) {
        let any = observed
            .members
            .values()
            .filter_map(|reach| reach.state())
            .any(|state| state.keys() > 0);
        if any {
            self.held_keys
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn passwords(&self) -> Option<OperatorPasswords> {
        self.passwords
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records that `holder` (another controller, or none) holds the cluster; true when that is
    /// news.
    pub fn note_holder(&self, holder: Option<&str>) -> bool {
        let mut known = self.other_holder.lock().unwrap_or_else(|e| e.into_inner());
        let news = known.as_deref() != holder;
        *known = holder.map(str::to_owned);
        if holder.is_some() {
            // What the other controller records is newer than anything this one wrote.
            *self
                .primary_written
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
        news
    }

    pub fn primary_written(&self) -> Option<String> {
        self.primary_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn note_primary_written(&self, primary: Option<&str>) {
        *self
            .primary_written
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = primary.map(str::to_owned);
    }

    pub fn pod_monitor_applied(&self) -> Option<String> {
        self.pod_monitor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn remember_pod_monitor(&self, applied: String) {
        *self.pod_monitor.lock().unwrap_or_else(|e| e.into_inner()) = Some(applied);
    }

    pub fn client_password(&self) -> Option<String> {
        self.client_password
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|p| p.expose().to_owned())
    }

    pub fn remember_client_password(&self, password: &str) {
        *self
            .client_password
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(crate::client::Secret::new(password));
    }

    pub fn ca(&self) -> Option<crate::tls::Pem> {
        self.ca.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn remember_ca(&self, ca: &crate::tls::Pem) {
        *self.ca.lock().unwrap_or_else(|e| e.into_inner()) = Some(ca.clone());
    }

    /// What the engine last reached the servers with: the operator's credentials and, with
    /// `tls`, the CA it verified them against; `None` when either is not known (the controller
    /// started while a Secret was missing).
    pub fn last_login(&self, tls: bool) -> Option<(Credentials, Option<Trust>)> {
        let trust = self.trust().filter(|_| tls);
        if tls && trust.is_none() {
            return None;
        }
        let passwords = self.passwords()?;
        Some((Credentials::user(OPERATOR_USER, passwords.operator), trust))
    }

    pub fn trust(&self) -> Option<Trust> {
        self.trust.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn remember_trust(&self, trust: &Trust) {
        *self.trust.lock().unwrap_or_else(|e| e.into_inner()) = Some(trust.clone());
    }

    pub fn remember_passwords(&self, passwords: &OperatorPasswords) {
        *self.passwords.lock().unwrap_or_else(|e| e.into_inner()) = Some(passwords.clone());
    }
}

/// What a controller keeps of each object (a cluster, a replication) between passes: its engine,
/// made anew when what it was made with changes (told by a fingerprint), and its memory. Both kinds'
/// contexts keep them here, so that forgetting an object drops them together.
pub struct Kept<E> {
    engines: Mutex<HashMap<ObjectKey, (String, E)>>,
    memory: Mutex<HashMap<ObjectKey, Arc<ParentMemory>>>,
}

impl<E> Default for Kept<E> {
    fn default() -> Self {
        Self {
            engines: Mutex::new(HashMap::new()),
            memory: Mutex::new(HashMap::new()),
        }
    }
}

impl<E: Clone> Kept<E> {
    /// What the controller remembers of the object `key`.
    pub fn memory(&self, key: &ObjectKey) -> Arc<ParentMemory> {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// The object's engine: the one kept while `fingerprint` is the one it was made with, else
    /// one made by `make`.
    pub fn engine(&self, key: &ObjectKey, fingerprint: String, make: impl FnOnce() -> E) -> E {
        let mut engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, engine)) = engines.get(key)
            && *known == fingerprint
        {
            return engine.clone();
        }
        let engine = make();
        engines.insert(key.clone(), (fingerprint, engine.clone()));
        engine
    }

    /// Drops what is kept of `key` (its object is gone).
    pub fn forget(&self, key: &ObjectKey) {
        self.engines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// How many objects have an engine: what `forget` must bring down.
    #[cfg(test)]
    pub fn engines(&self) -> usize {
        self.engines.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A short fingerprint of what an engine is made with: the operator's password (none: empty) and,
/// with TLS, the CA it verifies the servers against. An engine made with others is outdated.
pub fn engine_fingerprint(credentials: &Credentials, trust: Option<&Trust>) -> String {
    let mut fingerprint = credentials
        .password
        .as_ref()
        .map(|p| auth::fingerprint(p.expose()))
        .unwrap_or_default();
    if let Some(trust) = trust {
        fingerprint.push_str(&auth::fingerprint(&String::from_utf8_lossy(trust.pem())));
    }
    fingerprint
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hold before a spreading failover counts from the first of the steady passes in a
    /// row, and starts again after any pass that was not.
    #[test]
    fn steadiness_counts_from_the_first_steady_pass_in_a_row() {
        let memory = ParentMemory::default();
        assert_eq!(memory.steady_for(), Duration::ZERO);
        assert!(!memory.note_steady(true), "the first steady pass");
        std::thread::sleep(Duration::from_millis(20));
        assert!(memory.note_steady(true), "still steady");
        let first = memory.steady_for();
        assert!(first >= Duration::from_millis(20), "{first:?}");
        assert!(!memory.note_steady(false));
        assert_eq!(memory.steady_for(), Duration::ZERO);
        assert!(!memory.note_steady(true));
        assert!(memory.steady_for() < first, "starts again");
    }
}
