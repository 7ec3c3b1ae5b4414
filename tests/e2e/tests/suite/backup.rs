//! Backups end to end (issue 28, capture): a ValkeyBackup of a 3x1 ValkeyCluster with a writer
//! running reaches Completed; the manifest and every shard's object are in localkube's object
//! store with the SHA-256 the status and the manifest give; each shard's snapshot, loaded into a
//! valkey-server of this test, holds every key acknowledged before the backup's start time, with
//! its value. Faults: the store's credentials Secret missing, and a store nobody answers at, each
//! give Failed with a reason a person can act on, and the cluster goes on untouched; so do the
//! faults mid-capture (the operator, the chosen replica or the shard's primary killed, a
//! scale-out requested, the store stopped for a minute), each ending as the code says. Deleting the
//! backup deletes its objects. Restore: a new ValkeyCluster or ValkeyReplication from a backup
//! holds every key, keeps them across the restart that lets its snapshots go and a roll after,
//! and a restore that cannot be done makes no member.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use e2e::backups::{
    PREFIX, STORE_BUCKET, STORE_SECRET_KEY, STORE_URL, backup_of, completed_backup, credentials,
    delete_backups, finished_in, load, members_let_go, store,
};
use e2e::cluster::ClusterFixture;
use e2e::{E2eError, Poll, Result, check, wait_until};
use kube::ResourceExt;
use redis::AsyncCommands;
use tokio::sync::Mutex;
use valkey_api::v1alpha1::{BackupPhase, ValkeyBackup, ValkeyBackupStatus};

const FORM: Duration = Duration::from_secs(240);
const CAPTURE: Duration = Duration::from_secs(180);

/// A ValkeyBackup of the cluster `source` into `endpoint` with the credentials Secret `secret`.
fn backup_manifest(name: &str, source: &str, endpoint: &str, secret: &str) -> String {
    backup_of("ValkeyCluster", name, source, endpoint, secret)
}

/// Waits until the backup is Completed or Failed; returns its status.
async fn finished(c: &ClusterFixture, name: &str, within: Duration) -> Result<ValkeyBackupStatus> {
    finished_in(&c.ns, name, within).await
}

/// A writer that records when each write was acknowledged.
struct TimedWriter {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, String, SystemTime)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TimedWriter {
    fn start(mut conn: redis::cluster_async::ClusterConnection) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut n: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                // Values of varied sizes, up to a few KiB.
                let (key, value) = (
                    format!("t:{n}"),
                    format!("v{n}-{}", "x".repeat((n % 64 * 50) as usize)),
                );
                let result: redis::RedisResult<()> = conn.set(&key, &value).await;
                if result.is_ok() {
                    a.lock().await.push((key, value, SystemTime::now()));
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Self { stop, acked, task }
    }

    async fn count(&self) -> usize {
        self.acked.lock().await.len()
    }

    /// When the newest write so far was acknowledged.
    async fn last_acknowledged(&self) -> Option<SystemTime> {
        self.acked.lock().await.last().map(|(_, _, at)| *at)
    }

    /// Waits (a minute at most) until `n` writes were acknowledged.
    async fn wait_for(&self, n: usize) -> Result<()> {
        wait_until(
            Duration::from_secs(60),
            &format!("{n} acknowledged writes"),
            || async move {
                let count = self.count().await;
                Ok(if count >= n {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{count}"))
                })
            },
        )
        .await
    }

    /// Waits until the clock has passed into the second after the newest acknowledged write:
    /// a backup's start time is a whole second, rounded down, so the writes so far are before
    /// the start of a backup created from then on.
    async fn past_the_second_of_its_last_write(&self) -> Result<()> {
        let last = self
            .last_acknowledged()
            .await
            .unwrap_or_else(SystemTime::now);
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        let next = unix(last) + 1;
        wait_until(
            Duration::from_secs(3),
            "the second after the newest write",
            || async move {
                let now = unix(SystemTime::now());
                Ok(if now >= next {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{now}"))
                })
            },
        )
        .await
    }

    async fn stop(self) -> Vec<(String, String, SystemTime)> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.acked.lock().await.clone()
    }
}

/// Every key a Completed backup holds, with its value: its manifest read from the store, each
/// shard's object fetched and checked against the SHA-256 and length the manifest and the status
/// give, and loaded into a valkey-server of this test.
async fn backed_up(
    store: &backup::Store,
    status: &ValkeyBackupStatus,
    shard_count: usize,
    tag: &str,
) -> Result<BTreeMap<String, String>> {
    let location = status.location.clone().unwrap_or_default();
    let shards = status.shards.clone().unwrap_or_default();
    let manifest = store
        .get(&format!("{location}/manifest.json"))
        .await
        .map_err(|e| E2eError::Check(format!("manifest: {e}")))?;
    let manifest = backup::Manifest::from_json(&manifest)
        .map_err(|e| E2eError::Check(format!("manifest: {e}")))?;
    check(
        manifest.shards.len() == shard_count && shards.len() == shard_count,
        format!("{manifest:?}"),
    )?;
    let mut contents = BTreeMap::new();
    for (entry, shard) in manifest.shards.iter().zip(&shards) {
        let mut rdb = Vec::new();
        let fetched = store
            .fetch_into(&format!("{location}/{}", entry.object.name), &mut rdb)
            .await
            .map_err(|e| E2eError::Check(format!("{}: {e}", entry.object.name)))?;
        check(
            fetched.sha256 == entry.object.sha256
                && Some(&fetched.sha256) == shard.sha256.as_ref()
                && fetched.bytes == entry.object.bytes,
            format!(
                "{}: fetched {fetched:?}, manifest {:?}, status {:?}",
                entry.object.name, entry.object, shard.sha256
            ),
        )?;
        let loaded = load(&rdb, &format!("{tag}-{}", entry.index)).await?;
        contents.extend(loaded.contents().await?);
    }
    Ok(contents)
}

