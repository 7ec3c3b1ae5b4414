//! The backup benchmark (`bench_backup`): a ValkeyBackup of a filled ValkeyCluster and a new
//! ValkeyCluster restored from it, each beside what a person would do by hand with Valkey's own
//! programs, measured in the same run on the same data:
//!
//! - backup: the operator (a ValkeyBackup from creation to Completed) beside `valkey-cli --rdb`
//!   against each shard's member the backup captured from, all shards at once and one after the
//!   other, from the host;
//! - restore: the operator (a ValkeyCluster with `restoreFrom` from creation to Ready) beside a
//!   valkey-server of the host loading each shard's snapshot (the backup's own objects, fetched
//!   from the store first, untimed), all at once and one after the other; and an empty cluster of
//!   the same shape formed, since a restore forms one too.
//!
//! Every key is read back from the restored cluster, and each loaded snapshot must hold its
//! shard's keys: a lost key fails the run, a time never does. Figures go to
//! `bench/results/backup.json` and the section `backup` of `docs/benchmarks.md`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use valkey_api::v1alpha1::{BackupPhase, ClusterState, ValkeyBackup, ValkeyCluster};

use crate::backups::{self, TempDir};
use crate::bench::env_or;
use crate::cluster::{ClusterFixture, ready_pod_ip};
use crate::record::Record;
use crate::resharding::data::{Dataset, load_as, read_back_as};
use crate::resharding::report::{Machine, machine};
use crate::resharding::view::ClusterView;
use crate::{E2eError, Result, check};

/// The data set and the clusters' shape: `BENCH_BACKUP_KEYS` (default 1,000,000) keys whose
/// values average `BENCH_BACKUP_VALUE_BYTES` (default 512; each between half and one and a half
/// times that), from `BENCH_SEED`; `BENCH_BACKUP_SHARDS` shards (default 3) of one replica each.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub keys: u64,
    pub value_bytes: u64,
    pub seed: u64,
    pub shards: usize,
    pub replicas: usize,
}

impl Profile {
    pub fn from_env() -> Self {
        Self {
            keys: env_or("BENCH_BACKUP_KEYS", 1_000_000),
            value_bytes: env_or("BENCH_BACKUP_VALUE_BYTES", 512),
            seed: env_or("BENCH_SEED", 1),
            shards: env_or("BENCH_BACKUP_SHARDS", 3usize).max(1),
            replicas: 1,
        }
    }

    pub fn command(&self) -> String {
        format!(
            "BENCH_BACKUP_KEYS={} BENCH_BACKUP_VALUE_BYTES={} BENCH_BACKUP_SHARDS={} BENCH_SEED={} \
             cargo test --workspace --test bench -- --ignored --nocapture bench_backup",
            self.keys, self.value_bytes, self.shards, self.seed
        )
    }

    fn spec(&self) -> String {
        format!("{{shards: {}, replicas: {}}}", self.shards, self.replicas)
    }

    fn members(&self) -> usize {
        self.shards * (1 + self.replicas)
    }

    /// How long any one step may take: generous, and growing with the data.
    fn within(&self) -> Duration {
        Duration::from_secs(300 + self.keys / 1000)
    }
}

/// One shard's part of a way.
#[derive(Debug, Clone, Serialize)]
pub struct ShardFigure {
    pub index: usize,
    /// The ValkeyNode it was captured from (backup), or the object loaded (restore).
    pub from: String,
    pub bytes: u64,
    /// None where it is not measured per shard (the operator's restore); whole seconds for the
    /// operator's backup (its status's times).
    pub seconds: Option<f64>,
}

/// One way of doing one operation.
#[derive(Debug, Clone, Serialize)]
pub struct Way {
    /// `backup` or `restore`.
    pub operation: &'static str,
    /// `operator`, `valkey-cli --rdb, parallel`, ...
    pub way: String,
    pub seconds: f64,
    /// The snapshots' bytes (RDB) it wrote or loaded.
    pub bytes: u64,
    pub mb_per_s: f64,
    pub shards: Vec<ShardFigure>,
}

