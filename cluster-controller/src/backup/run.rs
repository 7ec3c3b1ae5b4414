//! One backup from start to manifest, as a task of its own (a capture takes minutes; a pass of
//! the controller only starts it and looks in on it): wait until it may start, choose a member
//! per shard, wait until each has its primary's writes of the moment the backup began, capture
//! the shards (two at a time; with `consistency: PausedWrites` all begun under one write pause,
//! see [`super::paused`], then all at once), write the manifest last, and report each step in
//! the status.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use valkey_api::v1alpha1::StatusReason;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use plumbing::conditions::{ConditionStatus, set_condition};
use valkey_api::v1alpha1::{
    BackupConsistency, BackupPhase, BackupShard, Progress, ValkeyBackup, ValkeyBackupStatus,
};

use super::choose::{self, CatchUp, Plan, ShardPlan};
use super::observe::{self, Logins, LoginsRead, Source, Sources};
use super::paused;
use super::store::{self, Unopened};
use crate::client::RedisClient;
use crate::engine::Member;
use crate::parent::conditions::Problem;
use crate::parent::labels::FIELD_MANAGER;

/// Captures of one backup that run at once: each holds up to ~50 MiB of parts in memory.
const PARALLEL_SHARDS: usize = 2;
/// Captures of one shard started before the backup fails.
pub const MAX_ATTEMPTS: u32 = 3;
/// How long a chosen member may take to reach its primary's offset of the backup's start.
const CATCH_UP: Duration = Duration::from_secs(60);
/// How often a running capture's bytes so far are written to the status.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How often a backup that may not start yet looks again.
const WAIT: Duration = Duration::from_secs(3);

pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "Failed";

/// What a backup's task reads: the API, Events, and the caches of the sources and members.
pub struct Shared {
    pub client: kube::Client,
    pub events: plumbing::events::EventPublisher,
    pub sources: Sources,
    /// The backup series (`backup_*`): set here, from the backups themselves.
    pub metrics: plumbing::Metrics,
}

/// The backup's status as this task last wrote it, and how to write it.
struct Report {
    api: Api<ValkeyBackup>,
    name: String,
    generation: Option<i64>,
    status: tokio::sync::Mutex<ValkeyBackupStatus>,
}