/// The backup's start time in Unix seconds (0 when it has none).
fn started_unix(status: &ValkeyBackupStatus) -> u64 {
    status
        .start_time
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| u64::try_from(t.timestamp()).ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_backup_holds_every_write_acknowledged_before_it_began() -> Result<()> {
    let c = ClusterFixture::start("backup", "bk", "{shards: 3, replicas: 1}").await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    let store = store()?;

    credentials(&c.ns).await?;

    let writer = TimedWriter::start(c.client().await?);
    writer.wait_for(2000).await?;
    writer.past_the_second_of_its_last_write().await?;

    c.ns.apply(&backup_manifest("nightly", "bk", STORE_URL, "store"))
        .await?;
    // The faults, beside it: no credentials Secret; a store nobody answers at.
    c.ns.apply(&backup_manifest("no-secret", "bk", STORE_URL, "absent"))
        .await?;
    c.ns.apply(&backup_manifest(
        "no-store",
        "bk",
        "http://10.213.0.1:1",
        "store",
    ))
    .await?;

    let status = finished(&c, "nightly", CAPTURE).await?;
    let acked = writer.stop().await;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!(
            "nightly did not complete: {:?} {:?}",
            status.reason, status.message
        ),
    )?;
    // The cluster names it as its newest successful backup.
    c.wait_status(
        Duration::from_secs(30),
        "status.lastSuccessfulBackup nightly",
        |s| {
            s.last_successful_backup
                .as_ref()
                .is_some_and(|b| b.name == "nightly")
        },
    )
    .await?;
    let started = status
        .start_time
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(SystemTime::from)
        .ok_or_else(|| E2eError::Check(format!("no start time: {status:?}")))?;
    let location = status.location.clone().unwrap_or_default();
    check(
        location.starts_with(&format!("{}/bk/nightly-", c.ns.name)),
        format!("location {location}"),
    )?;
    let shards = status.shards.clone().unwrap_or_default();
    check(shards.len() == 3, format!("{shards:?}"))?;
    let mut slots = 0;
    for shard in &shards {
        check(
            shard.phase == Some(BackupPhase::Completed)
                && shard.from_primary == Some(false)
                && shard.sha256.as_ref().is_some_and(|s| s.len() == 64)
                && shard.bytes.is_some_and(|b| b > 0),
            format!("shard {shard:?}"),
        )?;
        for range in shard.slot_ranges.as_deref().unwrap_or_default().split(',') {
            let (a, b) = range.split_once('-').unwrap_or(("1", "0"));
            slots += b.parse::<i64>().unwrap_or(-1) - a.parse::<i64>().unwrap_or(0) + 1;
        }
    }
    check(
        slots == 16384,
        format!("the shards' slots add up to {slots}"),
    )?;
    // The cluster-controller's metrics say the same: when, how big (set just after the phase
    // is written, so looked at until they are).
    let series = |name: &str| {
        format!(
            "{name}{{namespace=\"{}\",source=\"ValkeyCluster/bk\"}}",
            c.ns.name
        )
    };
    let (size_series, time_series) = (
        series("backup_last_size_bytes"),
        series("backup_last_success_timestamp_seconds"),
    );
    let started_at = started_unix(&status);
    wait_until(
        Duration::from_secs(30),
        "the backup metrics saying the backup's size and time",
        || {
            let (c, size_series, time_series, status) = (&c, &size_series, &time_series, &status);
            async move {
                let said_bytes = c.cluster_controller.metric(size_series).await?;
                let said_finished = c.cluster_controller.metric(time_series).await?;
                Ok(
                    if Some(said_bytes as i64) == status.bytes && said_finished as u64 >= started_at {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(format!(
                            "metrics: {said_bytes} bytes finished at {said_finished}; status {:?} started {:?}",
                            status.bytes, status.start_time
                        ))
                    },
                )
            }
        },
    )
    .await?;

    let contents = backed_up(&store, &status, 3, &c.ns.name).await?;

    // Every write acknowledged before the backup began is in it, with its value.
    let before: Vec<&(String, String, SystemTime)> =
        acked.iter().filter(|(_, _, at)| *at < started).collect();
    check(
        before.len() >= 2000,
        format!("{} writes before the start", before.len()),
    )?;
    let missing: Vec<&str> = before
        .iter()
        .filter(|(key, value, _)| contents.get(key) != Some(value))
        .map(|(key, _, _)| key.as_str())
        .take(10)
        .collect();
    check(
        missing.is_empty(),
        format!("acknowledged before the start and not in the backup: {missing:?}"),
    )?;
    eprintln!(
        "backup: {} bytes in 3 shards, {} keys restored, {} acknowledged before the start, {} in all",
        status.bytes.unwrap_or_default(),
        contents.len(),
        before.len(),
        acked.len()
    );

    // The faults: Failed, with reasons that say what to do.
    let no_secret = finished(&c, "no-secret", CAPTURE).await?;
    check(
        no_secret.phase == Some(BackupPhase::Failed)
            && no_secret.reason.as_deref() == Some("StoreCredentialsMissing")
            && no_secret
                .message
                .as_deref()
                .is_some_and(|m| m.contains("absent")),
        format!("no-secret: {no_secret:?}"),
    )?;
    let no_store = finished(&c, "no-store", CAPTURE).await?;
    check(
        no_store.phase == Some(BackupPhase::Failed)
            && no_store.reason.as_deref() == Some("StoreUnreachable"),
        format!("no-store: {no_store:?}"),
    )?;
    // The cluster went on: Ready, and every acknowledged write readable.
    c.wait_ready(Duration::from_secs(30)).await?;
    let all: BTreeMap<String, String> = acked.into_iter().map(|(k, v, _)| (k, v)).collect();
    c.verify(&all).await?;

    // Deleting the backup deletes its objects (the finalizer), the manifest with them.
    c.ns.kubectl(&[
        "delete",
        "valkeybackup",
        "nightly",
        "--wait=true",
        "--timeout=60s",
    ])
    .await?;
    let left = store
        .list(&location)
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        left.is_empty(),
        format!("objects left after deletion: {left:?}"),
    )
}

/// `consistency: PausedWrites` under a writer that writes one key at a time across every shard
/// (each key waits for the one before it to be acknowledged): the backup is one instant of the
/// whole cluster, so no acknowledged write older than a write it holds is missing from it, on
/// any shard; every write acknowledged before its start is in it; and the writer went on after
/// it (its writes were paused, not refused).
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_writes_backup_is_one_instant_of_every_shard() -> Result<()> {
    let c = ClusterFixture::start("backup-paused", "pw", "{shards: 3, replicas: 1}").await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let store = store()?;
    let writer = TimedWriter::start(c.client().await?);
    writer.wait_for(1000).await?;
    writer.past_the_second_of_its_last_write().await?;
    c.ns.apply(&format!(
        "{}  consistency: PausedWrites\n",
        backup_manifest("instant", "pw", STORE_URL, "store")
    ))
    .await?;
    let status = finished(&c, "instant", CAPTURE).await?;
    // A little more once it is done: the writer must go on after the pause.
    let done_at = writer.count().await;
    wait_until(Duration::from_secs(30), "writes after the backup", || {
        let writer = &writer;
        async move {
            let n = writer.count().await;
            Ok(if n > done_at + 100 {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{n}"))
            })
        }
    })
    .await?;
    let acked = writer.stop().await;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!("instant: {:?} {:?}", status.reason, status.message),
    )?;
    let contents = backed_up(&store, &status, 3, &format!("{}-pw", c.ns.name)).await?;
    let index = |key: &str| key.strip_prefix("t:").and_then(|n| n.parse::<u64>().ok());
    let newest_held = contents.keys().filter_map(|k| index(k)).max().unwrap_or(0);
    let started = started_unix(&status);
    let mut older_missing = Vec::new();
    let mut before_start = 0;
    for (key, value, at) in &acked {
        let n = index(key).unwrap_or(u64::MAX);
        let before = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .is_ok_and(|d| d.as_secs() < started);
        before_start += usize::from(before);
        if (n < newest_held || before) && contents.get(key) != Some(value) {
            older_missing.push(key.clone());
        }
    }
    check(
        older_missing.is_empty(),
        format!(
            "not one instant: {} acknowledged writes older than t:{newest_held} (which it holds) \
             or than its start are missing, such as {:?}",
            older_missing.len(),
            &older_missing[..older_missing.len().min(5)]
        ),
    )?;
    check(
        before_start >= 1000 && (acked.len() as u64) > newest_held + 100,
        format!(
            "{before_start} writes before the start, {} in all, the newest held t:{newest_held}",
            acked.len()
        ),
    )?;
    eprintln!(
        "paused-writes backup: holds up to t:{newest_held}; {before_start} acknowledged before its start, {} in all",
        acked.len()
    );
    delete_backups(&c.ns).await
}

/// A ValkeyReplication on Valkey 8.0 (which sends a replica the sized form): its one snapshot,
/// from the replica, holds every write a replica confirmed before the backup.
#[tokio::test(flavor = "multi_thread")]
async fn a_replication_backup_on_8_0_holds_its_confirmed_writes() -> Result<()> {
    let r = e2e::replication::ReplicationFixture::start(
        "backup-repl",
        "orders",
        "{image: \"valkey/valkey:8.0\", replicas: 1}",
    )
    .await?;
    let _store = e2e::pool::object_store().await;
    r.wait_ready(FORM).await?;
    credentials(&r.ns).await?;
    let written = r.write_confirmed("c", 500).await?;
    let status = completed_backup(&r.ns, "ValkeyReplication", "daily", "orders", CAPTURE).await?;
    r.wait(
        Duration::from_secs(30),
        "status.lastSuccessfulBackup daily",
        |rep| {
            rep.status
                .as_ref()
                .and_then(|s| s.last_successful_backup.as_ref())
                .is_some_and(|b| b.name == "daily")
        },
    )
    .await?;
    let shards = status.shards.clone().unwrap_or_default();
    let [shard] = shards.as_slice() else {
        return Err(E2eError::Check(format!("one shard expected: {shards:?}")));
    };
    check(
        shard.from_primary == Some(false) && shard.member.as_deref() != Some(""),
        format!("{shard:?}"),
    )?;
    let location = status.location.clone().unwrap_or_default();
    let store = store()?;
    let mut rdb = Vec::new();
    let fetched = store
        .fetch_into(&format!("{location}/shard-0.rdb"), &mut rdb)
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        Some(&fetched.sha256) == shard.sha256.as_ref(),
        format!("fetched {fetched:?}, status {:?}", shard.sha256),
    )?;
    let contents = load(&rdb, &r.ns.name).await?.contents().await?;
    let missing: Vec<&String> = written
        .iter()
        .filter(|(k, v)| contents.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .take(10)
        .collect();
    check(
        missing.is_empty(),
        format!("confirmed and not in the backup: {missing:?}"),
    )?;
    delete_backups(&r.ns).await
}

