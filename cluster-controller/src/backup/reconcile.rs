//! A pass over a ValkeyBackup: hold its Lease, put the finalizer on a backup whose objects go
//! with it, and start its capture task (or leave the running one alone). A capture takes
//! minutes; the task writes the status as it goes, and a pass only looks in on it. Deleting a
//! backup stops its task and, with `deletionPolicy: Delete`, deletes the manifest first, then
//! the other objects, before the finalizer is removed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Resource, ResourceExt};
use plumbing::{ObjectKey, Reconciler};
use valkey_api::v1alpha1::{BackupDeletionPolicy, BackupPhase, StatusReason, ValkeyBackup};

use super::choose;
use super::run::{self, Shared};
use super::store::{self, Unopened};
use crate::parent::context::Kept;
use crate::parent::error::{Error, api_error};
use crate::parent::labels::FIELD_MANAGER;
use crate::parent::pass::claim_for;

/// Put on a ValkeyBackup with `deletionPolicy: Delete`: its objects are deleted before it goes.
pub const FINALIZER: &str = "valkey.io/backup-objects";

/// How often a pass looks in on a running capture (and renews the backup's Lease).
const LOOK_IN: Duration = Duration::from_secs(10);

/// A capture task and what it is of.
struct Running {
    uid: String,
    /// `namespace/kind/name` of the source: one capture per source at a time.
    source: String,
    task: tokio::task::JoinHandle<()>,
    /// The task wrote the backup's last phase (Completed or Failed).
    ended: Arc<AtomicBool>,
}

impl Running {
    /// Whether a pass that still sees the backup unfinished must start its capture again: only
    /// when its task stopped without writing a last phase (its status could not be written). A
    /// task that wrote one ended the backup: the cache only has not caught up yet, and a capture
    /// started from that older copy would turn a Failed backup into another one, or capture a
    /// Completed one again over its objects.
    fn start_again(&self) -> bool {
        self.task.is_finished() && !self.ended.load(Ordering::Acquire)
    }
}

pub struct Context {
    pub shared: Arc<Shared>,
    pub claims: plumbing::leader::Claims,
    /// Per backup: who else holds its Lease (announced once).
    kept: Kept<()>,
    running: Mutex<HashMap<ObjectKey, Running>>,
}

impl Context {
    pub fn new(shared: Shared, claims: plumbing::leader::Claims) -> Self {
        Self {
            shared: Arc::new(shared),
            claims,
            kept: Kept::default(),
            running: Mutex::new(HashMap::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops `key`'s capture task, if any. Its upload is left incomplete: never an object.
    fn stop(&self, key: &ObjectKey) {
        if let Some(running) = self.running().remove(key) {
            running.task.abort();
        }
    }
}

fn source_key(backup: &ValkeyBackup) -> String {
    format!(
        "{}/{}/{}",
        backup.namespace().unwrap_or_default(),
        backup.spec.source.kind.as_str(),
        backup.spec.source.name
    )
}

fn lease(backup: &str) -> String {
    format!("{backup}-backup-controller")
}

fn has_finalizer(backup: &ValkeyBackup) -> bool {
    backup.finalizers().iter().any(|f| f == FINALIZER)
}

/// The backup's finalizers with `FINALIZER` put on or taken off, written with the
/// resourceVersion read (a concurrent change makes this fail and the pass retry).
async fn set_finalizer(
    api: &Api<ValkeyBackup>,
    backup: &ValkeyBackup,
    on: bool,
) -> Result<(), Error> {
    let mut finalizers: Vec<String> = backup
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if on {
        finalizers.push(FINALIZER.to_owned());
    }
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": backup.resource_version(),
        }
    });
    api.patch(
        &backup.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(api_error("writing the finalizer"))
}

impl Reconciler for Context {
    type Object = ValkeyBackup;
    type Error = Error;