impl Way {
    fn new(operation: &'static str, way: &str, seconds: f64, shards: Vec<ShardFigure>) -> Self {
        let bytes = shards.iter().map(|s| s.bytes).sum();
        Self {
            operation,
            way: way.to_owned(),
            seconds,
            bytes,
            mb_per_s: mb_per_s(bytes, seconds),
            shards,
        }
    }
}

fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

/// The operator's seconds over another way's: below 1 the operator is faster.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub operation: &'static str,
    /// The operator's way.
    pub of: String,
    pub over: String,
    pub value: f64,
}

/// What the operator's backup says of itself, and the restore's split.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorDetail {
    /// The backup's status: startTime to completionTime (whole seconds, as the status has them).
    pub backup_status_seconds: f64,
    /// Each shard's capture attempts (1 when nothing went wrong).
    pub backup_attempts: Vec<i64>,
    /// From the restored cluster's creation to every one of its pods Ready (the first members
    /// Ready only once their snapshot is fetched, checked and loaded).
    pub restore_pods_ready_s: f64,
    /// From the first Ready to Ready with every member having let its snapshot go (the
    /// append-only file written and the member restarted); about 0 when the members let go
    /// before the cluster was first Ready. Polled every 0.5 s.
    pub restore_let_go_s: f64,
    /// The empty cluster of the same shape: from creation to every pod Ready, and to Ready.
    pub empty_pods_ready_s: f64,
    pub empty_ready_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sizes {
    pub keys: u64,
    pub value_bytes_mean: u64,
    pub value_bytes_min: u64,
    pub value_bytes_max: u64,
    /// Key and value bytes of every key.
    pub total_bytes: u64,
    pub seed: u64,
    pub shards: usize,
    pub replicas: usize,
    /// Every shard's snapshot, as the backup's status counts them.
    pub rdb_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub command: String,
    pub machine: Machine,
    pub valkey_version: String,
    pub sizes: Sizes,
    /// Seconds to write the keys (pipelined, to each slot's owner): not compared with anything.
    pub fill_seconds: f64,
    pub ways: Vec<Way>,
    pub ratios: Vec<Ratio>,
    pub operator: OperatorDetail,
    /// Keys read back from the restored cluster with their value, and lost (0, or the run fails).
    pub keys_intact: u64,
    pub keys_lost: u64,
    /// Seconds since the Unix epoch when the run ended.
    pub finished_at: u64,
}