/// A ValkeyBackupSchedule of every minute, keeping one: its backup of the minute is created
/// under the name of its time and completes; the backup it made earlier (here one labelled as
/// its own beforehand, Completed) is then deleted by retention with its objects; the status
/// names the newest and the next time. A schedule in a time zone that does not exist says so
/// and makes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_makes_a_backup_at_its_time_and_expires_the_older_one() -> Result<()> {
    use valkey_api::v1alpha1::ValkeyBackupSchedule;
    let c = ClusterFixture::start("backup-sched", "sc", "{shards: 1, replicas: 0}").await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let store = store()?;
    let template = format!(
        "{{source: {{kind: ValkeyCluster, name: sc}}, allowPrimary: true, store: {{s3: {{endpoint: '{STORE_URL}', \
         bucket: {STORE_BUCKET}, prefix: {PREFIX}, credentials: {{secretName: store}}}}}}}}"
    );
    // An earlier backup of the schedule's, as if made at a time before.
    c.ns.apply(&format!(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: minutely-earlier, \
         labels: {{valkey.io/backup-schedule: minutely}}}}\nspec: {template}\n"
    ))
    .await?;
    let earlier = finished(&c, "minutely-earlier", CAPTURE).await?;
    check(
        earlier.phase == Some(BackupPhase::Completed),
        format!("the earlier backup: {earlier:?}"),
    )?;
    let earlier_location = earlier.location.clone().unwrap_or_default();

    c.ns.apply(&format!(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyBackupSchedule\nmetadata: {{name: minutely}}\n\
         spec: {{schedule: '* * * * *', retention: {{count: 1}}, template: {template}}}\n\
         ---\napiVersion: valkey.io/v1alpha1\nkind: ValkeyBackupSchedule\nmetadata: {{name: nowhere}}\n\
         spec: {{schedule: '@daily', timeZone: Mars/Olympus, template: {template}}}\n"
    ))
    .await?;

    let schedules = c.ns.api::<ValkeyBackupSchedule>();
    let backups = c.ns.api::<ValkeyBackup>();
    // Within the minute and the capture: a backup named by its time, Completed, and the
    // schedule's status naming it while the earlier one is gone.
    let newest = wait_until(
        Duration::from_secs(150),
        "the schedule's own backup Completed, the earlier one expired",
        || {
            let (schedules, backups) = (schedules.clone(), backups.clone());
            async move {
                let status = schedules.get("minutely").await?.status.unwrap_or_default();
                let names: Vec<String> = backups
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .map(kube::ResourceExt::name_any)
                    .collect();
                let newest = status
                    .last_successful_backup
                    .as_ref()
                    .map(|b| b.name.clone());
                Ok(match newest {
                    Some(name)
                        if name != "minutely-earlier"
                            && !names.iter().any(|n| n == "minutely-earlier") =>
                    {
                        Poll::Ready((name, status))
                    }
                    _ => Poll::NotYet(format!("backups {names:?}, status {status:?}")),
                })
            }
        },
    )
    .await?;
    let (name, status) = newest;
    // minutely-<yyyymmddhhmm>00: the minute it was due.
    check(
        name.len() == "minutely-".len() + 14
            && name.starts_with("minutely-20")
            && name.ends_with("00"),
        format!("the scheduled backup's name {name}"),
    )?;
    let made = backups.get(&name).await?;
    check(
        made.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Completed)
            && made
                .labels()
                .get("valkey.io/backup-schedule")
                .map(String::as_str)
                == Some("minutely"),
        format!("{name}: {:?}", made.status),
    )?;
    check(
        status.next_schedule_time.is_some()
            && status.last_schedule_time.is_some()
            && ready_reason(&status.conditions) == Some(("True".into(), "Scheduled".into())),
        format!("the schedule's status {status:?}"),
    )?;
    // Retention deleted the earlier backup's objects with it.
    wait_until(
        Duration::from_secs(30),
        "the earlier backup's manifest deleted",
        || {
            let (store, path) = (&store, format!("{earlier_location}/manifest.json"));
            async move {
                Ok(match store.get(&path).await {
                    Err(_) => Poll::Ready(()),
                    Ok(_) => Poll::NotYet(path),
                })
            }
        },
    )
    .await?;

    // The time zone that does not exist: Ready False naming the field; no backup of it.
    let nowhere = schedules.get("nowhere").await?.status.unwrap_or_default();
    check(
        ready_reason(&nowhere.conditions) == Some(("False".into(), "InvalidTimeZone".into())),
        format!("nowhere: {nowhere:?}"),
    )?;
    check(
        !backups
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|b| b.name_any().starts_with("nowhere-")),
        "a schedule that does not parse made a backup",
    )?;
    Ok(())
}

/// The Ready condition's status and reason.
fn ready_reason(
    conditions: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
) -> Option<(String, String)> {
    conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// A restore that cannot be done makes no member and says why: a ValkeyCluster or a
/// ValkeyReplication whose backup does not exist names it (and would start once it does).
/// Neither is formed empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_that_cannot_be_done_creates_no_member_and_says_why() -> Result<()> {
    let c = ClusterFixture::start_with(
        "backup-restore",
        "rs",
        "{shards: 1, replicas: 0, restoreFrom: {backup: nightly}}",
        &["--kinds=valkey-cluster,valkey-replication"],
    )
    .await?;
    c.ns.apply(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\nmetadata: {name: rr}\n\
         spec: {replicas: 0, restoreFrom: {backup: nightly}}\n",
    )
    .await?;
    let status = c
        .wait_status(
            Duration::from_secs(60),
            "reason RestoreBackupNotFound",
            |s| s.reason.as_deref() == Some("RestoreBackupNotFound"),
        )
        .await?;
    let message = status.status.and_then(|s| s.message).unwrap_or_default();
    check(message.contains("ValkeyBackup nightly"), message)?;
    let replications = c.ns.api::<valkey_api::v1alpha1::ValkeyReplication>();
    let replication = wait_until(
        Duration::from_secs(60),
        "ValkeyReplication rr: reason RestoreBackupNotFound",
        || {
            let api = replications.clone();
            async move {
                let status = api.get("rr").await?.status.unwrap_or_default();
                Ok(match status.reason.as_deref() {
                    Some("RestoreBackupNotFound") => Poll::Ready(status),
                    reason => Poll::NotYet(format!("{reason:?}")),
                })
            }
        },
    )
    .await?;
    let message = replication.message.unwrap_or_default();
    check(message.contains("ValkeyBackup nightly"), message)?;
    let nodes =
        c.ns.api::<valkey_api::v1alpha1::ValkeyNode>()
            .list(&Default::default())
            .await?;
    check(
        nodes.items.is_empty(),
        format!("{} members were created", nodes.items.len()),
    )?;
    Ok(())
}

/// localkube's object store, stopped (SIGSTOP) until resumed or dropped: every request to it
/// waits, so a backup that has started stays mid-capture for as long as a test needs to bring
/// its fault. Found by its command line (the address it serves, [`STORE_URL`]). Every other
/// test's backups and restores would wait as well: a test that pauses it holds
/// `e2e::pool::object_store_alone` while it is paused and until the backup it held has ended.
struct PausedStore(nix::unistd::Pid);

impl PausedStore {
    fn pause() -> Result<Self> {
        let address = STORE_URL.trim_start_matches("http://");
        let pid = std::fs::read_dir("/proc")
            .map_err(|e| E2eError::Check(format!("/proc: {e}")))?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    let text = String::from_utf8_lossy(&cmdline);
                    text.contains("versitygw") && text.contains(address)
                })
            })
            .ok_or_else(|| E2eError::Check(format!("no object store process serves {address}")))?;
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)
            .map_err(|e| E2eError::Check(format!("stopping the object store: {e}")))?;
        Ok(Self(pid))
    }
}

