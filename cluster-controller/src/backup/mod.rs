//! The ValkeyBackup kind: one backup of a ValkeyCluster or ValkeyReplication into an object
//! store, on the floor the parent kinds share ([`crate::parent`]: the Lease per object, the
//! operator's Secrets, the members as the engine sees them, problems in a person's words). It
//! reads its source and the source's ValkeyNodes from watch caches, reaches the members with the
//! operator's credentials, captures each shard over a replication link as the `backup` user
//! ([`backup::capture`]), and writes the manifest last ([`backup::manifest`]).
//!
//! | stage | module | Kubernetes? |
//! | --- | --- | --- |
//! | the backup's Lease and finalizer; its capture task started, looked in on, stopped | [`reconcile`] | yes |
//! | the source, its members, the operator's logins, what each server says | [`observe`] | caches, Secrets, Valkey |
//! | the member per shard, whether it may start; object names, sizes | [`choose`] | no |
//! | the store from the spec and its Secrets | [`store`] | Secrets |
//! | one backup from start to manifest, its status as it goes | [`run`] | yes |
//! | backups on a cron schedule, and their expiry (a controller of its own) | [`schedule`] | yes |
//!
//! The cluster kind reads the same cache of ValkeyBackups: while one of its cluster is Running,
//! its engine starts no slot move (moves under way go on; the capture checks each shard's slots
//! after it and captures it again if they changed).
//!
//! `consistency: PausedWrites` begins every shard's capture under one write pause ([`paused`]).
//! What it does not do yet (docs/design/backup.md): TLS sources.
//!
//! A Completed backup is recorded as its source's `status.lastSuccessfulBackup` under a field
//! manager of its own ([`run::SOURCE_FIELD_MANAGER`]); the sources' passes never apply that
//! field, so they never take it away.

pub mod choose;
pub mod observe;
pub mod paused;
pub mod reconcile;
pub mod run;
pub mod schedule;
pub mod store;

use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use plumbing::cache::Cache;
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyBackupSchedule};

use reconcile::Context;
pub use reconcile::FINALIZER;

pub const CONTROLLER: &str = "valkey-backup-controller";

/// Which of the backup kinds the API serves (their CRDs exist): ValkeyBackups, and
/// ValkeyBackupSchedules. A release upgraded from one without them has none until someone
/// applies them (the operator may not create CRDs): the controller then runs without them rather
/// than keep every kind from being ready on a cache that never fills.
pub async fn served(client: &kube::Client) -> Served {
    use kube::Resource;
    let group = ValkeyBackup::api_version(&());
    match client.list_api_group_resources(&group).await {
        Ok(list) => {
            let has = |plural: &str| list.resources.iter().any(|r| r.name == plural);
            Served {
                backups: has(&ValkeyBackup::plural(&())),
                schedules: has(&ValkeyBackupSchedule::plural(&())),
            }
        }
        Err(error) => {
            tracing::debug!(%error, "the API's resources of {group}");
            Served::default()
        }
    }
}

/// See [`served`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Served {
    pub backups: bool,
    pub schedules: bool,
}

/// The cache of ValkeyBackups: the controller's, and read by the cluster kind (no slot move
/// starts while a backup of its cluster runs: [`crate::cluster::observe::running_backup`]).
pub fn cache(handles: &plumbing::Handles) -> Cache<DeserializeGuard<ValkeyBackup>> {
    handles.cache::<DeserializeGuard<ValkeyBackup>>(watcher::Config::default())
}

/// Sets up the ValkeyBackup controller over `backups` and returns it, to run until shutdown or
/// lost leadership. `sources`: the caches of the kinds reconciled here, which their own
/// controllers fill (a backup of a kind that is not reconciled here is refused).
/// `schedules`: whether the ValkeyBackupSchedule controller runs beside it ([`schedule`]).
pub fn start(
    handles: &plumbing::Handles,
    backups: Cache<DeserializeGuard<ValkeyBackup>>,
    sources: observe::Sources,
    schedules: bool,
) -> impl std::future::Future<Output = ()> + '_ {
    let shared = run::Shared {
        client: handles.client.clone(),
        events: handles.events.clone(),
        sources,
        metrics: handles.metrics.clone(),
    };
    let claims = plumbing::leader::Claims::new(
        handles.client.clone(),
        plumbing::leader::claim_identity(handles.namespace.as_deref()),
        "backup",
    );
    let scheduled =
        schedules.then(|| schedule::start(handles, backups.store(), shared.sources.clone()));
    let ctx = Context::new(shared, claims.clone());
    // The sources' caches are read, never reconciled from: a capture task polls what it waits
    // for.
    let captures = handles.run_as(CONTROLLER, backups, |c| c, ctx);
    let captures = claims.kept_during(handles.namespace.as_deref(), captures);
    async move {
        futures::join!(captures, async {
            if let Some(run) = scheduled {
                run.await;
            }
        });
    }
}