impl Report {
    /// Changes the status with `change` and writes it (a failed write is logged: the next one
    /// carries the same, and the last one is retried); whether it was written.
    async fn update(&self, change: impl FnOnce(&mut ValkeyBackupStatus)) -> bool {
        let mut status = self.status.lock().await;
        change(&mut status);
        status.observed_generation = self.generation;
        let mut written = false;
        for _ in 0..3 {
            match plumbing::apply::apply_status(&self.api, FIELD_MANAGER, &self.name, &*status)
                .await
            {
                Ok(_) => {
                    written = true;
                    break;
                }
                Err(error) => {
                    tracing::warn!(backup = %self.name, %error, "could not write the status");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        if !written {
            tracing::error!(backup = %self.name, "the status could not be written");
        }
        written
    }

    async fn phase(&self, phase: BackupPhase, problem: &Problem) -> bool {
        let generation = self.generation;
        self.update(|s| {
            s.phase = Some(phase);
            s.reason = Some(problem.reason.as_str().to_owned());
            s.message = Some(problem.message.clone());
            let conditions = s.conditions.get_or_insert_with(Vec::new);
            let now = Time(now());
            let done = phase == BackupPhase::Completed;
            let failed = phase == BackupPhase::Failed;
            let (why, text) = (problem.reason.as_str(), problem.message.as_str());
            set_condition(
                conditions,
                COMPLETED,
                ConditionStatus::from(done),
                why,
                text,
                generation,
                &now,
            );
            if failed {
                set_condition(
                    conditions,
                    FAILED,
                    ConditionStatus::True,
                    why,
                    text,
                    generation,
                    &now,
                );
            } else {
                set_condition(
                    conditions,
                    FAILED,
                    ConditionStatus::False,
                    StatusReason::AsExpected.as_str(),
                    "Nothing has failed.",
                    generation,
                    &now,
                );
            }
            if done || failed {
                s.completion_time = Some(rfc3339(now_seconds()));
            }
            if failed {
                shards_fail_with_the_backup(s);
            }
        })
        .await
    }

    async fn shard(&self, index: u32, change: impl FnOnce(&mut BackupShard)) {
        self.update(|s| {
            if let Some(shard) = s
                .shards
                .iter_mut()
                .flatten()
                .find(|sh| sh.index == index as i32)
            {
                change(shard);
            }
            let shards = s.shards.as_deref().unwrap_or_default();
            let done = shards
                .iter()
                .filter(|sh| sh.phase == Some(BackupPhase::Completed))
                .count();
            s.progress = Some(progress(done, shards.len()));
            let bytes: i64 = shards.iter().filter_map(|sh| sh.bytes).sum();
            s.bytes = Some(bytes);
            s.size = Some(choose::size(u64::try_from(bytes).unwrap_or(0)));
        })
        .await;
    }
}

fn progress(done: usize, total: usize) -> Progress {
    Progress {
        operation: "Capture".into(),
        unit: "shards".into(),
        done: i32::try_from(done).unwrap_or(i32::MAX),
        total: i32::try_from(total).unwrap_or(i32::MAX),
        summary: format!("{done}/{total} shards captured"),
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// Now, to the second (RFC 3339 strings in the status say no more), rounded down: a write
/// acknowledged before a backup's start time is before the moment the backup read its primaries.
fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn rfc3339(at: Timestamp) -> String {
    at.to_string()
}

/// Runs the backup to its end: Completed, or Failed with a reason a person can act on. `ended`
/// is set once that last phase is written: the backup is over, whatever an older copy of it in a
/// cache still says.
pub async fn run(
    shared: Arc<Shared>,
    backup: Arc<ValkeyBackup>,
    ended: Arc<std::sync::atomic::AtomicBool>,
) {
    let namespace = backup.namespace().unwrap_or_default();
    let report = Report {
        api: Api::namespaced(shared.client.clone(), &namespace),
        name: backup.name_any(),
        generation: backup.meta().generation,
        status: tokio::sync::Mutex::new(backup.status.clone().unwrap_or_default()),
    };
    match capture(&shared, &backup, &report).await {
        Ok(completed) => {
            let written = report
                .phase(
                    BackupPhase::Completed,
                    &Problem {
                        reason: StatusReason::Completed,
                        message: completed.clone(),
                    },
                )
                .await;
            ended.store(written, Ordering::Release);
            shared
                .events
                .normal(&*backup, "BackupCompleted", "Capture", &completed)
                .await;
            let mut completed = (*backup).clone();
            completed.status = Some(report.status.lock().await.clone());
            record_success(&shared, &completed).await;
        }
        Err(problem) => {
            tracing::warn!(backup = %report.name, reason = %problem.reason, message = %problem.message, "backup failed");
            let written = report.phase(BackupPhase::Failed, &problem).await;
            ended.store(written, Ordering::Release);
            shared
                .metrics
                .backup_failed(&namespace, &source_label(&backup));
            shared
                .events
                .warning(
                    &*backup,
                    problem.reason.as_str(),
                    "Capture",
                    &problem.message,
                )
                .await;
        }
    }
}

/// The field manager of the source's `status.lastSuccessfulBackup`: the backup controller's
/// own, so that the source's passes (which never apply the field) never take it away.
pub const SOURCE_FIELD_MANAGER: &str = "valkey-backup-controller";

/// Records a Completed `backup` as its source's newest successful backup, unless the source
/// already names it or a newer one (then nothing is sent). A failure is logged: the backup is
/// complete all the same, and the next look at it tries again.
pub async fn record_success(shared: &Shared, backup: &ValkeyBackup) {
    let Some(at) = backup
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_deref())
    else {
        return;
    };
    if let Some(completed) = completed_metrics(backup) {
        shared
            .metrics
            .backup_completed(&plumbing::metrics::CompletedBackup {
                namespace: &backup.namespace().unwrap_or_default(),
                source: &source_label(backup),
                ..completed
            });
    }
    let source = match shared.sources.find(backup) {
        Ok(source) => source,
        Err(problem) => {
            // A backup outlives its source (that is what it is for): nothing to record on.
            tracing::debug!(backup = %backup.name_any(), reason = %problem.reason, "no source to record the backup on");
            return;
        }
    };
    let known_or_newer = match &source {
        Source::Cluster(c) => c
            .status
            .as_ref()
            .and_then(|s| s.last_successful_backup.clone()),
        Source::Replication(r) => r
            .status
            .as_ref()
            .and_then(|s| s.last_successful_backup.clone()),
    }
    .is_some_and(|last| {
        last.completion_time.as_str() > at
            || (last.completion_time == at && last.name == backup.name_any())
    });
    if known_or_newer {
        return;
    }
    let namespace = backup.namespace().unwrap_or_default();
    let name = source.name();
    let patch = serde_json::json!({
        "apiVersion": ValkeyBackup::api_version(&()),
        "kind": source.kind(),
        "metadata": {"name": name},
        "status": {"lastSuccessfulBackup": {"name": backup.name_any(), "completionTime": at}},
    });
    let params = kube::api::PatchParams::apply(SOURCE_FIELD_MANAGER).force();
    let written = match source {
        Source::Cluster(_) => Api::<valkey_api::v1alpha1::ValkeyCluster>::namespaced(
            shared.client.clone(),
            &namespace,
        )
        .patch_status(&name, &params, &kube::api::Patch::Apply(&patch))
        .await
        .map(|_| ()),
        Source::Replication(_) => Api::<valkey_api::v1alpha1::ValkeyReplication>::namespaced(
            shared.client.clone(),
            &namespace,
        )
        .patch_status(&name, &params, &kube::api::Patch::Apply(&patch))
        .await
        .map(|_| ()),
    };
    match written {
        Ok(()) => {
            tracing::info!(backup = %backup.name_any(), source = %name, "recorded as the source's last successful backup")
        }
        Err(error) => {
            tracing::warn!(backup = %backup.name_any(), %error, "could not record the source's last successful backup")
        }
    }
}

/// A failed backup's shards that were still under way (or never started: another shard's
/// failure ended the capture of all) are Failed too, never left Running in a finished status.
fn shards_fail_with_the_backup(status: &mut ValkeyBackupStatus) {
    for shard in status.shards.iter_mut().flatten() {
        if matches!(
            shard.phase,
            None | Some(BackupPhase::Pending | BackupPhase::Running)
        ) {
            shard.phase = Some(BackupPhase::Failed);
        }
    }
}

/// The `source` label of a backup's metrics: `<Kind>/<name>`.
fn source_label(backup: &ValkeyBackup) -> String {
    format!(
        "{}/{}",
        backup.spec.source.kind.as_str(),
        backup.spec.source.name
    )
}

/// A Completed backup's times and size, as its metrics say them (labels left empty); `None`
/// when its status does not hold parseable times.
fn completed_metrics(backup: &ValkeyBackup) -> Option<plumbing::metrics::CompletedBackup<'static>> {
    let status = backup.status.as_ref()?;
    let seconds = |at: Option<&str>| at?.parse::<Timestamp>().ok().map(|t| t.as_second());
    let finished = seconds(status.completion_time.as_deref())?;
    let started = seconds(status.start_time.as_deref()).unwrap_or(finished);
    Some(plumbing::metrics::CompletedBackup {
        namespace: "",
        source: "",
        finished,
        bytes: status.bytes.unwrap_or(0),
        duration_seconds: (finished - started).max(0),
    })
}

/// What a backup captures with, once it may start.
struct Ready {
    source: Source,
    store: backup::Store,
    logins: Logins,
    client: RedisClient,
    plans: Vec<ShardPlan>,
    started: Timestamp,
    version: String,
    keys: std::collections::BTreeMap<u32, u64>,
}

enum Step {
    Go(Box<Ready>),
    Wait(Problem),
    Fail(Problem),
}

/// Whether the backup may start, and with what.
async fn prepare(shared: &Shared, backup: &ValkeyBackup, location: &str) -> Step {
    let namespace = backup.namespace().unwrap_or_default();
    let source = match shared.sources.find(backup) {
        Ok(source) => source,
        Err(problem) => return Step::Fail(problem),
    };
    if source.tls() {
        return Step::Fail(Problem {
            reason: StatusReason::TlsNotSupported,
            message: format!(
                "{} {} serves TLS only, and capture does not speak TLS yet: it cannot be backed up by this operator version.",
                source.kind(),
                source.name()
            ),
        });
    }
    let store = match store::open(&shared.client, &namespace, &backup.spec.store).await {
        Ok(store) => store,
        Err(Unopened::Problem(problem)) => return Step::Fail(problem),
        Err(Unopened::Api(error)) => return Step::Wait(api_problem(&error)),
    };
    // Reached and allowed before any server is asked for its snapshot.
    let manifest = format!("{location}/{}", backup::manifest::MANIFEST_NAME);
    if let Err(error) = store.exists(&manifest).await {
        return Step::Fail(store::unreachable(&error));
    }
    let logins = match observe::logins(&shared.client, &namespace, &source).await {
        LoginsRead::Found(logins) => logins,
        LoginsRead::Wait(problem) => return Step::Wait(problem),
        LoginsRead::Error(error) => return Step::Wait(api_problem(&error)),
    };
    let client = observe::client(&logins);
    let members = shared.sources.members(&source);
    // The start time is taken before the primaries' offsets are read: every write acknowledged
    // before it is at or below the offsets each capture waits for.
    let started = now_seconds();
    let (servers, unanswered) = observe::servers(&client, &members, source.is_cluster()).await;
    match choose::plan(
        &servers,
        &unanswered,
        source.shards(),
        backup.spec.allow_primary,
    ) {
        Plan::Start(plans) => {
            let version = servers
                .iter()
                .find(|s| s.primary)
                .map(|s| s.version.clone())
                .unwrap_or_default();
            let keys = plans
                .iter()
                .map(|p| {
                    let keys = servers
                        .iter()
                        .find(|s| s.member == p.member)
                        .map_or(0, |s| s.keys);
                    (p.shard, keys)
                })
                .collect();
            Step::Go(Box::new(Ready {
                source,
                store,
                logins,
                client,
                plans,
                started,
                version,
                keys,
            }))
        }
        Plan::Wait(problem) => Step::Wait(problem),
        Plan::Fail(problem) => Step::Fail(problem),
    }
}

fn api_problem(error: &kube::Error) -> Problem {
    Problem {
        reason: StatusReason::ApiError,
        message: format!("The Kubernetes API failed ({error}); retrying."),
    }
}

/// The whole capture; `Ok` carries the words of the Completed condition.
async fn capture(
    shared: &Shared,
    backup: &ValkeyBackup,
    report: &Report,
) -> Result<String, Problem> {
    let namespace = backup.namespace().unwrap_or_default();
    let uid = backup.meta().uid.clone().unwrap_or_default();
    let location = choose::location(
        &namespace,
        &backup.spec.source.name,
        &backup.name_any(),
        &uid,
    );
    let mut announced: Option<Problem> = None;
    let ready = loop {
        match prepare(shared, backup, &location).await {
            Step::Go(ready) => break ready,
            Step::Fail(problem) => return Err(problem),
            Step::Wait(problem) => {
                if announced.as_ref() != Some(&problem) {
                    tracing::info!(backup = %report.name, reason = %problem.reason, "backup waits: {}", problem.message);
                    report.phase(BackupPhase::Pending, &problem).await;
                    announced = Some(problem);
                }
                tokio::time::sleep(WAIT).await;
            }
        }
    };
    let Ready {
        source,
        store,
        logins,
        client,
        plans,
        started,
        version,
        keys,
    } = *ready;
    let shards: Vec<BackupShard> = plans
        .iter()
        .map(|p| BackupShard {
            index: p.shard as i32,
            phase: Some(BackupPhase::Pending),
            member: Some(p.member.clone()),
            from_primary: Some(p.from_primary),
            node_id: p.node_id.clone(),
            slot_ranges: source.is_cluster().then(|| choose::slot_text(&p.slots)),
            bytes: None,
            sha256: None,
            keys: None,
            replication_id: None,
            replication_offset: None,
            rdb_version: None,
            object: None,
            attempts: None,
            start_time: None,
            completion_time: None,
        })
        .collect();
    let total = shards.len();
    let (source_uid, location_text) = (source.uid(), location.clone());
    let version_text = version.clone();
    report
        .update(|s| {
            s.phase = Some(BackupPhase::Running);
            s.reason = Some(StatusReason::Capturing.as_str().to_owned());
            s.message = Some(format!(
                "Capturing {total} shard(s) of {} {} into {location_text}.",
                source.kind(),
                source.name()
            ));
            s.start_time = Some(rfc3339(started));
            s.completion_time = None;
            s.location = Some(location_text);
            s.source_uid = Some(source_uid);
            s.valkey_version = Some(version_text);
            s.shards = Some(shards);
            s.progress = Some(progress(0, total));
            s.bytes = Some(0);
            s.size = Some(choose::size(0));
        })
        .await;
    shared
        .events
        .normal(
            backup,
            "BackupStarted",
            "Capture",
            &format!(
                "Capturing {total} shard(s) of {} {}.",
                source.kind(),
                source.name()
            ),
        )
        .await;

    let job = Job {
        shared,
        backup,
        report,
        source: &source,
        store: &store,
        logins: &logins,
        client: &client,
        location: &location,
        keys: &keys,
    };
    let mut captured: Vec<backup::manifest::ShardBackup> =
        if backup.spec.consistency == BackupConsistency::PausedWrites {
            job.paused(&plans).await?
        } else {
            futures::stream::iter(plans)
                .map(|plan| job.shard(plan))
                .buffer_unordered(PARALLEL_SHARDS)
                .try_collect()
                .await?
        };
    captured.sort_by_key(|s| s.index);

    let completed_at = now_seconds();
    let manifest = backup::Manifest {
        format_version: backup::manifest::FORMAT_VERSION,
        backup: backup::manifest::BackupRef {
            namespace,
            name: backup.name_any(),
            uid,
        },
        source: backup::manifest::SourceRef {
            kind: source.kind().to_owned(),
            name: source.name(),
            uid: source.uid(),
        },
        started_at: rfc3339(started),
        completed_at: rfc3339(completed_at),
        valkey_version: version,
        shards: captured,
        users: source.users(),
    };
    let name = format!("{location}/{}", backup::manifest::MANIFEST_NAME);
    store
        .put(&name, manifest.to_json())
        .await
        .map_err(|e| store::unreachable(&e))?;
    let bytes: u64 = manifest.shards.iter().map(|s| s.object.bytes).sum();
    Ok(format!(
        "{} shard(s), {} in all, and the manifest are in the store under {location}.",
        manifest.shards.len(),
        choose::size(bytes)
    ))
}

/// What every shard's capture shares.
struct Job<'a> {
    shared: &'a Shared,
    backup: &'a ValkeyBackup,
    report: &'a Report,
    source: &'a Source,
    store: &'a backup::Store,
    logins: &'a Logins,
    client: &'a RedisClient,
    location: &'a str,
    keys: &'a std::collections::BTreeMap<u32, u64>,
}

impl Job<'_> {
    /// One shard, retried from the best member then (up to [`MAX_ATTEMPTS`]).
    async fn shard(&self, first: ShardPlan) -> Result<backup::manifest::ShardBackup, Problem> {
        let index = first.shard;
        let mut plan = first.clone();
        let mut last_error = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            if attempt > 1 {
                match self.replan(&first).await {
                    Ok(next) => plan = next,
                    Err(problem) => {
                        last_error = problem.message;
                        tokio::time::sleep(WAIT).await;
                        continue;
                    }
                }
            }
            let member = plan.member.clone();
            self.running(&plan, attempt).await;
            match self.attempt(&plan).await {
                Ok(shard) => {
                    self.completed(&shard).await;
                    return Ok(shard);
                }
                Err(Attempt::Store(problem)) => return Err(problem),
                Err(Attempt::Retry(error)) => {
                    tracing::info!(backup = %self.report.name, shard = index, attempt, %member, %error, "shard capture failed; retrying");
                    last_error = format!("from {member}: {error}");
                }
            }
        }
        self.report
            .shard(index, |s| s.phase = Some(BackupPhase::Failed))
            .await;
        Err(Problem {
            reason: StatusReason::CaptureFailed,
            message: format!(
                "Shard {index} could not be captured in {MAX_ATTEMPTS} attempts; the last failed {last_error}. Create a new ValkeyBackup once the source is healthy."
            ),
        })
    }