impl Drop for PausedStore {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Writes `count` keys of varied sizes (up to 4 KiB) through a cluster connection; the map of
/// what was acknowledged.
async fn fill(c: &ClusterFixture, tag: &str, count: usize) -> Result<BTreeMap<String, String>> {
    fill_with(c, tag, count, false).await
}

/// [`fill`], each batch then confirmed by a replica of every primary (`WAIT 1`): what a test
/// that fails a primary over may count on (see [`fill_with`]).
async fn fill_confirmed(
    c: &ClusterFixture,
    tag: &str,
    count: usize,
) -> Result<BTreeMap<String, String>> {
    fill_with(c, tag, count, true).await
}

/// With `confirmed`, after each batch `WAIT 1` goes to every primary on the connections the
/// batch was written on (the cluster client keeps one per node and routes WAIT to all primaries,
/// answering with the least count), so a count of at least 1 means every write of the batch is on
/// a replica of its primary.
async fn fill_with(
    c: &ClusterFixture,
    tag: &str,
    count: usize,
    confirmed: bool,
) -> Result<BTreeMap<String, String>> {
    let mut conn = c.client().await?;
    let mut written = BTreeMap::new();
    let keys: Vec<(String, String)> = (0..count)
        .map(|i| {
            (
                format!("{tag}:{i}"),
                format!("{i}-{}", "y".repeat(i % 64 * 64)),
            )
        })
        .collect();
    for batch in keys.chunks(200) {
        let sets = batch.iter().map(|(k, v)| {
            let mut conn = conn.clone();
            async move {
                let done: redis::RedisResult<()> = conn.set(k, v).await;
                done.map(|()| (k.clone(), v.clone()))
            }
        });
        let mut acked = Vec::with_capacity(batch.len());
        for done in futures::future::join_all(sets).await {
            acked.push(done.map_err(|source| E2eError::Valkey {
                addr: "the cluster".into(),
                source,
            })?);
        }
        if confirmed {
            let replicas: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(5000)
                .query_async(&mut conn)
                .await
                .map_err(|source| E2eError::Valkey {
                    addr: "the cluster".into(),
                    source,
                })?;
            check(
                replicas >= 1,
                format!("WAIT 1 confirmed {replicas} replicas for the batch ending {tag}"),
            )?;
        }
        written.extend(acked);
    }
    Ok(written)
}

/// Applies backup `name` and holds it mid-capture: the moment a watch shows it Running (its
/// members chosen, its captures starting), the object store is paused, so every upload waits.
/// `None` when the capture finished first (too quick to hold).
async fn held_mid_capture(
    c: &ClusterFixture,
    name: &str,
) -> Result<Option<(PausedStore, ValkeyBackupStatus)>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api = c.ns.api::<ValkeyBackup>();
    // Watching before the backup exists: no state of it is missed, and the pause follows the
    // Running status within the watch's delay rather than a poll's.
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut states = watcher(api.clone(), config).applied_objects().boxed();
    c.ns.apply(&backup_of(
        "ValkeyCluster",
        name,
        &c.name,
        STORE_URL,
        "store",
    ))
    .await?;
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(state) = states.next().await {
            let phase = state.ok().and_then(|b| b.status).and_then(|s| s.phase);
            if matches!(
                phase,
                Some(BackupPhase::Running | BackupPhase::Completed | BackupPhase::Failed)
            ) {
                return true;
            }
        }
        false
    })
    .await;
    check(
        started == Ok(true),
        format!("{name} never became Running within 60 s"),
    )?;
    let paused = PausedStore::pause()?;
    let status = api.get(name).await?.status.unwrap_or_default();
    let all_done = status
        .shards
        .iter()
        .flatten()
        .all(|s| s.phase == Some(BackupPhase::Completed));
    Ok((status.phase == Some(BackupPhase::Running) && !all_done).then_some((paused, status)))
}

/// [`held_mid_capture`] for a backup named `<prefix>-<attempt>`, tried up to three times (a
/// capture may finish before the store is paused): its name, the pause and its status then.
async fn hold(
    c: &ClusterFixture,
    prefix: &str,
) -> Result<(String, PausedStore, ValkeyBackupStatus)> {
    for attempt in 0..3 {
        let name = format!("{prefix}-{attempt}");
        if let Some((paused, status)) = held_mid_capture(c, &name).await? {
            return Ok((name, paused, status));
        }
    }
    Err(E2eError::Check(format!(
        "three backups {prefix}-* finished before the store could be paused"
    )))
}

/// The set-up of the tests that stop the store: a 2x1 cluster `prefix`/`name` Ready, the store's
/// credentials, the shared turn at the store (see [`hold_alone`]) and a client of the store.
async fn store_fault_cluster(
    prefix: &str,
    name: &str,
) -> Result<(
    ClusterFixture,
    tokio::sync::RwLockReadGuard<'static, ()>,
    backup::Store,
)> {
    let c = ClusterFixture::start(prefix, name, "{shards: 2, replicas: 1}").await?;
    let store_turn = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    Ok((c, store_turn, store()?))
}

/// [`hold`], with the store to this test alone while it is paused and until the backup it holds
/// ends (other tests' backups and restores would be held too): the shared turn is given up for
/// the exclusive one, which the caller keeps until then.
async fn hold_alone(
    c: &ClusterFixture,
    store_turn: tokio::sync::RwLockReadGuard<'static, ()>,
    prefix: &str,
) -> Result<(
    tokio::sync::RwLockWriteGuard<'static, ()>,
    String,
    PausedStore,
    ValkeyBackupStatus,
)> {
    drop(store_turn);
    let alone = e2e::pool::object_store_alone().await;
    let (name, paused, status) = hold(c, prefix).await?;
    Ok((alone, name, paused, status))
}

/// The operator killed mid-backup, then the chosen replica killed mid-backup (each held there by
/// pausing the object store once the backup is Running): each backup still ends Completed, its
/// objects match the manifest, and it holds every key written before it began.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_survives_the_operator_and_its_chosen_replica_killed_mid_capture() -> Result<()> {
    let mut c = ClusterFixture::start("backup-faults", "bf", "{shards: 2, replicas: 1}").await?;
    let _store = e2e::pool::object_store_alone().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let store = store()?;
    let written = fill(&c, "f", 40_000).await?;

    // The operator killed while the backup is mid-capture; a new one finishes it.
    let mut held = None;
    for attempt in 0..3 {
        let name = format!("op-killed-{attempt}");
        if let Some((paused, _)) = held_mid_capture(&c, &name).await? {
            held = Some((name, paused));
            break;
        }
    }
    let (name, paused) = held.ok_or_else(|| {
        E2eError::Check("three backups finished before the store could be paused".into())
    })?;
    c.cluster_controller.kill().await?;
    drop(paused);
    c.cluster_controller =
        e2e::operator::ControllerProcess::start("cluster-controller", &c.ns, &[]).await?;
    let status = finished(&c, &name, CAPTURE).await?;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!("{name} after the operator was killed: {status:?}"),
    )?;
    let contents = backed_up(&store, &status, 2, &format!("{}-op", c.ns.name)).await?;
    let missing = written
        .iter()
        .filter(|(k, v)| contents.get(*k) != Some(v))
        .count();
    check(
        missing == 0,
        format!("{missing} of {} keys missing from {name}", written.len()),
    )?;

    // The replica chosen for a shard killed while the backup is mid-capture.
    let mut held = None;
    for attempt in 0..3 {
        let name = format!("replica-killed-{attempt}");
        if let Some((paused, status)) = held_mid_capture(&c, &name).await? {
            held = Some((name, paused, status));
            break;
        }
    }
    let (name, paused, status) = held.ok_or_else(|| {
        E2eError::Check("three backups finished before the store could be paused".into())
    })?;
    let chosen = status
        .shards
        .iter()
        .flatten()
        .find_map(|s| s.member.clone())
        .ok_or_else(|| E2eError::Check(format!("no member chosen: {status:?}")))?;
    let node =
        c.ns.api::<valkey_api::v1alpha1::ValkeyNode>()
            .get(&chosen)
            .await?;
    let pod = node.status.and_then(|s| s.pod_name).unwrap_or_default();
    e2e::faults::kill(&c.ns.name, &pod, Some("valkey")).await?;
    drop(paused);
    let status = finished(&c, &name, CAPTURE).await?;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!("{name} after {chosen} was killed: {status:?}"),
    )?;
    let contents = backed_up(&store, &status, 2, &format!("{}-rk", c.ns.name)).await?;
    let missing = written
        .iter()
        .filter(|(k, v)| contents.get(*k) != Some(v))
        .count();
    check(
        missing == 0,
        format!("{missing} of {} keys missing from {name}", written.len()),
    )?;
    c.wait_ready(FORM).await?;
    c.verify(&written).await
}

/// Waits until no member of the fixture's cluster has initialData left and each runs its
/// revision, ready.
async fn snapshots_let_go(c: &ClusterFixture) -> Result<()> {
    members_let_go(&c.ns, "cluster", &c.name, FORM).await
}