/// Runs the benchmark; its report (also written, see [`write`]).
pub async fn run(profile: &Profile) -> Result<Report> {
    let data = Dataset::new(profile.keys, profile.value_bytes, profile.seed);
    let within = profile.within();
    quiet().await;
    let mut c = ClusterFixture::start("bench-backup", "source", &profile.spec()).await?;
    let _store_turn = crate::pool::object_store().await;
    c.wait_ready(within).await?;
    backups::credentials(&c.ns).await?;

    // 1. Fill.
    let password = c.password().await?;
    let view = view_of(&c).await?;
    let t = Instant::now();
    load_as(&data, &view, password.as_deref()).await?;
    let fill_seconds = t.elapsed().as_secs_f64();
    println!(
        "bench_backup: {} keys written in {fill_seconds:.1} s",
        data.keys
    );

    // 2. The operator's backup, from creation to Completed as a watch saw it.
    let backups_seen = Record::start(c.ns.api::<ValkeyBackup>(), None).await?;
    let created = Instant::now();
    c.ns.apply(&backups::backup_of(
        "ValkeyCluster",
        "bench",
        &c.name,
        backups::STORE_URL,
        "store",
    ))
    .await?;
    let status = backups::finished_in(&c.ns, "bench", within).await?;
    backups::completed("bench", &status)?;
    let done = c.ns.api::<ValkeyBackup>().get("bench").await?;
    backups_seen
        .caught_up(&done, Duration::from_secs(30))
        .await?;
    let completed_at = backups_seen
        .versions_of("bench")
        .into_iter()
        .find(|v| {
            v.object
                .status
                .as_ref()
                .is_some_and(|s| s.phase == Some(BackupPhase::Completed))
        })
        .map(|v| v.at)
        .ok_or_else(|| E2eError::Check("the watch never saw the backup Completed".into()))?;
    let shards = status.shards.clone().unwrap_or_default();
    check(
        shards.len() == profile.shards,
        format!("{} shards in the backup's status", shards.len()),
    )?;
    let operator_backup = Way::new(
        "backup",
        "operator",
        completed_at
            .saturating_duration_since(created)
            .as_secs_f64(),
        shards
            .iter()
            .map(|s| ShardFigure {
                index: usize::try_from(s.index).unwrap_or(0),
                from: s.member.clone().unwrap_or_default(),
                bytes: s.bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0),
                seconds: Some(between(
                    s.start_time.as_deref(),
                    s.completion_time.as_deref(),
                )),
            })
            .collect(),
    );
    println!(
        "bench_backup: the operator's backup Completed {:.2} s after its creation ({} bytes)",
        operator_backup.seconds, operator_backup.bytes
    );

    // 3. valkey-cli --rdb against the very members the backup captured from.
    let mut members = Vec::new();
    for s in &shards {
        let name = s.member.clone().unwrap_or_default();
        let node =
            c.ns.api::<valkey_api::v1alpha1::ValkeyNode>()
                .get(&name)
                .await?;
        let ip = ready_pod_ip(&node)
            .ok_or_else(|| E2eError::Check(format!("{name} has no ready pod")))?;
        let (user, password) = c.admin_login(&ip).await?;
        members.push(Member {
            index: usize::try_from(s.index).unwrap_or(0),
            name,
            ip,
            user,
            password,
        });
    }
    let files = TempDir::new("bench-backup-files")?;
    let cli_parallel = {
        let t = Instant::now();
        let runs = members
            .iter()
            .map(|m| cli_rdb(m, files.path().join(format!("par-{}.rdb", m.index)), within));
        let shards = futures::future::try_join_all(runs).await?;
        Way::new(
            "backup",
            "valkey-cli --rdb, shards in parallel",
            t.elapsed().as_secs_f64(),
            shards,
        )
    };
    let cli_sequential = {
        let t = Instant::now();
        let mut shards = Vec::new();
        for m in &members {
            let path = files.path().join(format!("seq-{}.rdb", m.index));
            shards.push(cli_rdb(m, path, within).await?);
        }
        Way::new(
            "backup",
            "valkey-cli --rdb, one shard after another",
            t.elapsed().as_secs_f64(),
            shards,
        )
    };
    println!(
        "bench_backup: valkey-cli --rdb {:.2} s in parallel, {:.2} s one after another",
        cli_parallel.seconds, cli_sequential.seconds
    );

    // 4. The backup's own snapshots, fetched from the store (untimed but reported), loaded by a
    // valkey-server of the host.
    let store = backups::store()?;
    let location = status.location.clone().unwrap_or_default();
    let mut objects = Vec::new();
    for s in &shards {
        let object = s.object.clone().unwrap_or_default();
        let path = files.path().join(format!("backup-{}.rdb", s.index));
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| E2eError::Check(format!("{}: {e}", path.display())))?;
        store
            .fetch_into(&format!("{location}/{object}"), &mut file)
            .await
            .map_err(|e| E2eError::Check(format!("{object}: {e}")))?;
        objects.push(Snapshot {
            index: usize::try_from(s.index).unwrap_or(0),
            object,
            path,
            keys: s.keys.and_then(|k| u64::try_from(k).ok()),
        });
    }
    let total_keys: u64 = objects.iter().filter_map(|o| o.keys).sum();
    check(
        total_keys == data.keys,
        format!(
            "the backup's shards counted {total_keys} keys, {} written",
            data.keys
        ),
    )?;
    let direct_parallel = {
        let dirs = objects
            .iter()
            .map(|o| o.copy("par"))
            .collect::<Result<Vec<_>>>()?;
        let t = Instant::now();
        let loads = objects
            .iter()
            .zip(dirs)
            .map(|(o, dir)| o.load(dir, t, within));
        let shards = futures::future::try_join_all(loads).await?;
        Way::new(
            "restore",
            "valkey-server loads the snapshots, in parallel",
            t.elapsed().as_secs_f64(),
            shards,
        )
    };
    let direct_sequential = {
        let mut seconds = 0.0;
        let mut shards = Vec::new();
        for o in &objects {
            let dir = o.copy("seq")?;
            let shard = o.load(dir, Instant::now(), within).await?;
            seconds += shard.seconds.unwrap_or(0.0);
            shards.push(shard);
        }
        Way::new(
            "restore",
            "valkey-server loads the snapshots, one after another",
            seconds,
            shards,
        )
    };
    println!(
        "bench_backup: valkey-server loaded the snapshots in {:.2} s in parallel, {:.2} s one after another",
        direct_parallel.seconds, direct_sequential.seconds
    );

    // 5. The operator's restore: a new cluster from the backup, creation to Ready, and on until
    // every member let its snapshot go (the restore's end: the members then hold the data in
    // their own files). A cluster is first Ready sometimes before, sometimes after the members
    // restart to let go, so both are reported.
    c.name = "restored".to_owned();
    let restore = formed(
        &c,
        profile,
        &format!(
            "{{shards: {}, replicas: {}, restoreFrom: {{backup: bench}}}}",
            profile.shards, profile.replicas
        ),
    )
    .await?;
    backups::members_let_go(&c.ns, "cluster", &c.name, within).await?;
    c.wait_ready(within).await?;
    let complete = restore.applied.elapsed().as_secs_f64();
    let restore_shards: Vec<ShardFigure> = objects
        .iter()
        .zip(&shards)
        .map(|(o, s)| ShardFigure {
            index: o.index,
            from: o.object.clone(),
            bytes: s.bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0),
            seconds: None,
        })
        .collect();
    let operator_ready = Way::new(
        "restore",
        "operator, to Ready",
        restore.ready_s,
        restore_shards.clone(),
    );
    let operator_restore = Way::new(
        "restore",
        "operator, to Ready with the snapshots let go",
        complete,
        restore_shards,
    );
    println!(
        "bench_backup: the restored cluster Ready {:.2} s after its creation (every pod Ready after {:.2} s), its snapshots let go after {complete:.2} s",
        restore.ready_s, restore.pods_ready_s
    );
    // Every key, read back from the restored cluster once it is still (untimed).
    let readback = read_back_as(&data, &view_of(&c).await?, c.password().await?.as_deref()).await?;
    check(
        readback.lost == 0 && readback.intact == data.keys,
        format!(
            "the restored cluster lost {} of {} keys, e.g. {:?}",
            readback.lost, data.keys, readback.examples
        ),
    )?;

    // 6. An empty cluster of the same shape, formed.
    c.name = "empty".to_owned();
    let empty = formed(&c, profile, &profile.spec()).await?;
    let formation = Way::new(
        "restore",
        "an empty cluster formed",
        empty.ready_s,
        Vec::new(),
    );
    println!(
        "bench_backup: an empty cluster Ready {:.2} s after its creation (every pod Ready after {:.2} s)",
        empty.ready_s, empty.pods_ready_s
    );
    backups::delete_backups(&c.ns).await?;
    // The clusters go, and their pods with them, before the next benchmark starts.
    c.ns.kubectl(&[
        "delete",
        "valkeycluster",
        "--all",
        "--wait=true",
        "--timeout=300s",
    ])
    .await?;
    let pods = c.ns.api::<Pod>();
    crate::wait_until(within, "the benchmark's pods gone", || {
        let pods = pods.clone();
        async move {
            let left = pods.list(&Default::default()).await?.items.len();
            Ok(if left == 0 {
                crate::Poll::Ready(())
            } else {
                crate::Poll::NotYet(format!("{left} pods"))
            })
        }
    })
    .await?;

    let ways = vec![
        operator_backup,
        cli_parallel,
        cli_sequential,
        operator_ready,
        operator_restore,
        direct_parallel,
        direct_sequential,
        formation,
    ];
    let (min, max) = data.value_range();
    let report = Report {
        benchmark: "backup",
        command: profile.command(),
        machine: machine(),
        valkey_version: status.valkey_version.clone().unwrap_or_default(),
        sizes: Sizes {
            keys: data.keys,
            value_bytes_mean: data.value_bytes,
            value_bytes_min: min,
            value_bytes_max: max,
            total_bytes: (0..data.keys).map(|i| data.bytes_of(i)).sum(),
            seed: data.seed,
            shards: profile.shards,
            replicas: profile.replicas,
            rdb_bytes: status
                .bytes
                .and_then(|b| u64::try_from(b).ok())
                .unwrap_or(0),
        },
        fill_seconds,
        ratios: ratios(&ways),
        ways,
        operator: OperatorDetail {
            backup_status_seconds: between(
                status.start_time.as_deref(),
                status.completion_time.as_deref(),
            ),
            backup_attempts: shards
                .iter()
                .map(|s| i64::from(s.attempts.unwrap_or(0)))
                .collect(),
            restore_pods_ready_s: restore.pods_ready_s,
            restore_let_go_s: complete - restore.ready_s,
            empty_pods_ready_s: empty.pods_ready_s,
            empty_ready_s: empty.ready_s,
        },
        keys_intact: readback.intact,
        keys_lost: readback.lost,
        finished_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    Ok(report)
}

