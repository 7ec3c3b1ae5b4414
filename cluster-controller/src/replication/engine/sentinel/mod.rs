//! The replication engine with Sentinel on: Sentinel, not the operator, elects a new primary when
//! the primary fails. What the engine does beside it: it tells every Sentinel what to watch
//! (`SENTINEL MONITOR` and `SENTINEL SET`), reads which primary the Sentinels name (a majority
//! of them must agree) and follows that, and hands planned switchovers to them
//! (`SENTINEL FAILOVER`).

use std::fmt;

/// What every Sentinel is told to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The name clients ask for (`spec.sentinel.masterName`, default the replication's).
    pub master_name: String,
    /// How many Sentinels must hold the primary down before a failover starts.
    pub quorum: u32,
    /// How many Sentinels run: a majority of them is what the engine believes.
    pub sentinels: u32,
    pub down_after_ms: u64,
    pub failover_timeout_ms: u64,
    /// The user and password Sentinel logs in to the servers with (`auth-user`/`auth-pass`),
    /// when the servers require one.
    pub login: Option<Login>,
}

/// A user and its password: shown without the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    pub password: String,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Login {{ user: {:?}, password: <hidden> }}", self.user)
    }
}