/// A backup of a 2x1 ValkeyCluster restored into a new one of two shards: the new cluster is
/// Ready, each shard's replica synced from the member that loaded the shard's snapshot; then (it
/// has persistence, the default) each first member's append-only file is turned on and written
/// before its snapshot is cleared, and after the restart this brings every key is there with its
/// value (read once the cluster is still: a read amid the roll's failover could fail for reasons
/// of its own), every member runs with its append-only file, and no ValkeyNode has initialData
/// left.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_restored_from_its_backup_holds_every_key_and_keeps_them_across_the_roll()
-> Result<()> {
    let mut c = ClusterFixture::start("backup-rt", "src", "{shards: 2, replicas: 1}").await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let written = c.write_keys("r", 2000).await?;
    let status = completed_backup(&c.ns, "ValkeyCluster", "snap", "src", CAPTURE).await?;

    // The new cluster, beside the source (the fixture now speaks of it).
    c.name = "restored".to_owned();
    c.apply("{shards: 2, replicas: 1, restoreFrom: {backup: snap}}")
        .await?;
    c.wait_ready(FORM).await?;

    // The snapshot is cleared from every member once its data is on disk, and the cluster is
    // Ready again after the restart that brings.
    let nodes = c.ns.api::<valkey_api::v1alpha1::ValkeyNode>();
    snapshots_let_go(&c).await?;
    c.wait_ready(FORM).await?;
    c.verify(&written).await?;
    let restored = c.api().get("restored").await?;
    check(
        restored
            .annotations()
            .get("valkey.io/restore-served")
            .is_some_and(|v| v == "true"),
        format!("annotations: {:?}", restored.annotations()),
    )?;

    // Every member runs with its append-only file, and each replica holds its primary's keys.
    let members = c.nodes().await?;
    check(
        members.len() == 4,
        format!("{} members of restored", members.len()),
    )?;
    let mut primaries_keys = 0u64;
    for member in &members {
        let ip = e2e::cluster::ready_pod_ip(member)
            .ok_or_else(|| E2eError::Check(format!("{} has no ready pod", member.name_any())))?;
        let persistence = c.admin_command_on(&ip, &["INFO", "persistence"]).await?;
        check(
            persistence.contains("aof_enabled:1"),
            format!("{}: {persistence}", member.name_any()),
        )?;
        let replication = c.admin_command_on(&ip, &["INFO", "replication"]).await?;
        if replication.contains("role:master") {
            let size = c.admin_command_on(&ip, &["DBSIZE"]).await?;
            primaries_keys += size.trim().parse::<u64>().unwrap_or(0);
        } else {
            check(
                replication.contains("master_link_status:up"),
                format!("{}: {replication}", member.name_any()),
            )?;
        }
    }
    check(
        primaries_keys == written.len() as u64,
        format!(
            "the primaries hold {primaries_keys} keys, {} written",
            written.len()
        ),
    )?;

    // Without replicas: each primary restarts in place when its snapshot is let go, from its
    // append-only file alone (turned on and written first, or it would come back empty).
    c.name = "alone".to_owned();
    c.apply("{shards: 2, replicas: 0, restoreFrom: {backup: snap}}")
        .await?;
    c.wait_ready(FORM).await?;
    snapshots_let_go(&c).await?;
    c.wait_ready(FORM).await?;
    c.verify(&written).await?;

    // The same backup with shard 0's object corrupted (one byte, the length kept): the member
    // that would load it never serves, and its InitialData condition names the object.
    let object = format!(
        "{}/shard-0.rdb",
        status.location.clone().unwrap_or_default()
    );
    let store = store()?;
    let mut rdb = store
        .get(&object)
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    let middle = rdb.len() / 2;
    if let Some(byte) = rdb.get_mut(middle) {
        *byte ^= 0xff;
    }
    store
        .put(&object, rdb)
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    c.name = "corrupt".to_owned();
    c.apply("{shards: 2, replicas: 0, restoreFrom: {backup: snap}}")
        .await?;
    let failed = wait_until(FORM, "corrupt-0-0: InitialData False", || {
        let nodes = nodes.clone();
        async move {
            let Some(node) = nodes.get_opt("corrupt-0-0").await? else {
                return Ok(Poll::NotYet("no ValkeyNode yet".into()));
            };
            let status = node.status.unwrap_or_default();
            let condition = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "InitialData")
                .cloned();
            Ok(match condition {
                Some(c) if c.status == "False" && c.reason == "InitialDataFailed" => {
                    Poll::Ready((c.message, status.ready))
                }
                other => Poll::NotYet(format!("{other:?}")),
            })
        }
    })
    .await?;
    check(
        failed.0.contains("shard-0.rdb") && !failed.1,
        format!("ready {}: {}", failed.1, failed.0),
    )?;
    let corrupt = c.api().get("corrupt").await?;
    check(
        corrupt
            .status
            .as_ref()
            .is_none_or(|s| s.state != Some(valkey_api::v1alpha1::ClusterState::Ready)),
        format!("{:?}", corrupt.status),
    )?;
    delete_backups(&c.ns).await
}

/// The issue's size: a 3x1 cluster holding 100,000 keys of varied sizes (up to 4 KiB) on
/// `image`, backed up while a writer runs, restored into a new 3x1 cluster with the
/// cluster-controller killed mid-restore (its first member created with its snapshot, the
/// restore not yet served) and started again: the new cluster is Ready with the manifest's
/// slots shard by shard, and every key written before the backup began (the 100,000 and the
/// writer's acknowledged before its start time) is there with its value, read key by key.
async fn restored_at_size_across_an_operator_kill(prefix: &str, image: &str) -> Result<()> {
    const KEYS: usize = 100_000;
    let spec = format!("{{image: \"{image}\", shards: 3, replicas: 1}}");
    let mut c = ClusterFixture::start(prefix, "big", &spec).await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let mut expected = fill(&c, "big", KEYS).await?;
    let writer = TimedWriter::start(c.client().await?);
    writer.wait_for(500).await?;
    writer.past_the_second_of_its_last_write().await?;
    c.ns.apply(&backup_manifest("whole", "big", STORE_URL, "store"))
        .await?;
    let status = finished(&c, "whole", CAPTURE).await?;
    let acked = writer.stop().await;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!("whole: {:?} {:?}", status.reason, status.message),
    )?;
    let started = started_unix(&status);
    let before_start = acked.into_iter().filter(|(_, _, at)| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .is_ok_and(|d| d.as_secs() < started)
    });
    expected.extend(before_start.map(|(k, v, _)| (k, v)));
    check(
        expected.len() >= KEYS + 500,
        format!("{} keys expected", expected.len()),
    )?;
    let manifest_slots: Vec<BTreeSet<u16>> = held_slot_sets(
        status
            .shards
            .iter()
            .flatten()
            .map(|s| slot_set(s.slot_ranges.as_deref().unwrap_or_default()))
            .collect::<Vec<_>>()
            .iter(),
    );

    // The restore, and the operator killed in its middle.
    c.name = "again".to_owned();
    c.apply(&format!(
        "{{image: \"{image}\", shards: 3, replicas: 1, restoreFrom: {{backup: whole}}}}"
    ))
    .await?;
    let nodes = c.ns.api::<valkey_api::v1alpha1::ValkeyNode>();
    wait_until(FORM, "again-0-0 created with its snapshot", || {
        let nodes = nodes.clone();
        async move {
            Ok(match nodes.get_opt("again-0-0").await? {
                Some(n) if n.spec.initial_data.is_some() => Poll::Ready(()),
                other => Poll::NotYet(format!("{:?}", other.map(|n| n.spec.initial_data))),
            })
        }
    })
    .await?;
    let again = c.api().get("again").await?;
    check(
        !again.annotations().contains_key("valkey.io/restore-served"),
        "the restore was served before the operator could be killed mid-way",
    )?;
    c.cluster_controller.kill().await?;
    c.cluster_controller =
        e2e::operator::ControllerProcess::start("cluster-controller", &c.ns, &[]).await?;
    c.wait_ready(FORM).await?;
    snapshots_let_go(&c).await?;
    c.wait_ready(FORM).await?;
    let owners = held_slot_sets(slot_owners(&c).await?.values());
    check(
        owners == manifest_slots,
        format!(
            "the restored primaries hold {} slot sets, the manifest {}",
            owners.len(),
            manifest_slots.len()
        ),
    )?;
    c.verify(&expected).await?;
    eprintln!(
        "[{prefix}] {} keys restored on {image}, {} bytes backed up",
        expected.len(),
        status.bytes.unwrap_or_default()
    );
    delete_backups(&c.ns).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_100000_key_cluster_on_9_1_backed_up_under_writes_is_restored_across_an_operator_kill()