/// Waits (up to 5 minutes, then goes on saying so) until no Valkey pod of an earlier test is
/// still terminating: a run started amid another's teardown shares the machine with it.
async fn quiet() {
    let Ok(client) = crate::client().await else {
        return;
    };
    let pods: kube::Api<Pod> = kube::Api::all(client);
    let params = kube::api::ListParams::default().labels("valkey.io/cluster");
    let waited = crate::wait_until(
        Duration::from_secs(300),
        "no Valkey pod terminating",
        || {
            let (pods, params) = (pods.clone(), params.clone());
            async move {
                let terminating = pods
                    .list(&params)
                    .await?
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_some())
                    .count();
                Ok(if terminating == 0 {
                    crate::Poll::Ready(())
                } else {
                    crate::Poll::NotYet(format!("{terminating} terminating"))
                })
            }
        },
    )
    .await;
    if let Err(e) = waited {
        println!("bench_backup: starting anyway: {e}");
    }
}

/// The fixture's cluster as one ready member's CLUSTER NODES tells it.
async fn view_of(c: &ClusterFixture) -> Result<ClusterView> {
    let ip = c.ready_member_ip().await?;
    ClusterView::parse(&c.command_on(&ip, &["CLUSTER", "NODES"]).await?)
}

/// Seconds from one RFC 3339 time to another; 0 when either is missing.
fn between(from: Option<&str>, to: Option<&str>) -> f64 {
    let parse = |t: Option<&str>| t.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    match (parse(from), parse(to)) {
        (Some(a), Some(b)) => (b - a).num_milliseconds() as f64 / 1000.0,
        _ => 0.0,
    }
}

