//! The replication engine with Sentinel on: Sentinel, not the operator, elects a new primary when
//! the primary fails. What the engine does beside it: it tells every Sentinel what to watch
//! (`SENTINEL MONITOR` and `SENTINEL SET`), reads which primary the Sentinels name (a majority
//! of them must agree) and follows that, and hands planned switchovers to them
//! (`SENTINEL FAILOVER`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use redis::{Cmd, Value};

use crate::client::ValkeyClient;
use crate::engine::{ActionOutcome, EngineError};
use crate::valkey::commands::{self, InfoSection};
use crate::valkey::value;

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

/// What one Sentinel says about the master name it is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelState {
    pub address: SocketAddr,
    /// `None` when it does not monitor the name (new, or restarted from its config).
    pub master: Option<MasterView>,
}

/// A Sentinel's view of the master it monitors (`SENTINEL GET-MASTER-ADDR-BY-NAME` and
/// `SENTINEL MASTER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterView {
    /// The primary it names to clients.
    pub primary: SocketAddr,
    pub quorum: u32,
    pub down_after_ms: u64,
    pub failover_timeout_ms: u64,
    /// Its `flags` name a failover in progress.
    pub failing_over: bool,
    /// The replicas of the master it knows (`SENTINEL REPLICAS`: learned from the master's
    /// INFO, forgotten only by `SENTINEL RESET`).
    pub replicas: Vec<SocketAddr>,
    /// The other Sentinels watching the name it knows (`SENTINEL SENTINELS`: learned from their
    /// hellos, forgotten only by `SENTINEL RESET`).
    pub peers: Vec<SocketAddr>,
}

impl MasterView {
    /// Whether its settings are those `watch` asks for.
    pub fn as_watched(&self, watch: &Watch) -> bool {
        self.quorum == watch.quorum
            && self.down_after_ms == watch.down_after_ms
            && self.failover_timeout_ms == watch.failover_timeout_ms
    }
}

/// Every Sentinel's answer, by node name (an error kept, never dropped).
pub type Sentinels = BTreeMap<String, Result<SentinelState, String>>;

/// Reads every Sentinel concurrently.
pub async fn observe(
    client: &impl ValkeyClient,
    sentinels: &[(String, SocketAddr)],
    master_name: &str,
    timeout: Duration,
) -> Sentinels {
    let reads = sentinels.iter().map(|(name, address)| async move {
        (
            name.clone(),
            read(client, *address, master_name, timeout).await,
        )
    });
    futures::future::join_all(reads).await.into_iter().collect()
}