-> Result<()> {
    restored_at_size_across_an_operator_kill("backup-big9", "valkey/valkey:9.1").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_100000_key_cluster_on_8_0_backed_up_under_writes_is_restored_across_an_operator_kill()
-> Result<()> {
    restored_at_size_across_an_operator_kill("backup-big8", "valkey/valkey:8.0").await
}

/// A backup of two shards restored into a cluster of three, and into one: each is restored at
/// the backup's two shards (the manifest's slots, each shard's snapshot on its first member),
/// then resharded online to the spec's count once every slot was served; it is Ready only then
/// (with `readyShards` the spec's and its generation observed), its primaries hold every slot
/// between them, the members a smaller spec does not want are gone, and every key is there with
/// its value.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_restored_into_another_shard_count_reshards_online_and_keeps_every_key()
-> Result<()> {
    let mut c = ClusterFixture::start("backup-reshard", "src", "{shards: 2, replicas: 1}").await?;
    let _store = e2e::pool::object_store().await;
    c.wait_ready(FORM).await?;
    credentials(&c.ns).await?;
    let written = fill(&c, "n", 3000).await?;
    completed_backup(&c.ns, "ValkeyCluster", "two", "src", CAPTURE).await?;

    for (name, shards) in [("three", 3usize), ("one", 1)] {
        c.name = name.to_owned();
        c.apply(&format!(
            "{{shards: {shards}, replicas: 0, restoreFrom: {{backup: two}}}}"
        ))
        .await?;
        c.wait_ready(FORM).await?;
        snapshots_let_go(&c).await?;
        let ready = c.wait_ready(FORM).await?;
        let restored = c.api().get(name).await?;
        check(
            restored
                .annotations()
                .get("valkey.io/restore-served")
                .is_some_and(|v| v == "true"),
            format!("{name}: annotations {:?}", restored.annotations()),
        )?;
        let owners = slot_owners(&c).await?;
        let held = held_slot_sets(owners.values());
        let covered: BTreeSet<u16> = held.iter().flatten().copied().collect();
        check(
            held.len() == shards && covered.len() == 16384,
            format!(
                "{name}: {} primaries hold slots ({} of 16384), the spec wants {shards}; status {:?}",
                held.len(),
                covered.len(),
                ready.status
            ),
        )?;
        let members = c.nodes().await?;
        check(
            members.len() == shards,
            format!(
                "{name}: members {:?}",
                members
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect::<Vec<_>>()
            ),
        )?;
        // The primaries hold the backup's keys and no more, then each is read back.
        let mut held_keys = 0u64;
        for member in &members {
            let ip = e2e::cluster::ready_pod_ip(member).ok_or_else(|| {
                E2eError::Check(format!("{} has no ready pod", member.name_any()))
            })?;
            let size = c.admin_command_on(&ip, &["DBSIZE"]).await?;
            held_keys += size.trim().parse::<u64>().unwrap_or(0);
        }
        check(
            held_keys == written.len() as u64,
            format!(
                "{name}: the primaries hold {held_keys} keys, {} written",
                written.len()
            ),
        )?;
        c.verify(&written).await?;
    }
    delete_backups(&c.ns).await
}

/// Writes `count` keys of varied sizes (up to 4 KiB) to the replication's primary, through its
/// read/write Service, then waits for a replica to confirm them all (`WAIT 1`); the map of what
/// was written.
async fn fill_replication(
    r: &e2e::replication::ReplicationFixture,
    tag: &str,
    count: usize,
) -> Result<BTreeMap<String, String>> {
    let ip = r
        .endpoints(&r.name)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| E2eError::Check("the read/write Service has no endpoint".into()))?;
    let mut conn = r.connect(&ip).await?;
    let valkey = |source| E2eError::Valkey {
        addr: ip.clone(),
        source,
    };
    let written: BTreeMap<String, String> = (0..count)
        .map(|i| {
            (
                format!("{tag}:{i}"),
                format!("{i}-{}", "z".repeat(i % 64 * 64)),
            )
        })
        .collect();
    let pairs: Vec<(&String, &String)> = written.iter().collect();
    for batch in pairs.chunks(200) {
        let mut pipe = redis::pipe();
        for (k, v) in batch {
            pipe.set(*k, *v).ignore();
        }
        pipe.query_async::<()>(&mut conn).await.map_err(valkey)?;
    }
    let confirmed: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .map_err(valkey)?;
    check(
        confirmed >= 1,
        format!("no replica confirmed the {count} keys"),
    )?;
    Ok(written)
}

/// A ValkeyReplication (a primary and a replica, persistence on) with 3,000 keys of varied
/// sizes, backed up and restored into a new ValkeyReplication: its first member, which loads
/// the snapshot, is the first primary it records (never the empty replica); the restore is
/// recorded as served; each member's snapshot is let go once its append-only file is written,
/// and after the restart that brings the replication is Ready with every key and its value
/// (read key by key), one primary and its replica in sync, the append-only file on at every
/// member; after a rolling restart of both members (a pod label changed) every key is there
/// still.
#[tokio::test(flavor = "multi_thread")]
async fn a_replication_restored_from_its_backup_holds_every_key_and_keeps_them_across_a_roll()
-> Result<()> {
    use valkey_api::v1alpha1::ValkeyReplication;
    let mut r = e2e::replication::ReplicationFixture::start(
        "backup-rrt",
        "src",
        "{replicas: 1, persistence: {enabled: true}}",
    )
    .await?;
    // The store is localkube's one (see `e2e::pool::object_store`).
    let _store = e2e::pool::object_store().await;
    r.wait_ready(FORM).await?;
    credentials(&r.ns).await?;
    let written = fill_replication(&r, "rr", 3000).await?;
    completed_backup(&r.ns, "ValkeyReplication", "snap", "src", CAPTURE).await?;

    // The new replication, beside the source (the fixture now speaks of it), every version of
    // it recorded from its creation on.
    r.name = "restored".to_owned();
    let versions = e2e::record::Record::start(r.api(), None).await?;
    r.ns.apply(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\nmetadata: {name: restored}\n\
         spec: {replicas: 1, persistence: {enabled: true}, restoreFrom: {backup: snap}}\n",
    )
    .await?;
    r.wait_ready(FORM).await?;
    members_let_go(&r.ns, "replication", "restored", FORM).await?;
    r.wait_done(FORM).await?;

    // The first primary it recorded is the member that loaded the snapshot.
    versions.complete()?;
    let first_primary = versions
        .versions_of("restored")
        .iter()
        .find_map(|v| v.object.status.as_ref().and_then(|s| s.primary.clone()));
    check(
        first_primary.as_deref() == Some("restored-0"),
        format!("the first primary recorded: {first_primary:?}"),
    )?;
    let restored: ValkeyReplication = r.get().await?;
    check(
        restored
            .annotations()
            .get("valkey.io/restore-served")
            .is_some_and(|v| v == "true"),
        format!("annotations: {:?}", restored.annotations()),
    )?;

    // Every key with its value, one primary and its replica in sync, the file on everywhere.
    let restored_state = |when: &'static str| {
        let (r, written) = (&r, &written);
        async move {
            let missing = r.missing(written.iter()).await?;
            check(
                missing.is_empty(),
                format!(
                    "{when}: {} of {} keys missing or changed, e.g. {:?}",
                    missing.len(),
                    written.len(),
                    missing.iter().take(5).collect::<Vec<_>>()
                ),
            )?;
            r.check_roles().await?;
            let (primary, primary_ip) = r.primary().await?;
            let size = r.command_on(&primary_ip, &["DBSIZE"]).await?;
            check(
                size.trim() == written.len().to_string(),
                format!(
                    "{when}: {primary} holds {size} keys, {} written",
                    written.len()
                ),
            )?;
            for node in r.nodes().await? {
                let name = node.name_any();
                let ip = r.ip_of(&name).await?;
                let persistence = r.command_on(&ip, &["INFO", "persistence"]).await?;
                check(
                    persistence.contains("aof_enabled:1"),
                    format!("{when}: {name}: {persistence}"),
                )?;
                if name != primary {
                    let replication = r.command_on(&ip, &["INFO", "replication"]).await?;
                    check(
                        replication.contains("master_link_status:up"),
                        format!("{when}: {name}: {replication}"),
                    )?;
                }
            }
            Ok::<String, E2eError>(primary)
        }
    };
    let primary = restored_state("restored").await?;
    eprintln!(
        "restored: {} keys, first primary restored-0, primary after the snapshot was let go {primary}",
        written.len()
    );

    // A rolling restart of both members: every key is there after it.
    let revision = |n: &valkey_api::v1alpha1::ValkeyNode| {
        n.status.as_ref().and_then(|s| s.current_revision.clone())
    };
    let before: BTreeMap<String, Option<String>> = r
        .nodes()
        .await?
        .iter()
        .map(|n| (n.name_any(), revision(n)))
        .collect();
    r.patch_spec(serde_json::json!({"podLabels": {"rolled": "once"}}))
        .await?;
    wait_until(FORM, "both members restarted on a new revision", || async {
        let nodes = r.nodes().await?;
        let rolled = nodes
            .iter()
            .filter(|n| {
                let status = n.status.clone().unwrap_or_default();
                before.get(&n.name_any()).is_some_and(|b| *b != revision(n))
                    && status.desired_revision.is_some()
                    && status.current_revision == status.desired_revision
                    && status.ready
            })
            .count();
        Ok(if rolled == 2 {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!("{rolled} of 2 rolled"))
        })
    })
    .await?;
    r.wait_done(FORM).await?;
    let primary = restored_state("after the roll").await?;
    eprintln!("after the roll: every key there, primary {primary}");
    delete_backups(&r.ns).await
}