/// A cluster applied and Ready: when it was applied, and seconds from then to every pod Ready
/// and to the cluster Ready, as watches saw them.
struct Formed {
    applied: Instant,
    pods_ready_s: f64,
    ready_s: f64,
}

/// Applies the fixture's cluster with `spec` and waits until it is Ready.
async fn formed(c: &ClusterFixture, profile: &Profile, spec: &str) -> Result<Formed> {
    let selector = format!("valkey.io/cluster={}", c.name);
    let pods = Record::start(c.ns.api::<Pod>(), Some(&selector)).await?;
    let clusters = Record::start(c.ns.api::<ValkeyCluster>(), None).await?;
    let applied = Instant::now();
    c.apply(spec).await?;
    let ready = c.wait_ready(profile.within()).await?;
    clusters.caught_up(&ready, Duration::from_secs(30)).await?;
    let ready_at = clusters
        .versions_of(&c.name)
        .into_iter()
        .find(|v| {
            let cluster = &v.object;
            cluster.status.as_ref().is_some_and(|s| {
                s.state == Some(ClusterState::Ready)
                    && s.observed_generation == cluster.metadata.generation
                    && s.ready_shards == cluster.spec.shards
            })
        })
        .map(|v| v.at)
        .ok_or_else(|| E2eError::Check(format!("the watch never saw {} Ready", c.name)))?;
    let pods_at =
        crate::formation::first_all(&pods.versions(), profile.members(), crate::pod_ready)
            .unwrap_or(ready_at);
    Ok(Formed {
        applied,
        pods_ready_s: pods_at.saturating_duration_since(applied).as_secs_f64(),
        ready_s: ready_at.saturating_duration_since(applied).as_secs_f64(),
    })
}