async fn read(
    client: &impl ValkeyClient,
    address: SocketAddr,
    master_name: &str,
    timeout: Duration,
) -> Result<SentinelState, String> {
    let by_name = commands::sentinel_get_master_addr_by_name(master_name);
    let reply = client
        .command(address, &by_name, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let Some(primary) = parse_address(&reply) else {
        // Nil: it monitors no such name.
        return match reply {
            Value::Nil => Ok(SentinelState {
                address,
                master: None,
            }),
            other => Err(format!(
                "SENTINEL GET-MASTER-ADDR-BY-NAME: {}",
                value::describe(&other)
            )),
        };
    };
    let master = commands::sentinel_master(master_name);
    let reply = client
        .command(address, &master, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let fields = text_fields(&reply)
        .ok_or_else(|| format!("SENTINEL MASTER: {}", value::describe(&reply)))?;
    let number = |key: &str| {
        fields
            .get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("SENTINEL MASTER: no {key}"))
    };
    Ok(SentinelState {
        address,
        master: Some(MasterView {
            primary,
            quorum: u32::try_from(number("quorum")?).unwrap_or(u32::MAX),
            down_after_ms: number("down-after-milliseconds")?,
            failover_timeout_ms: number("failover-timeout")?,
            failing_over: fields
                .get("flags")
                .is_some_and(|f| f.split(',').any(|f| f.starts_with("failover"))),
            replicas: instances(
                client,
                address,
                commands::sentinel_replicas(master_name),
                "SENTINEL REPLICAS",
                timeout,
            )
            .await?,
            peers: instances(
                client,
                address,
                commands::sentinel_sentinels(master_name),
                "SENTINEL SENTINELS",
                timeout,
            )
            .await?,
        }),
    })
}

/// The addresses `SENTINEL REPLICAS` or `SENTINEL SENTINELS` (`what`) lists (a map of fields
/// per instance: `ip`, `port`).
async fn instances(
    client: &impl ValkeyClient,
    address: SocketAddr,
    cmd: Cmd,
    what: &str,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, String> {
    let reply = client
        .command(address, &cmd, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let items =
        value::list(&reply).ok_or_else(|| format!("{what}: {}", value::describe(&reply)))?;
    Ok(items
        .iter()
        .filter_map(|item| Some(instance(item)?.0))
        .collect())
}

/// One instance of `SENTINEL REPLICAS` or `SENTINELS`: its address (`ip`, `port`) and fields.
fn instance(item: &Value) -> Option<(SocketAddr, BTreeMap<String, String>)> {
    let fields = text_fields(item)?;
    let ip: IpAddr = fields.get("ip")?.parse().ok()?;
    let port: u16 = fields.get("port")?.parse().ok()?;
    Some((SocketAddr::new(ip, port), fields))
}

/// A reply of field-value pairs (RESP2 flat list or RESP3 map), the values as text.
fn text_fields(reply: &Value) -> Option<BTreeMap<String, String>> {
    Some(
        value::pairs(reply)?
            .into_iter()
            .filter_map(|(k, v)| Some((k, value::text(v)?)))
            .collect(),
    )
}

/// `[ip, port]`.
fn parse_address(reply: &Value) -> Option<SocketAddr> {
    let parts = value::list(reply)?;
    let ip: IpAddr = value::text(parts.first()?)?.parse().ok()?;
    let port: u16 = value::text(parts.get(1)?)?.parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

/// Tells the Sentinel at `on` to watch `primary` as `watch` says: `SENTINEL MONITOR` when it
/// does not monitor the name yet (`monitor`) and how it logs in to its peers (`SENTINEL CONFIG
/// SET sentinel-user`, `sentinel-pass`), then `SENTINEL SET` of the timeouts, the quorum and the
/// login to the servers. The password goes over the connection only, never into a log line.
pub async fn configure(
    client: &impl ValkeyClient,
    on: SocketAddr,
    primary: SocketAddr,
    watch: &Watch,
    monitor: bool,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    if monitor {
        let cmd = commands::sentinel_monitor(&watch.master_name, primary, watch.quorum);
        ok(
            &client.command(on, &cmd, timeout).await?,
            "SENTINEL MONITOR",
        )?;
    }
    if let Some(login) = watch.login.as_ref().filter(|_| monitor) {
        // How it logs in to its peers: a Sentinel that was told nothing yet (new, or restarted
        // clean) cannot vote with them.
        for (key, value) in [
            ("sentinel-user", &login.user),
            ("sentinel-pass", &login.password),
        ] {
            let cmd = commands::sentinel_config_set(key, value);
            ok(
                &client.command(on, &cmd, timeout).await?,
                "SENTINEL CONFIG SET",
            )?;
        }
    }
    let cmd = commands::sentinel_set(
        &watch.master_name,
        watch.quorum,
        watch.down_after_ms,
        watch.failover_timeout_ms,
        watch
            .login
            .as_ref()
            .map(|login| (login.user.as_str(), login.password.as_str())),
    );
    ok(&client.command(on, &cmd, timeout).await?, "SENTINEL SET")
}

/// How long the old primary may pause writes while `to` catches up (Valkey's `FAILOVER TO`).
const HANDOVER: Duration = Duration::from_secs(5);
/// How long the Sentinel has to see the other replicas' priority 0 (it reads INFO every 10 s).
const PRIORITY_SEEN: Duration = Duration::from_secs(15);
/// How long each step of the switchover may take (the handover, Sentinel's election).
const ELECTION: Duration = Duration::from_secs(10);

/// A planned switchover handed to Sentinel.
pub struct Switchover<'a> {
    pub sentinel: SocketAddr,
    pub master_name: &'a str,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub others: &'a [SocketAddr],
}

/// A planned switchover with Sentinel that loses no write a replica confirmed. `SENTINEL
/// FAILOVER` of a live primary does not stop it: until Sentinel moves every replica, a replica
/// still following it confirms writes the new primary never gets (the e2e test lost half of a
/// writer's confirmed writes that way, and pausing the old primary's writes only moved the loss
/// to when the pause ended). So the handover is Valkey's own `FAILOVER TO` (writes paused until
/// `to` has every one, then the old primary a replica of `to`: it never takes another write),
/// and then `SENTINEL FAILOVER`, with the other replicas' `replica-priority` 0 meanwhile, so that
/// Sentinel elects `to` (already the primary) and tells its clients (`+switch-master`). Until
/// then Sentinel still names the old primary, which refuses writes (a client retries). The
/// priorities come back once Sentinel names `to` (or after [`ELECTION`]).
pub async fn switchover(
    client: &impl ValkeyClient,
    s: &Switchover<'_>,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let mut priorities = Vec::new();
    for other in s.others {
        let before = config_get(client, *other, "replica-priority", timeout).await?;
        priorities.push((*other, before));
        if let Err(e) = config_set(client, *other, "replica-priority", "0", timeout).await {
            restore(client, &priorities, timeout).await;
            return Err(e);
        }
    }
    // Sentinel reads a replica's priority from its INFO, every 10 s: elected on an older reading,
    // another replica than `to` would win.
    let deadline = tokio::time::Instant::now() + PRIORITY_SEEN;
    while !priorities_seen(client, s, timeout).await {
        if tokio::time::Instant::now() >= deadline {
            restore(client, &priorities, timeout).await;
            return Err(EngineError::UnexpectedReply {
                command: "SENTINEL REPLICAS (waiting for the priorities)".to_owned(),
                reply: "the Sentinel still sees another replica electable".to_owned(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let result = handover(client, s, timeout).await;
    if result.is_ok() {
        let deadline = tokio::time::Instant::now() + ELECTION;
        while tokio::time::Instant::now() < deadline
            && read(client, s.sentinel, s.master_name, timeout)
                .await
                .ok()
                .and_then(|state| state.master)
                .is_none_or(|m| m.primary != s.to)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    restore(client, &priorities, timeout).await;
    result
}

/// Whether the Sentinel that will carry out the failover sees priority 0 on every other replica.
async fn priorities_seen(
    client: &impl ValkeyClient,
    s: &Switchover<'_>,
    timeout: Duration,
) -> bool {
    let cmd = commands::sentinel_replicas(s.master_name);
    let Ok(reply) = client.command(s.sentinel, &cmd, timeout).await else {
        return false;
    };
    let seen: Vec<(SocketAddr, String)> = value::list(&reply)
        .unwrap_or_default()
        .iter()
        .filter_map(|item| {
            let (address, fields) = instance(item)?;
            Some((address, fields.get("slave-priority")?.clone()))
        })
        .collect();
    s.others
        .iter()
        .all(|o| seen.iter().any(|(a, p)| a == o && p == "0"))
}

/// `FAILOVER TO` on the old primary, then, once `to` serves as primary, `SENTINEL FAILOVER`.
async fn handover(
    client: &impl ValkeyClient,
    s: &Switchover<'_>,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let failover = commands::failover_to(s.to, HANDOVER);
    ok(
        &client.command(s.from, &failover, timeout).await?,
        "FAILOVER TO",
    )?;
    let deadline = tokio::time::Instant::now() + ELECTION;
    while !serves_as_primary(client, s.to, timeout).await {
        if tokio::time::Instant::now() >= deadline {
            return Err(EngineError::UnexpectedReply {
                command: "FAILOVER TO (waiting for the new primary)".to_owned(),
                reply: "it does not serve as primary".to_owned(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cmd = commands::sentinel_failover(s.master_name);
    ok(
        &client.command(s.sentinel, &cmd, timeout).await?,
        "SENTINEL FAILOVER",
    )
}

/// The replicas' priorities put back, each tried again while it refuses (a replica loading a
/// full sync refuses CONFIG): left at 0, a replica could never be elected again.
async fn restore(
    client: &impl ValkeyClient,
    priorities: &[(SocketAddr, String)],
    timeout: Duration,
) {
    for (other, before) in priorities {
        let deadline = tokio::time::Instant::now() + ELECTION;
        while config_set(client, *other, "replica-priority", before, timeout)
            .await
            .is_err()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether the server at `at` says `role:master`.
async fn serves_as_primary(client: &impl ValkeyClient, at: SocketAddr, timeout: Duration) -> bool {
    let info = commands::info(&[InfoSection::Replication]);
    client
        .command(at, &info, timeout)
        .await
        .ok()
        .as_ref()
        .and_then(value::text)
        .is_some_and(|t| t.lines().any(|l| l.trim() == "role:master"))
}

async fn config_get(
    client: &impl ValkeyClient,
    at: SocketAddr,
    key: &str,
    timeout: Duration,
) -> Result<String, EngineError> {
    let reply = client
        .command(at, &commands::config_get(&[key]), timeout)
        .await?;
    value::list(&reply)
        .and_then(|l| value::text(l.get(1)?))
        .ok_or_else(|| EngineError::UnexpectedReply {
            command: format!("CONFIG GET {key}"),
            reply: value::describe(&reply),
        })
}

async fn config_set(
    client: &impl ValkeyClient,
    at: SocketAddr,
    key: &str,
    to: &str,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let cmd = commands::config_set(key, to);
    ok(&client.command(at, &cmd, timeout).await?, "CONFIG SET")
}

/// `SENTINEL RESET <name>` on the Sentinel at `on`: it forgets the replicas and Sentinels it
/// knows of the name (it answers how many names it reset: one). The name is the spec's, which
/// the API allows no glob character in.
pub async fn reset(
    client: &impl ValkeyClient,
    on: SocketAddr,
    master_name: &str,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let cmd = commands::sentinel_reset(master_name);
    match client.command(on, &cmd, timeout).await? {
        Value::Int(1) => Ok(ActionOutcome::Done),
        other => Err(EngineError::UnexpectedReply {
            command: "SENTINEL RESET".to_owned(),
            reply: value::describe(&other),
        }),
    }
}

fn ok(reply: &Value, command: &str) -> Result<ActionOutcome, EngineError> {
    match value::text(reply) {
        Some(text) if text == "OK" => Ok(ActionOutcome::Done),
        _ => Err(EngineError::UnexpectedReply {
            command: command.to_owned(),
            reply: value::describe(reply),
        }),
    }
}