/// The slots each primary serves, by node ID, as one member's CLUSTER NODES lists them (a
/// primary without slots is there with none). Open slots (`[n->-id]`, `[n-<-id]`) are not
/// counted: [`ClusterFixture::assert_no_open_slots`] looks for those.
async fn slot_owners(c: &ClusterFixture) -> Result<BTreeMap<String, BTreeSet<u16>>> {
    let text = c.command_on_any(&["CLUSTER", "NODES"]).await?;
    let mut owners = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(id), Some(flags)) = (fields.next(), fields.nth(1)) else {
            continue;
        };
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
            continue;
        }
        // master ID, ping, pong, epoch, link state; then the slots.
        let slots = slot_set(&fields.skip(5).collect::<Vec<_>>().join(","));
        owners.insert(id.to_owned(), slots);
    }
    Ok(owners)
}

/// `0-99,200,300-310` (the status's and CLUSTER NODES' ranges) as a set of slots; anything
/// else (an open slot's brackets) is left out.
fn slot_set(ranges: &str) -> BTreeSet<u16> {
    let mut slots = BTreeSet::new();
    for range in ranges.split(',').filter(|r| !r.starts_with('[')) {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
            slots.extend(a..=b);
        }
    }
    slots
}

/// The sets of slots that are not empty, in order: what the shards hold, whoever holds them.
fn held_slot_sets<'a>(sets: impl Iterator<Item = &'a BTreeSet<u16>>) -> Vec<BTreeSet<u16>> {
    let mut held: Vec<BTreeSet<u16>> = sets.filter(|s| !s.is_empty()).cloned().collect();
    held.sort();
    held
}

/// The member of shard `shard` that Valkey itself says is a primary.
async fn shard_primary(c: &ClusterFixture, shard: i32) -> Result<valkey_api::v1alpha1::ValkeyNode> {
    let wanted = shard.to_string();
    for node in c.nodes().await? {
        if node.labels().get("valkey.io/shard") != Some(&wanted) {
            continue;
        }
        let Some(ip) = e2e::cluster::ready_pod_ip(&node) else {
            continue;
        };
        let info = c
            .command_on(&ip, &["INFO", "replication"])
            .await
            .unwrap_or_default();
        if info.lines().any(|l| l.trim() == "role:master") {
            return Ok(node);
        }
    }
    Err(E2eError::Check(format!(
        "shard {shard} has no ready primary"
    )))
}

