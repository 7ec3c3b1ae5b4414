//! Bringing running servers to a [`UserSet`] without restarting them: `ACL SETUSER` for every
//! user, `ACL DELUSER` for users no longer wanted. A server is looked at every pass (one `INFO
//! server`) and changed only when it restarted (a new run id: it loaded its ACL file, which may
//! be older than the Secret) or the set changed since it was last brought in step.
//!
//! A server that does not know the operator's user (one started before the operator kept its
//! users with authentication off, or whose users were lost) is brought in step through the
//! clients' default user when that user may still manage users; otherwise it is reported: the
//! operator is locked out of it and says so rather than guessing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::{Cmd, Value};

use super::rights::{OPERATOR_USER, REPLICATION_USER};
use super::users::UserSet;
use crate::client::{ClientError, Secret, ValkeyClient};
use crate::valkey::commands::{self, InfoSection};
use crate::valkey::{Version, info, value};

/// A server to bring in step: the member's name (for reports) and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub member: String,
    pub address: SocketAddr,
}

/// How servers the operator cannot log in to are reached: other clients to try, in order (the
/// clients' default user, with its password or none), and the replication login to configure on
/// them (`masteruser`/`masterauth`), so that such a server can still sync from, and serve,
/// servers that use the operator's users.
pub struct Bootstrap<'a, B> {
    pub clients: &'a [B],
    pub replication_password: &'a Secret,
}

/// What one sync found, by member.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Members whose server holds exactly the set now.
    pub in_step: Vec<String>,
    /// Members brought in step through the default user (see [`Bootstrap`]).
    pub bootstrapped: Vec<String>,
    /// Members that did not answer; the engine reports them its own way.
    pub unreachable: Vec<String>,
    /// Members that answered but refused: the reason, in Valkey's words (never a secret).
    pub refused: Vec<(String, String)>,
}

impl SyncReport {
    /// Every target holds the set.
    pub fn everywhere(&self) -> bool {
        self.unreachable.is_empty() && self.refused.is_empty()
    }
}

/// What a server held the last time it was brought in step.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    run_id: String,
    fingerprint: String,
}

/// One parent's memory of its servers between passes. Only an optimisation: a controller that
/// starts afresh applies the set once more to every server, which changes nothing there.
#[derive(Debug, Default)]
pub struct AccessState {
    applied: Mutex<HashMap<SocketAddr, Applied>>,
    /// Since when every server has held the set of this ACL file.
    everywhere: Mutex<Option<(String, Instant)>>,
}

/// Why one server could not be brought in step.
enum Failure {
    Unreachable,
    Refused(String),
}

impl AccessState {
    /// Since when every server has held `users` (as last seen by [`AccessState::sync`]).
    pub fn everywhere_since(&self, users: &UserSet) -> Option<Instant> {
        self.everywhere_since_file(&users.acl_file())
    }

    /// [`AccessState::everywhere_since`] for the set whose ACL file is `acl_file`.
    pub fn everywhere_since_file(&self, acl_file: &str) -> Option<Instant> {
        let id = super::users::password_hash(acl_file);
        lock(&self.everywhere)
            .as_ref()
            .filter(|(known, _)| *known == id)
            .map(|(_, since)| *since)
    }

    /// Brings every target in step with `users`.
    pub async fn sync<C: ValkeyClient, B: ValkeyClient>(
        &self,
        client: &C,
        bootstrap: &Bootstrap<'_, B>,
        targets: &[Target],
        users: &UserSet,
        timeout: Duration,
    ) -> SyncReport {
        let runs = targets.iter().map(|target| async move {
            let result = self
                .sync_one(client, bootstrap, target.address, users, timeout)
                .await;
            (target.member.clone(), result)
        });
        let mut report = SyncReport::default();
        for (member, result) in join_all(runs).await {
            match result {
                Ok(false) => report.in_step.push(member),
                Ok(true) => {
                    report.in_step.push(member.clone());
                    report.bootstrapped.push(member);
                }
                Err(Failure::Unreachable) => report.unreachable.push(member),
                Err(Failure::Refused(why)) => report.refused.push((member, why)),
            }
        }
        let mut everywhere = lock(&self.everywhere);
        let id = file_id(users);
        if report.everywhere() && !targets.is_empty() {
            if everywhere.as_ref().is_none_or(|(known, _)| *known != id) {
                *everywhere = Some((id, Instant::now()));
            }
        } else {
            *everywhere = None;
        }
        report
    }

    /// `Ok(true)` when the server had to be reached through the bootstrap.
    async fn sync_one<C: ValkeyClient, B: ValkeyClient>(
        &self,
        client: &C,
        bootstrap: &Bootstrap<'_, B>,
        address: SocketAddr,
        users: &UserSet,
        timeout: Duration,
    ) -> Result<bool, Failure> {
        let (run_id, version) = match server_identity(client, address, timeout).await {
            Ok(identity) => identity,
            Err(e) if login_refused(&e) => {
                return self
                    .through_bootstrap(bootstrap, address, users, timeout)
                    .await
                    .map(|()| true);
            }
            Err(_) => return Err(Failure::Unreachable),
        };
        let fingerprint = users.fingerprint(version);
        let wanted = Applied {
            run_id,
            fingerprint,
        };
        if lock(&self.applied).get(&address) == Some(&wanted) {
            return Ok(false);
        }
        apply(client, address, users, version, timeout).await?;
        lock(&self.applied).insert(address, wanted);
        Ok(false)
    }

