//! The replication engine with Sentinel on: Sentinel, not the operator, elects a new primary when
//! the primary fails. What the engine does beside it: it tells every Sentinel what to watch
//! (`SENTINEL MONITOR` and `SENTINEL SET`), reads which primary the Sentinels name (a majority
//! of them must agree) and follows that, and hands planned switchovers to them
//! (`SENTINEL FAILOVER`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use redis::Value;

use crate::client::ValkeyClient;
use crate::engine::{EngineError, Outcome};
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
    let mut by_name = redis::cmd("SENTINEL");
    by_name.arg("GET-MASTER-ADDR-BY-NAME").arg(master_name);
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
    let mut master = redis::cmd("SENTINEL");
    master.arg("MASTER").arg(master_name);
    let reply = client
        .command(address, &master, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let fields: BTreeMap<String, String> = value::pairs(&reply)
        .ok_or_else(|| format!("SENTINEL MASTER: {}", value::describe(&reply)))?
        .into_iter()
        .filter_map(|(k, v)| Some((k, value::text(v)?)))
        .collect();
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
            replicas: instances(client, address, "REPLICAS", master_name, timeout).await?,
            peers: instances(client, address, "SENTINELS", master_name, timeout).await?,
        }),
    })
}

/// The addresses `SENTINEL <what> <name>` lists (a map of fields per instance: `ip`, `port`).
async fn instances(
    client: &impl ValkeyClient,
    address: SocketAddr,
    what: &str,
    master_name: &str,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, String> {
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg(what).arg(master_name);
    let reply = client
        .command(address, &cmd, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let items = value::list(&reply)
        .ok_or_else(|| format!("SENTINEL {what}: {}", value::describe(&reply)))?;
    Ok(items
        .iter()
        .filter_map(|item| {
            let fields: BTreeMap<String, String> = value::pairs(item)?
                .into_iter()
                .filter_map(|(k, v)| Some((k, value::text(v)?)))
                .collect();
            let ip: IpAddr = fields.get("ip")?.parse().ok()?;
            let port: u16 = fields.get("port")?.parse().ok()?;
            Some(SocketAddr::new(ip, port))
        })
        .collect())
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
) -> Result<Outcome, EngineError> {
    if monitor {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MONITOR")
            .arg(&watch.master_name)
            .arg(primary.ip().to_string())
            .arg(primary.port())
            .arg(watch.quorum);
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
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg("CONFIG").arg("SET").arg(key).arg(value);
            ok(
                &client.command(on, &cmd, timeout).await?,
                "SENTINEL CONFIG SET",
            )?;
        }
    }
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("SET")
        .arg(&watch.master_name)
        .arg("quorum")
        .arg(watch.quorum)
        .arg("down-after-milliseconds")
        .arg(watch.down_after_ms)
        .arg("failover-timeout")
        .arg(watch.failover_timeout_ms);
    if let Some(login) = &watch.login {
        cmd.arg("auth-user")
            .arg(&login.user)
            .arg("auth-pass")
            .arg(&login.password);
    }
    ok(&client.command(on, &cmd, timeout).await?, "SENTINEL SET")
}

/// `SENTINEL FAILOVER <name>` on the Sentinel at `on`: a failover without agreement, for a
/// planned switchover.
pub async fn failover(
    client: &impl ValkeyClient,
    on: SocketAddr,
    master_name: &str,
    timeout: Duration,
) -> Result<Outcome, EngineError> {
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("FAILOVER").arg(master_name);
    ok(
        &client.command(on, &cmd, timeout).await?,
        "SENTINEL FAILOVER",
    )
}

/// `SENTINEL RESET <name>` on the Sentinel at `on`: it forgets the replicas and Sentinels it
/// knows of the name (it answers how many names it reset: one). The name is the spec's, which
/// the API allows no glob character in.
pub async fn reset(
    client: &impl ValkeyClient,
    on: SocketAddr,
    master_name: &str,
    timeout: Duration,
) -> Result<Outcome, EngineError> {
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("RESET").arg(master_name);
    match client.command(on, &cmd, timeout).await? {
        Value::Int(1) => Ok(Outcome::Done),
        other => Err(EngineError::UnexpectedReply {
            command: "SENTINEL RESET".to_owned(),
            reply: value::describe(&other),
        }),
    }
}

fn ok(reply: &Value, command: &str) -> Result<Outcome, EngineError> {
    match value::text(reply) {
        Some(text) if text == "OK" => Ok(Outcome::Done),
        _ => Err(EngineError::UnexpectedReply {
            command: command.to_owned(),
            reply: value::describe(reply),
        }),
    }
}