    /// The status of a shard whose capture `attempt` starts from `plan`'s member.
    async fn running(&self, plan: &ShardPlan, attempt: u32) {
        self.report
            .shard(plan.shard, |s| {
                s.phase = Some(BackupPhase::Running);
                s.member = Some(plan.member.clone());
                s.from_primary = Some(plan.from_primary);
                s.node_id = plan.node_id.clone();
                s.attempts = Some(attempt as i32);
                s.start_time = Some(rfc3339(now_seconds()));
            })
            .await;
    }

    /// The status of a shard whose object is committed.
    async fn completed(&self, done: &backup::manifest::ShardBackup) {
        self.report
            .shard(done.index, |s| {
                s.phase = Some(BackupPhase::Completed);
                s.bytes = i64::try_from(done.object.bytes).ok();
                s.sha256 = Some(done.object.sha256.clone());
                s.keys = i64::try_from(done.keys).ok();
                s.replication_id = Some(done.replication_id.clone());
                s.replication_offset = i64::try_from(done.replication_offset).ok();
                s.rdb_version = i32::try_from(done.rdb_version).ok();
                s.object = Some(done.object.name.clone());
                s.completion_time = Some(rfc3339(now_seconds()));
            })
            .await;
    }

    /// `consistency: PausedWrites`: every shard begun at one instant under a write pause
    /// ([`paused`]), then streamed at once (a begun snapshot left unread would keep its fork
    /// waiting, and the server drops a link it cannot write to for `repl-timeout`). A shard that
    /// fails takes the whole attempt with it: captured again alone, it would be another instant.
    async fn paused(
        &self,
        plans: &[ShardPlan],
    ) -> Result<Vec<backup::manifest::ShardBackup>, Problem> {
        let window = Duration::from_secs(
            u64::try_from(self.backup.spec.max_write_pause_seconds.clamp(1, 60)).unwrap_or(5),
        );
        // Every shard streams at once: smaller parts keep the memory to ~16 MiB per shard.
        let options = backup::CaptureOptions {
            part_size: 8 * 1024 * 1024,
            parts_in_flight: 1,
            ..backup::CaptureOptions::default()
        };
        let source_of = |plan: &ShardPlan| self.capture_source(plan);
        let mut last_error = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            for plan in plans {
                self.running(plan, attempt).await;
            }
            let begun = paused::begin_all(self.client, plans, &source_of, window, &options).await;
            let (begun, held) = match begun {
                Ok(begun) => begun,
                Err(error) => {
                    tracing::info!(backup = %self.report.name, attempt, %error, "the shards' captures could not all begin under the write pause; writes resumed, retrying");
                    last_error = error;
                    tokio::time::sleep(WAIT).await;
                    continue;
                }
            };
            tracing::info!(backup = %self.report.name, paused_ms = held.as_millis() as u64, shards = begun.len(), "every shard's snapshot begun at one instant; writes resumed");
            let options = &options;
            let streams = begun.into_iter().map(|b| async move {
                let plan = b.plan;
                self.stream(&plan, b.capture, b.keys, options).await
            });
            let mut done = Vec::new();
            let mut failed = None;
            for result in futures::future::join_all(streams).await {
                match result {
                    Ok(shard) => done.push(shard),
                    Err(Attempt::Store(problem)) => return Err(problem),
                    Err(Attempt::Retry(error)) => failed = Some(error),
                }
            }
            match failed {
                None => {
                    for shard in &done {
                        self.completed(shard).await;
                    }
                    return Ok(done);
                }
                Some(error) => {
                    tracing::info!(backup = %self.report.name, attempt, %error, "a shard's capture failed; all are captured again at a new instant");
                    last_error = error;
                }
            }
        }
        for plan in plans {
            self.report
                .shard(plan.shard, |s| s.phase = Some(BackupPhase::Failed))
                .await;
        }
        Err(Problem {
            reason: StatusReason::CaptureFailed,
            message: format!(
                "The shards could not be captured at one instant in {MAX_ATTEMPTS} attempts; the last failed: {last_error}. Create a new ValkeyBackup once the source is healthy, or with consistency: PerShard."
            ),
        })
    }

    /// The shard's best member now, for another attempt (the first one's may be gone); it still
    /// waits for the primary's offset of the backup's start.
    async fn replan(&self, first: &ShardPlan) -> Result<ShardPlan, Problem> {
        let members: Vec<Member> = self
            .shared
            .sources
            .members(self.source)
            .into_iter()
            .filter(|m| m.shard == first.shard)
            .collect();
        let (servers, unanswered) =
            observe::servers(self.client, &members, self.source.is_cluster()).await;
        match choose::shard_plan(
            &servers,
            &unanswered,
            first.shard,
            self.backup.spec.allow_primary,
        ) {
            Plan::Start(mut plans) => plans
                .pop()
                .filter(|p| p.shard == first.shard)
                .map(|mut p| {
                    p.primary_offset = first.primary_offset;
                    p.primary_history = first.primary_history.clone();
                    p
                })
                .ok_or_else(|| Problem {
                    reason: StatusReason::NoMember,
                    message: format!("shard {} has no member to capture from", first.shard),
                }),
            Plan::Wait(problem) | Plan::Fail(problem) => Err(problem),
        }
    }

    /// One capture of `plan`'s member, once it has its primary's writes up to the offset of the
    /// backup's start (`plan.primary_offset`, kept across re-plans).
    async fn attempt(&self, plan: &ShardPlan) -> Result<backup::manifest::ShardBackup, Attempt> {
        let mut member = Member::new(plan.shard, 0, plan.member.clone());
        member.address = Some(plan.address);
        member.ready = true;
        let cluster = self.source.is_cluster();
        let target = plan.primary_offset;
        let deadline = Instant::now() + CATCH_UP;
        let keys = loop {
            let server = observe::server(self.client, &member, cluster)
                .await
                .map_err(Attempt::Retry)?;
            match choose::catch_up(plan, &server) {
                CatchUp::Reached => break server.keys,
                CatchUp::Behind => {}
                CatchUp::OtherHistory => {
                    return Err(Attempt::Retry(format!(
                        "it is on another replication history than its primary when the backup began (a restart without its history, or failovers since): its offset cannot show it has every write acknowledged before the start (it is at {} of {:?}, the start at {target})",
                        server.offset, server.history
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(Attempt::Retry(format!(
                    "it did not reach its primary's offset {target} of the backup's start within {}s (it is at {})",
                    CATCH_UP.as_secs(),
                    server.offset
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let options = backup::CaptureOptions::default();
        let begun = backup::begin(&self.capture_source(plan), &options)
            .await
            .map_err(|error| Attempt::Retry(error.to_string()))?;
        self.stream(plan, begun, keys, &options).await
    }

    /// How the backup user reaches `plan`'s member.
    fn capture_source(&self, plan: &ShardPlan) -> backup::Source {
        backup::Source {
            address: plan.address.to_string(),
            user: crate::access::rights::BACKUP_USER.to_owned(),
            password: self.logins.backup_password.clone(),
        }
    }

    /// Streams a begun capture of `plan`'s member (`keys`: what it held when it was chosen)
    /// into the shard's object, showing its progress; a shard whose slots changed meanwhile is
    /// captured again.
    async fn stream(
        &self,
        plan: &ShardPlan,
        begun: backup::Begun,
        keys: u64,
        options: &backup::CaptureOptions,
    ) -> Result<backup::manifest::ShardBackup, Attempt> {
        let cluster = self.source.is_cluster();
        let keys = self.keys.get(&plan.shard).copied().unwrap_or(0).max(keys);
        let object = choose::shard_object(plan.shard);
        // The bytes streamed so far, shown in the status every few seconds while it runs.
        let streamed = AtomicU64::new(0);
        let progress = |bytes: u64| streamed.store(bytes, Ordering::Relaxed);
        let name = format!("{}/{object}", self.location);
        let capture = begun.finish(self.store, &name, options, &progress);
        tokio::pin!(capture);
        let mut shown = 0;
        let captured = loop {
            tokio::select! {
                done = &mut capture => break done,
                () = tokio::time::sleep(PROGRESS_EVERY) => {
                    let bytes = streamed.load(Ordering::Relaxed);
                    if bytes != shown {
                        shown = bytes;
                        self.report
                            .shard(plan.shard, |s| s.bytes = i64::try_from(bytes).ok())
                            .await;
                    }
                }
            }
        }
        .map_err(|error| match error {
            backup::CaptureError::Store { source, .. } => {
                Attempt::Store(store::unreachable(&source))
            }
            other => Attempt::Retry(other.to_string()),
        })?;
        if cluster {
            // A shard whose slots changed while it was captured is captured again.
            let mut primary = Member::new(plan.shard, 0, plan.primary_member.clone());
            primary.address = Some(plan.primary_address);
            let now = observe::server(self.client, &primary, true)
                .await
                .map_err(Attempt::Retry)?;
            if now.slots != plan.slots || now.slots_moving {
                return Err(Attempt::Retry(format!(
                    "the shard's slots changed during the capture ({} then, {} now)",
                    choose::slot_text(&plan.slots),
                    choose::slot_text(&now.slots)
                )));
            }
        }
        let mut shard = backup::manifest::ShardBackup::from_capture(plan.shard, &captured);
        shard.object.name = object;
        shard.slot_ranges = choose::slot_pairs(&plan.slots);
        shard.member = plan.member.clone();
        shard.node_id = plan.node_id.clone();
        shard.from_replica = !plan.from_primary;
        shard.primary_node_id = plan.primary_node_id.clone();
        shard.keys = keys;
        Ok(shard)
    }
}

/// How one attempt failed: the store (the backup fails, the store already retried) or anything
/// else (the shard is tried again).
enum Attempt {
    Store(Problem),
    Retry(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(status: serde_json::Value) -> ValkeyBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1",
            "kind": "ValkeyBackup",
            "metadata": {"name": "nightly", "namespace": "prod"},
            "spec": {
                "source": {"kind": "ValkeyCluster", "name": "cache"},
                "store": {"s3": {"bucket": "b", "endpoint": "http://store:9000", "credentials": {"secretName": "s"}}},
            },
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_failed_backup_leaves_no_shard_running() {
        let mut status = backup(serde_json::json!({"shards": [
            {"index": 0, "phase": "Completed"},
            {"index": 1, "phase": "Running"},
            {"index": 2, "phase": "Pending"},
        ]}))
        .status
        .unwrap_or_default();
        shards_fail_with_the_backup(&mut status);
        let phases: Vec<Option<BackupPhase>> =
            status.shards.iter().flatten().map(|s| s.phase).collect();
        assert_eq!(
            phases,
            vec![
                Some(BackupPhase::Completed),
                Some(BackupPhase::Failed),
                Some(BackupPhase::Failed)
            ]
        );
    }

    #[test]
    fn a_completed_backup_says_when_how_long_and_how_big() {
        let done = backup(serde_json::json!({
            "startTime": "2026-12-04T10:00:00Z",
            "completionTime": "2026-12-04T10:01:30Z",
            "bytes": 4096,
        }));
        let metrics = completed_metrics(&done);
        assert_eq!(metrics.as_ref().map(|m| m.duration_seconds), Some(90));
        assert_eq!(metrics.as_ref().map(|m| m.bytes), Some(4096));
        assert_eq!(
            metrics.map(|m| m.finished),
            "2026-12-04T10:01:30Z"
                .parse::<Timestamp>()
                .ok()
                .map(|t| t.as_second())
        );
        assert_eq!(source_label(&done), "ValkeyCluster/cache");
        let unreadable = backup(serde_json::json!({"completionTime": "yesterday"}));
        assert_eq!(completed_metrics(&unreadable), None);
    }
}