    async fn reconcile(&self, backup: &ValkeyBackup, key: &ObjectKey) -> Result<Requeue, Error> {
        let memory = self.kept.memory(key);
        let events = &self.shared.events;
        if let Some(requeue) =
            claim_for(&self.claims, events, backup, lease(key.name()), &memory).await?
        {
            return Ok(requeue);
        }
        let phase = backup.status.as_ref().and_then(|s| s.phase);
        if matches!(phase, Some(BackupPhase::Completed | BackupPhase::Failed)) {
            // The task that wrote the phase may still be finishing (its Event, the source's
            // record): it is let be, not aborted; only finished tasks are forgotten.
            self.running().retain(|_, r| !r.task.is_finished());
            if phase == Some(BackupPhase::Completed) {
                // Here as well as at the end of the capture: a controller that stopped between
                // the phase and the source's record records it when it looks again. No request
                // when the source already names it (the source comes from the cache).
                run::record_success(&self.shared, backup).await;
            }
            return Ok(Requeue::await_change());
        }
        let api: Api<ValkeyBackup> = Api::namespaced(self.shared.client.clone(), key.namespace());
        if backup.spec.deletion_policy == BackupDeletionPolicy::Delete && !has_finalizer(backup) {
            // On before any object is written, so that none outlives its backup.
            set_finalizer(&api, backup, true).await?;
            return Ok(Requeue::requeue(Duration::ZERO));
        }
        let uid = backup.meta().uid.clone().unwrap_or_default();
        let source = source_key(backup);
        // Decided under the lock, acted on after it (no lock is held across an await).
        let waiting_on = {
            let mut running = self.running();
            running.retain(|_, r| !r.start_again());
            if let Some(mine) = running.get(key) {
                if mine.uid == uid {
                    return Ok(Requeue::requeue(LOOK_IN));
                }
                // A namesake's task (the backup was deleted and made again).
                mine.task.abort();
                running.remove(key);
            }
            match running
                .iter()
                .find(|(_, r)| r.source == source && !r.task.is_finished())
            {
                Some((other, _)) => Some(other.name().to_owned()),
                None => {
                    let ended = Arc::new(AtomicBool::new(false));
                    let task = tokio::spawn(run::run(
                        self.shared.clone(),
                        Arc::new(backup.clone()),
                        ended.clone(),
                    ));
                    running.insert(
                        key.clone(),
                        Running {
                            uid,
                            source,
                            task,
                            ended,
                        },
                    );
                    None
                }
            }
        };
        if let Some(other) = waiting_on {
            tracing::info!(backup = %key, %other, "another backup of the same source runs; waiting");
            waiting_for(&api, backup, &other).await?;
        }
        Ok(Requeue::requeue(LOOK_IN))
    }

    async fn cleanup(&self, backup: &ValkeyBackup, key: &ObjectKey) -> Result<Requeue, Error> {
        self.stop(key);
        if !has_finalizer(backup) {
            return Ok(Requeue::await_change());
        }
        let api: Api<ValkeyBackup> = Api::namespaced(self.shared.client.clone(), key.namespace());
        // A backup that never started capturing wrote nothing: its store need not even answer.
        let wrote = backup
            .status
            .as_ref()
            .is_some_and(|s| s.start_time.is_some());
        if backup.spec.deletion_policy == BackupDeletionPolicy::Delete && wrote {
            match delete_objects(&self.shared, backup).await {
                Ok(()) => {}
                Err(Unopened::Api(error)) => {
                    return Err(api_error("reading the store's Secrets")(error));
                }
                Err(Unopened::Problem(problem))
                    if problem.reason == StatusReason::StoreUnreachable =>
                {
                    // Kept until the store answers: the objects must not outlive the backup
                    // unnoticed. Say so, and retry.
                    self.shared
                        .events
                        .warning(backup, problem.reason.as_str(), "DeleteObjects", &format!("{} The ValkeyBackup is deleted once its objects are; remove the finalizer {FINALIZER} to delete it without them.", problem.message))
                        .await;
                    return Ok(Requeue::requeue(Duration::from_secs(30)));
                }
                Err(Unopened::Problem(problem)) => {
                    // No way to the store as the spec stands (its Secret went first, as in a
                    // deleted namespace): the objects are left, and said so.
                    self.shared
                        .events
                        .warning(
                            backup,
                            "ObjectsLeft",
                            "DeleteObjects",
                            &format!(
                                "The backup's objects are left in the store under {}: {}",
                                location(backup),
                                problem.message
                            ),
                        )
                        .await;
                }
            }
        }
        set_finalizer(&api, backup, false).await?;
        Ok(Requeue::await_change())
    }

