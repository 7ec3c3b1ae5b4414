//! The shell every controller of this project runs its reconciler in, so that each binary writes
//! only its passes: objects the types cannot read and objects being deleted are left alone, each
//! pass is timed and logged under the object's key, a failed pass is counted by its error's
//! metric label and retried after a per-object back-off, no pass runs before every watch cache
//! has listed, and what is kept about an object is forgotten when the object goes.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::cache::Cache;
use crate::health::Readiness;
use crate::key::ObjectKey;
use crate::metrics::Metrics;

/// How long a pass waits for the watch caches to list once before it gives up and retries: until
/// then an absent object may only be unseen.
const CACHE_SYNC: Duration = Duration::from_secs(30);
const RETRY_UNSYNCED: Duration = Duration::from_secs(5);

/// An error a pass can end with.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// The `kind` label of `reconcile_errors_total`: a short, fixed word per kind of failure.
    fn metric_label(&self) -> &'static str;
}

/// What a controller binary writes: one pass over one object, and what to drop when it goes.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind reconciled.
    type Object: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static;
    type Error: ReconcileError;

    /// One pass over `object`, which the types could read and which is not being deleted.
    fn reconcile(
        &self,
        object: &Self::Object,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// `object` is being deleted (it has a deletionTimestamp). Most kinds leave that to owner
    /// references and do nothing; a kind with a finalizer of its own (a ValkeyBackup deletes
    /// its objects in a store) does its work and removes the finalizer here.
    fn cleanup(
        &self,
        object: &Self::Object,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send {
        let _ = (object, key);
        std::future::ready(Ok(Action::await_change()))
    }

    /// `key`'s object is gone: drop whatever is kept about it.
    fn forget(&self, key: &ObjectKey) {
        let _ = key;
    }
}

/// The reconciler with what the shell keeps around it.
pub(crate) struct Shell<R> {
    reconciler: R,
    controller: String,
    metrics: Metrics,
    readiness: Readiness,
    /// Failed passes in a row, per object.
    backoff: Backoff,
}

impl<R: Reconciler> Shell<R> {
    pub(crate) fn new(
        reconciler: R,
        controller: &str,
        metrics: Metrics,
        readiness: Readiness,
    ) -> Self {
        Self {
            reconciler,
            controller: controller.to_owned(),
            metrics,
            readiness,
            backoff: Backoff::default(),
        }
    }

    async fn pass(&self, guarded: &DeserializeGuard<R::Object>) -> Result<Action, R::Error> {
        let key = ObjectKey::of(guarded);
        let object = match &guarded.0 {
            Ok(object) => object,
            Err(invalid) => {
                // A stored object the types cannot read: wait for someone to fix it.
                tracing::warn!(object = %key, error = %invalid.error, "cannot read this object");
                return Ok(Action::await_change());
            }
        };
        if object.meta().deletion_timestamp.is_some() {
            // Owner references take the children with it; a finalizer of the kind's is its own.
            let action = self.reconciler.cleanup(object, &key).await?;
            self.backoff.succeeded(&key);
            return Ok(action);
        }
        if tokio::time::timeout(CACHE_SYNC, self.readiness.synced())
            .await
            .is_err()
        {
            tracing::warn!(object = %key, "the watch caches have not listed yet; retrying");
            return Ok(Action::requeue(RETRY_UNSYNCED));
        }
        let _timer = self.metrics.reconcile_started(&self.controller);
        let action = self.reconciler.reconcile(object, &key).await?;
        self.backoff.succeeded(&key);
        Ok(action)
    }

    /// Counts the failure and retries after the object's back-off.
    fn failed(&self, key: &ObjectKey, error: &R::Error) -> Action {
        self.metrics
            .reconcile_failed(&self.controller, error.metric_label());
        let delay = self.backoff.failed(key);
        tracing::warn!(object = %key, %error, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    fn forget(&self, key: &ObjectKey) {
        self.backoff.succeeded(key);
        self.reconciler.forget(key);
        tracing::debug!(object = %key, "gone; forgotten");
    }
}

/// Runs a controller over `primary` (plus whatever `children` adds to it) with `shell` until
/// `stop` resolves, forgetting every object that goes.
pub(crate) async fn run<R, F>(
    primary: Cache<DeserializeGuard<R::Object>>,
    children: F,
    shell: Shell<R>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) where
    R: Reconciler,
    F: FnOnce(Controller<DeserializeGuard<R::Object>>) -> Controller<DeserializeGuard<R::Object>>,
{
    let (departures, mut departed) = tokio::sync::mpsc::unbounded_channel();
    let (store, applied) = primary.reconciled(departures);
    let controller = children(Controller::for_stream(applied, store));
    let shell = Arc::new(shell);
    let forgetting = {
        let shell = shell.clone();
        tokio::spawn(async move {
            while let Some(key) = departed.recv().await {
                shell.forget(&key);
            }
        })
    };
    let reconcile = |guarded: Arc<DeserializeGuard<R::Object>>, shell: Arc<Shell<R>>| {
        let span = tracing::info_span!("reconcile", object = %ObjectKey::of(guarded.as_ref()));
        async move { shell.pass(&guarded).await }.instrument(span)
    };
    let error_policy =
        |guarded: Arc<DeserializeGuard<R::Object>>, error: &R::Error, shell: Arc<Shell<R>>| {
            shell.failed(&ObjectKey::of(guarded.as_ref()), error)
        };
    controller
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, shell)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile request failed");
            }
        })
        .await;
    forgetting.abort();
}