    async fn through_bootstrap<B: ValkeyClient>(
        &self,
        bootstrap: &Bootstrap<'_, B>,
        address: SocketAddr,
        users: &UserSet,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let mut last = String::from("no other login to try");
        for client in bootstrap.clients {
            let (run_id, version) = match server_identity(client, address, timeout).await {
                Ok(identity) => identity,
                Err(e) if login_refused(&e) => {
                    last = e.to_string();
                    continue;
                }
                Err(_) => return Err(Failure::Unreachable),
            };
            // Replicas of this server, and this server as a replica, log in as the replication
            // user from now on, as servers started with the operator's configuration do (set
            // first: the default user loses its administration with the users below).
            for (key, value) in [
                ("masteruser", REPLICATION_USER),
                ("masterauth", bootstrap.replication_password.expose()),
            ] {
                let cmd = commands::config_set(key, value);
                if let Err(failure) = run(client, address, &cmd, timeout).await {
                    return Err(locked_out(failure));
                }
            }
            apply(client, address, users, version, timeout)
                .await
                .map_err(locked_out)?;
            lock(&self.applied).insert(
                address,
                Applied {
                    run_id,
                    fingerprint: users.fingerprint(version),
                },
            );
            return Ok(());
        }
        Err(Failure::Refused(format!(
            "the server refuses the operator's user and every other login ({last}): the operator is locked out of it"
        )))
    }
}

/// A refusal met through the bootstrap: the clients' user may not manage users either.
fn locked_out(failure: Failure) -> Failure {
    match failure {
        Failure::Refused(why) => Failure::Refused(format!(
            "the server refuses the operator's user and the clients' user may not manage users ({why}): the operator is locked out of it"
        )),
        other => other,
    }
}

/// Removes the users the set no longer has, then gives every user of the set its login and
/// rights (in [`UserSet::setusers`] order).
async fn apply<C: ValkeyClient>(
    client: &C,
    address: SocketAddr,
    users: &UserSet,
    version: Version,
    timeout: Duration,
) -> Result<(), Failure> {
    let mut commands = users.setusers(version, false).into_iter();
    // The operator's own user first: what follows may need what it gains.
    if let Some(first) = commands.next() {
        run(client, address, &first, timeout).await?;
    }
    // Fenced clients are switched on, and users that start with fewer rights get theirs, only
    // where the engine has admitted the server. Read on the
    // same connection as the commands that follow: a server that restarts in between breaks it,
    // and those commands fail rather than reach the new, unjudged process.
    if users.depends_on_admission() && admitted(client, address, timeout).await? {
        commands = users.setusers(version, true).into_iter();
        commands.next();
    }
    let reply = run(client, address, &commands::acl_users(), timeout).await?;
    let wanted: Vec<&str> = users.names().collect();
    let existing: Vec<String> = match reply {
        Value::Array(items) | Value::Set(items) => items.iter().filter_map(value::text).collect(),
        _ => Vec::new(),
    };
    for name in existing {
        if !wanted.contains(&name.as_str()) && name != OPERATOR_USER {
            run(client, address, &commands::acl_deluser(&name), timeout).await?;
        }
    }
    for cmd in commands {
        run(client, address, &cmd, timeout).await?;
    }
    Ok(())
}

/// Whether the engine has admitted the server: its replication user is on (see the engine's
/// fence). A server without that user has not been admitted.
async fn admitted<C: ValkeyClient>(
    client: &C,
    address: SocketAddr,
    timeout: Duration,
) -> Result<bool, Failure> {
    let reply = run(
        client,
        address,
        &commands::acl_getuser(REPLICATION_USER),
        timeout,
    )
    .await?;
    Ok(crate::valkey::acl::user_enabled(&reply).unwrap_or(false))
}

async fn run<C: ValkeyClient>(
    client: &C,
    address: SocketAddr,
    cmd: &Cmd,
    timeout: Duration,
) -> Result<Value, Failure> {
    client
        .command(address, cmd, timeout)
        .await
        .map_err(|e| match e {
            ClientError::Server { .. } => Failure::Refused(e.to_string()),
            _ => Failure::Unreachable,
        })
}

/// The server's run id (new at every start) and version, from `INFO server`.
async fn server_identity<C: ValkeyClient>(
    client: &C,
    address: SocketAddr,
    timeout: Duration,
) -> Result<(String, Version), ClientError> {
    let reply = client
        .command(address, &commands::info(&[InfoSection::Server]), timeout)
        .await?;
    let unreadable = |what: String| ClientError::Io {
        addr: address,
        command: "INFO".into(),
        message: what,
    };
    let text = value::text(&reply).ok_or_else(|| unreadable(value::describe(&reply)))?;
    let info = info::parse(&text).map_err(|e| unreadable(e.to_string()))?;
    let version = info
        .server_version()
        .map_err(|e| unreadable(e.to_string()))?;
    let run_id = info.get("run_id").unwrap_or_default().to_owned();
    Ok((run_id, version))
}

/// The server refused the login itself (unknown user, wrong password, user off), as opposed to
/// not being reachable.
fn login_refused(error: &ClientError) -> bool {
    let text = match error {
        ClientError::Connect { message, .. } | ClientError::Io { message, .. } => message,
        ClientError::Server { message, .. } => message,
        ClientError::Timeout { .. } => return false,
    };
    [
        "WRONGPASS",
        "NOAUTH",
        "invalid username-password",
        "AuthenticationFailed",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Identifies a set by its ACL file (the same on every version).
fn file_id(users: &UserSet) -> String {
    super::users::password_hash(&users.acl_file())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing held here can be left half-updated by a panic.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