    fn forget(&self, key: &ObjectKey) {
        self.stop(key);
        self.kept.forget(key);
    }
}

/// Says in the status that the backup waits for `other`, another backup of its source (once).
async fn waiting_for(
    api: &Api<ValkeyBackup>,
    backup: &ValkeyBackup,
    other: &str,
) -> Result<(), Error> {
    const REASON: &str = StatusReason::AnotherBackupRunning.as_str();
    let mut status = backup.status.clone().unwrap_or_default();
    if status.reason.as_deref() == Some(REASON) {
        return Ok(());
    }
    status.phase = Some(BackupPhase::Pending);
    status.reason = Some(REASON.to_owned());
    status.message = Some(format!(
        "ValkeyBackup {other} of the same {} is being captured: this one starts when it ends.",
        backup.spec.source.kind.as_str()
    ));
    status.observed_generation = backup.meta().generation;
    plumbing::apply::apply_status(api, FIELD_MANAGER, &backup.name_any(), &status)
        .await
        .map(|_| ())
        .map_err(Error::Status)
}

fn location(backup: &ValkeyBackup) -> String {
    choose::location(
        &backup.namespace().unwrap_or_default(),
        &backup.spec.source.name,
        &backup.name_any(),
        backup.meta().uid.as_deref().unwrap_or_default(),
    )
}

/// Deletes the backup's objects: the manifest first (a half-deleted backup is an incomplete
/// one, never a fragment that looks restorable), then everything else under its location.
async fn delete_objects(shared: &Shared, backup: &ValkeyBackup) -> Result<(), Unopened> {
    let namespace = backup.namespace().unwrap_or_default();
    let store = store::open(&shared.client, &namespace, &backup.spec.store).await?;
    let location = location(backup);
    let failed = |e: backup::StoreError| Unopened::Problem(store::unreachable(&e));
    store
        .delete(&format!("{location}/{}", backup::manifest::MANIFEST_NAME))
        .await
        .map_err(failed)?;
    for object in store.list(&location).await.map_err(failed)? {
        store.delete(&object).await.map_err(failed)?;
    }
    tracing::info!(backup = %backup.name_any(), %location, "deleted the backup's objects");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that has finished, having written its backup's last phase or not.
    async fn finished(ended: bool) -> Running {
        let task = tokio::spawn(async {});
        while !task.is_finished() {
            tokio::task::yield_now().await;
        }
        Running {
            uid: "u".into(),
            source: "ns/ValkeyCluster/c".into(),
            task,
            ended: Arc::new(AtomicBool::new(ended)),
        }
    }

    #[tokio::test]
    async fn a_task_that_wrote_the_last_phase_is_never_started_again() {
        // The cache may still show the backup Running after its task wrote Failed or Completed.
        assert!(!finished(true).await.start_again());
    }

    #[tokio::test]
    async fn a_task_that_stopped_without_writing_it_is_started_again() {
        assert!(finished(false).await.start_again());
    }

    #[tokio::test]
    async fn a_running_task_is_left_to_run() {
        let running = Running {
            uid: "u".into(),
            source: "ns/ValkeyCluster/c".into(),
            task: tokio::spawn(std::future::pending::<()>()),
            ended: Arc::new(AtomicBool::new(false)),
        };
        assert!(!running.start_again());
        running.task.abort();
    }
}