/// A member to capture with valkey-cli, and a user of its with every right.
struct Member {
    index: usize,
    name: String,
    ip: String,
    user: String,
    password: String,
}

/// `valkey-cli --rdb <path>` of localkube's Valkey 9.1 image against `member`, from the host;
/// the file's size and the seconds it took.
async fn cli_rdb(
    member: &Member,
    path: std::path::PathBuf,
    within: Duration,
) -> Result<ShardFigure> {
    let mut command = backups::valkey_program("valkey-cli");
    command
        .args(["-h", &member.ip, "-p", "6379", "--user", &member.user])
        .arg("--rdb")
        .arg(&path)
        // The password reaches the cli through its environment, not its command line.
        .env("VALKEYCLI_AUTH", &member.password)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let what = format!("valkey-cli --rdb against {} ({})", member.name, member.ip);
    let t = Instant::now();
    let out = tokio::time::timeout(within, command.output())
        .await
        .map_err(|_| E2eError::Check(format!("{what} timed out after {within:?}")))?
        .map_err(|source| E2eError::Spawn {
            program: "valkey-cli".into(),
            source,
        })?;
    let seconds = t.elapsed().as_secs_f64();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    check(
        out.status.success() && text.contains("Transfer finished with success") && bytes > 0,
        format!("{what} failed ({}): {text}", out.status),
    )?;
    Ok(ShardFigure {
        index: member.index,
        from: member.name.clone(),
        bytes,
        seconds: Some(seconds),
    })
}

/// One shard's snapshot as the backup stored it, fetched to a file.
struct Snapshot {
    index: usize,
    object: String,
    path: std::path::PathBuf,
    /// The keys the member reported just before its snapshot.
    keys: Option<u64>,
}

impl Snapshot {
    /// A folder of its own holding a copy of the snapshot as `dump.rdb`, for one load.
    fn copy(&self, run: &str) -> Result<TempDir> {
        let dir = TempDir::new(&format!("bench-backup-load-{run}-{}", self.index))?;
        std::fs::copy(&self.path, dir.path().join("dump.rdb"))
            .map_err(|e| E2eError::Check(format!("{}: {e}", self.path.display())))?;
        Ok(dir)
    }

    /// Loads it in a valkey-server of the host; seconds from `since` to its first PING answered,
    /// checked to hold the shard's keys.
    async fn load(&self, dir: TempDir, since: Instant, within: Duration) -> Result<ShardFigure> {
        let bytes = std::fs::metadata(dir.path().join("dump.rdb"))
            .map(|m| m.len())
            .unwrap_or(0);
        let loaded = backups::serve(dir, within).await?;
        let seconds = since.elapsed().as_secs_f64();
        let keys = loaded.keys().await?;
        check(
            self.keys.is_none_or(|k| k == keys),
            format!(
                "{} loaded {keys} keys, the backup counted {:?}",
                self.object, self.keys
            ),
        )?;
        Ok(ShardFigure {
            index: self.index,
            from: self.object.clone(),
            bytes,
            seconds: Some(seconds),
        })
    }
}

/// Whether a way is the operator's (`operator`, `operator, to Ready`, ...).
pub fn is_operator(way: &Way) -> bool {
    way.way.starts_with("operator")
}