/// The Failed condition's status and reason.
fn failed_condition(status: &ValkeyBackupStatus) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Checks that `contents` (a backup's keys) holds every key of `written` with its value.
fn holds_every_key(
    contents: &BTreeMap<String, String>,
    written: &BTreeMap<String, String>,
    what: &str,
) -> Result<()> {
    let missing: Vec<&String> = written
        .iter()
        .filter(|(k, v)| contents.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    check(
        missing.is_empty(),
        format!(
            "{} of {} keys missing from {what} (or with another value), the first {:?}",
            missing.len(),
            written.len(),
            missing.iter().take(10).collect::<Vec<_>>()
        ),
    )
}

/// The primary of a shard being captured, its pod deleted while the capture is held mid-stream
/// (the store paused), and the store kept paused until the replica the shard is captured from
/// has taken over, or 20 s at most (the old primary's new pod may come back first, as it does on
/// localkube: then no failover happens and the replica full-syncs from it). What the capture does then
/// (`cluster-controller/src/backup/run.rs`): the promoted replica drops the link it streams on,
/// or the check of the shard's slots after the stream cannot reach the old primary; either way
/// the shard is tried again from its best member, up to three attempts, each needing a replica
/// in step with the shard's primary that has reached the primary's offset of the backup's start.
/// The shard's only replica is now its primary, and the old primary comes back as a replica
/// only after its pod is made again and it has synced; so the backup either completes (the old
/// primary back in step in time) or is Failed, CaptureFailed naming the shard, with no manifest
/// (never a restorable backup). In that case the new ValkeyBackup its message asks for, created
/// once the cluster is Ready again, completes; the failed one stays Failed with its start time
/// (never captured again once its task wrote Failed). The backup that completed holds every key
/// confirmed before it began, checked key by key, and so does the cluster.
#[tokio::test(flavor = "multi_thread")]
async fn a_shards_primary_killed_mid_backup_loses_no_confirmed_key_from_the_backup() -> Result<()> {
    let began = Instant::now();
    let (c, store_turn, store) = store_fault_cluster("backup-primary", "bp").await?;
    // Confirmed by a replica (WAIT 1): a write a primary acknowledged but had not yet sent to
    // its replica is gone once that replica takes over, from the cluster and so from any backup
    // taken after. Only writes acknowledged with WAIT are promised to survive a failover, so
    // they are the ones a backup across one must hold.
    let written = fill_confirmed(&c, "p", 20_000).await?;

    let (alone, name, paused, status) = hold_alone(&c, store_turn, "primary-killed").await?;
    let began_at = status.start_time.clone();
    let shard = status
        .shards
        .iter()
        .flatten()
        .find(|s| s.phase != Some(BackupPhase::Completed))
        .cloned()
        .ok_or_else(|| E2eError::Check(format!("no shard left to capture: {status:?}")))?;
    let captured_from = shard.member.clone().unwrap_or_default();
    let primary = shard_primary(&c, shard.index).await?;
    check(
        primary.name_any() != captured_from,
        format!(
            "shard {} is captured from its primary {captured_from}",
            shard.index
        ),
    )?;
    let pod = primary
        .status
        .as_ref()
        .and_then(|s| s.pod_name.clone())
        .unwrap_or_default();
    let replica_ip = c
        .nodes()
        .await?
        .iter()
        .find(|n| n.name_any() == captured_from)
        .and_then(e2e::cluster::ready_pod_ip)
        .ok_or_else(|| E2eError::Check(format!("{captured_from} has no ready pod")))?;
    c.ns.kubectl(&["delete", "pod", &pod, "--wait=false"])
        .await?;
    // Kept paused for less than the 30 s the backup gives a store request (a longer outage
    // fails the backup for the store, as the store's own test shows).
    let took_over = wait_until(
        Duration::from_secs(20),
        &format!("{captured_from}, captured from, takes over from {pod}"),
        || {
            let (c, ip) = (&c, &replica_ip);
            async move {
                let info = c
                    .command_on(ip, &["INFO", "replication"])
                    .await
                    .unwrap_or_default();
                Ok(if info.lines().any(|l| l.trim() == "role:master") {
                    Poll::Ready(())
                } else {
                    Poll::NotYet("still a replica".into())
                })
            }
        },
    )
    .await
    .is_ok();
    drop(paused);

    let status = finished(&c, &name, CAPTURE).await?;
    drop(alone);
    let _store = e2e::pool::object_store().await;
    let outcome;
    let completed = if status.phase == Some(BackupPhase::Completed) {
        outcome = "completed";
        // The capture that began before the kill, not one started again after it had ended.
        check(
            status.start_time == began_at,
            format!(
                "{name} began at {began_at:?} and completed as begun at {:?}",
                status.start_time
            ),
        )?;
        status
    } else {
        let message = status.message.clone().unwrap_or_default();
        check(
            status.reason.as_deref() == Some("CaptureFailed")
                && message.contains(&format!("Shard {}", shard.index))
                && message.contains("Create a new ValkeyBackup")
                && failed_condition(&status) == Some(("True".into(), "CaptureFailed".into())),
            format!("{name} after {pod} was deleted: {status:?}"),
        )?;
        let location = status.location.clone().unwrap_or_default();
        let manifest = store
            .exists(&format!("{location}/manifest.json"))
            .await
            .map_err(|e| E2eError::Check(e.to_string()))?;
        check(!manifest, format!("the failed {name} wrote a manifest"))?;
        outcome = "failed, CaptureFailed; a new backup completed";
        c.wait_ready(FORM).await?;
        c.ns.apply(&backup_manifest("after-failover", "bp", STORE_URL, "store"))
            .await?;
        let retried = finished(&c, "after-failover", CAPTURE).await?;
        check(
            retried.phase == Some(BackupPhase::Completed),
            format!("after-failover: {retried:?}"),
        )?;
        // A failed backup stays failed: it is never captured again behind the person's back.
        let still =
            c.ns.api::<ValkeyBackup>()
                .get(&name)
                .await?
                .status
                .unwrap_or_default();
        check(
            still.phase == Some(BackupPhase::Failed) && still.start_time == began_at,
            format!("{name} after it failed: {still:?}"),
        )?;
        retried
    };
    let contents = backed_up(&store, &completed, 2, &format!("{}-pk", c.ns.name)).await?;
    holds_every_key(&contents, &written, "the backup")?;
    c.wait_ready(FORM).await?;
    c.verify(&written).await?;
    eprintln!(
        "primary killed mid-backup: {} keys confirmed, {} in the backup; {name} {outcome}; \
         the replica took over while the store was paused: {took_over}; {:?} in all",
        written.len(),
        contents.len(),
        began.elapsed()
    );
    Ok(())
}

/// A scale-out requested while a backup of the cluster is captured (held there by pausing the
/// object store): the new shard's members join, and the engine, whose next step would move
/// slots, says it waits for the backup (reason BackupRunning) while every slot is where it was
/// and none is open. The backup captures each shard once (a shard whose slots changed during its
/// capture is captured again) with the slots it had, and holds every key; then the slots move
/// and the cluster is Ready with three shards.
#[tokio::test(flavor = "multi_thread")]
async fn a_scale_out_requested_mid_backup_moves_no_slot_until_the_backup_is_captured() -> Result<()>
{
    let began = Instant::now();
    let (c, store_turn, store) = store_fault_cluster("backup-scale", "bs").await?;
    let written = fill(&c, "s", 20_000).await?;
    let before = slot_owners(&c).await?;
    let slots_before = held_slot_sets(before.values());
    check(
        slots_before.len() == 2,
        format!("two primaries with slots before: {before:?}"),
    )?;

    let (alone, name, paused, _) = hold_alone(&c, store_turn, "scale").await?;
    c.patch_spec(serde_json::json!({"shards": 3})).await?;
    // Kept paused for less than the 30 s the backup gives a store request: long enough for the
    // new shard to join and the engine to come to moving slots.
    let held = wait_until(
        Duration::from_secs(22),
        "the new shard joined and the slot moves held for the backup",
        || {
            let c = &c;
            async move {
                let reason = c
                    .api()
                    .get(&c.name)
                    .await?
                    .status
                    .and_then(|s| s.reason)
                    .unwrap_or_default();
                let owners = slot_owners(c).await.unwrap_or_default();
                Ok(if reason == "BackupRunning" && owners.len() == 3 {
                    Poll::Ready(owners)
                } else {
                    Poll::NotYet(format!("reason {reason}, {} primaries", owners.len()))
                })
            }
        },
    )
    .await?;
    check(
        held_slot_sets(held.values()) == slots_before,
        format!("slots moved while the backup ran: before {before:?}, then {held:?}"),
    )?;
    c.assert_no_open_slots().await?;
    let running = c.ns.api::<ValkeyBackup>().get(&name).await?;
    check(
        running.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Running),
        format!("{name} was not Running while held: {:?}", running.status),
    )?;
    drop(paused);

    let status = finished(&c, &name, CAPTURE).await?;
    drop(alone);
    let _store = e2e::pool::object_store().await;
    check(
        status.phase == Some(BackupPhase::Completed),
        format!("{name}: {status:?}"),
    )?;
    let shards = status.shards.clone().unwrap_or_default();
    check(
        shards.iter().all(|s| s.attempts == Some(1)),
        format!("a shard was captured more than once: {shards:?}"),
    )?;
    let captured: Vec<BTreeSet<u16>> = shards
        .iter()
        .map(|s| slot_set(s.slot_ranges.as_deref().unwrap_or_default()))
        .collect();
    check(
        held_slot_sets(captured.iter()) == slots_before,
        format!("the backup's slots are not those of before: {shards:?}"),
    )?;

    // Then the scale-out goes on.
    c.wait_ready(Duration::from_secs(420)).await?;
    let info = c.cluster_info().await?;
    check(
        info.get("cluster_size").map(String::as_str) == Some("3"),
        format!("{info:?}"),
    )?;
    let after = slot_owners(&c).await?;
    check(
        held_slot_sets(after.values()).len() == 3,
        format!("three primaries with slots after: {after:?}"),
    )?;
    c.assert_no_open_slots().await?;
    let contents = backed_up(&store, &status, 2, &format!("{}-so", c.ns.name)).await?;
    holds_every_key(&contents, &written, &name)?;
    c.verify(&written).await?;
    eprintln!(
        "scale-out mid-backup: {} keys written, {} in the backup; {:?} in all",
        written.len(),
        contents.len(),
        began.elapsed()
    );
    Ok(())
}

/// localkube's object store unreachable (stopped) for a minute while a backup is mid-capture.
/// The operator gives each store request 30 s (`cluster-controller/src/backup/store.rs`): the
/// backup does not wait on, it is Failed with reason StoreUnreachable and a message naming the
/// store (and no secret), its upload left incomplete: no manifest, never a restorable backup.
/// The cluster goes on Ready. Once the store answers again, the new ValkeyBackup the message
/// asks for completes and holds every key; deleting the failed one deletes what it left.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_unreachable_for_a_minute_fails_the_backup_and_a_new_one_completes() -> Result<()> {
    let began = Instant::now();
    let (c, store_turn, store) = store_fault_cluster("backup-store", "bo").await?;
    let written = fill(&c, "o", 20_000).await?;

    let (alone, name, paused, status) = hold_alone(&c, store_turn, "store-down").await?;
    let location = status.location.clone().unwrap_or_default();
    let backups = c.ns.api::<ValkeyBackup>();
    // The fault lasts a minute, whatever the backup does meanwhile; what it says is noted.
    let down = Instant::now();
    let failed_while_down = std::sync::Mutex::new(None);
    wait_until(
        Duration::from_secs(75),
        "a minute with the store down",
        || {
            let (backups, name) = (backups.clone(), &name);
            let failed_while_down = &failed_while_down;
            async move {
                let phase = backups.get(name).await?.status.and_then(|s| s.phase);
                if phase == Some(BackupPhase::Failed) {
                    let mut first = failed_while_down.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert(down.elapsed());
                }
                Ok(if down.elapsed() >= Duration::from_secs(60) {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{phase:?}"))
                })
            }
        },
    )
    .await?;
    drop(paused);
    let back = Instant::now();
    let failed_while_down = failed_while_down
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());

    let failed = finished(&c, &name, CAPTURE).await?;
    let failed_after = back.elapsed();
    drop(alone);
    let _store = e2e::pool::object_store().await;
    let message = failed.message.clone().unwrap_or_default();
    check(
        failed.phase == Some(BackupPhase::Failed)
            && failed.reason.as_deref() == Some("StoreUnreachable")
            && failed_condition(&failed) == Some(("True".into(), "StoreUnreachable".into()))
            && message.contains("object store")
            && message.contains(STORE_BUCKET)
            && !message.contains(STORE_SECRET_KEY),
        format!("{name} with the store down a minute: {failed:?}"),
    )?;
    let manifest = store
        .exists(&format!("{location}/manifest.json"))
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    check(!manifest, format!("the failed {name} wrote a manifest"))?;
    // The cluster went on, and holds no slot move for a backup that ended.
    c.wait_ready(Duration::from_secs(60)).await?;

    c.ns.apply(&backup_manifest("store-back", "bo", STORE_URL, "store"))
        .await?;
    let retried = finished(&c, "store-back", CAPTURE).await?;
    check(
        retried.phase == Some(BackupPhase::Completed),
        format!("store-back: {retried:?}"),
    )?;
    let contents = backed_up(&store, &retried, 2, &format!("{}-sd", c.ns.name)).await?;
    holds_every_key(&contents, &written, "store-back")?;

    // Deleting the failed backup deletes what it left in the store.
    c.ns.kubectl(&[
        "delete",
        "valkeybackup",
        &name,
        "--wait=true",
        "--timeout=60s",
    ])
    .await?;
    let left = store
        .list(&location)
        .await
        .map_err(|e| E2eError::Check(e.to_string()))?;
    check(
        left.is_empty(),
        format!("objects of {name} left after its deletion: {left:?}"),
    )?;
    eprintln!(
        "store down a minute: {name} Failed {:?} into the outage (seen while down: {failed_while_down:?}), \
         settled {failed_after:?} after the store returned; {} keys written, {} in store-back; {:?} in all",
        failed
            .completion_time
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .zip(
                status
                    .start_time
                    .as_deref()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            )
            .map(|(end, start)| end - start),
        written.len(),
        contents.len(),
        began.elapsed()
    );
    Ok(())
}