/// Each of the operator's ways' seconds over each other way's of the same operation.
fn ratios(ways: &[Way]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for operation in ["backup", "restore"] {
        let of = |w: &&Way| w.operation == operation;
        for operator in ways.iter().filter(of).filter(|w| is_operator(w)) {
            out.extend(
                ways.iter()
                    .filter(of)
                    .filter(|w| !is_operator(w))
                    .map(|other| Ratio {
                        operation,
                        of: operator.way.clone(),
                        over: other.way.clone(),
                        value: operator.seconds / other.seconds.max(1e-9),
                    }),
            );
        }
    }
    out
}

/// The section of `docs/benchmarks.md`.
pub fn markdown(report: &Report) -> String {
    let m = &report.machine;
    let s = &report.sizes;
    let o = &report.operator;
    let mut out = vec![
        "## Backup and restore, beside valkey-cli and valkey-server".to_owned(),
        String::new(),
        format!(
            "{} keys, values of {} bytes on average ({}–{}), {:.0} MB of keys and values (seed {}), \
             in a ValkeyCluster of {} shards × {} replica, Valkey {}: {:.0} MB of snapshots (RDB). \
             Machine: {}, {} cores, {:.0} GiB. Command: `{}`. Raw figures: \
             [bench/results/backup.json](../bench/results/backup.json); what each figure means: \
             [bench/README.md](../bench/README.md#backup-and-restore-beside-valkey-cli-and-valkey-server).",
            s.keys,
            s.value_bytes_mean,
            s.value_bytes_min,
            s.value_bytes_max,
            s.total_bytes as f64 / 1e6,
            s.seed,
            s.shards,
            s.replicas,
            report.valkey_version,
            s.rdb_bytes as f64 / 1e6,
            m.cpu,
            m.cores,
            m.memory_kib as f64 / 1024.0 / 1024.0,
            report.command
        ),
        String::new(),
        "| operation | way | seconds | MB/s | per shard (s) |".to_owned(),
        "| --- | --- | ---: | ---: | --- |".to_owned(),
    ];
    out.extend(report.ways.iter().map(|w| {
        // The operator's backup's are its status's, in whole seconds.
        let whole = w.operation == "backup" && w.way == "operator";
        let shards: Vec<String> = w
            .shards
            .iter()
            .filter_map(|s| s.seconds)
            .map(|s| {
                if whole {
                    format!("{s:.0}")
                } else {
                    format!("{s:.2}")
                }
            })
            .collect();
        format!(
            "| {} | {} | {:.2} | {} | {} |",
            w.operation,
            w.way,
            w.seconds,
            if w.bytes > 0 {
                format!("{:.1}", w.mb_per_s)
            } else {
                "–".to_owned()
            },
            if shards.is_empty() {
                "–".to_owned()
            } else {
                shards.join(", ")
            }
        )
    }));
    out.push(String::new());
    out.push("| operation | the operator's seconds | over | ratio |".to_owned());
    out.push("| --- | --- | --- | ---: |".to_owned());
    out.extend(report.ratios.iter().map(|r| {
        format!(
            "| {} | {} | {} | {:.2} |",
            r.operation, r.of, r.over, r.value
        )
    }));
    out.push(String::new());
    out.push(format!(
        "The operator's backup by its status: {:.0} s from its start to its completion (whole \
         seconds); its per-shard capture times in the table are the status's too, in whole \
         seconds. Capture attempts per shard: {:?}. The restored cluster's pods were all Ready \
         {:.2} s after its creation; it was Ready with every member's snapshot let go \
         (append-only file written, member restarted) {:.2} s after it was first Ready (about 0 \
         when they let go before). The empty cluster's pods were Ready after {:.2} s. Keys read \
         back from the restored cluster: {} intact, {} lost. Writing the keys took {:.1} s.",
        o.backup_status_seconds,
        o.backup_attempts,
        o.restore_pods_ready_s,
        o.restore_let_go_s,
        o.empty_pods_ready_s,
        report.keys_intact,
        report.keys_lost,
        report.fill_seconds
    ));
    out.join("\n")
}

/// Writes `bench/results/backup.json`, its charts and its section of `docs/benchmarks.md`.
pub fn write(root: &std::path::Path, report: &Report) -> Result<()> {
    crate::bench::publish(root, "backup", report, &markdown(report))
}
