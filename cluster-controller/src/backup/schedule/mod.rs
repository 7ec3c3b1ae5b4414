//! The ValkeyBackupSchedule kind: ValkeyBackups made from a template at the times of a cron
//! schedule, and expired by its retention. It reads its backups from the ValkeyBackup cache (by
//! [`plan::SCHEDULE_LABEL`]) and its source from the sources' caches, so a schedule at rest costs
//! no API request: a pass runs at each due time, every [`reconcile::LOOK_IN`] while a backup of
//! it runs, and when the schedule changes.
//!
//! | stage | module | Kubernetes? |
//! | --- | --- | --- |
//! | when, what name, what to skip, what retention expires, whether it is stale | [`plan`] | no |
//! | backups created and deleted, Events, the status | [`reconcile`] | yes |

pub mod plan;
pub mod reconcile;

use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use plumbing::cache::Cache;
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyBackupSchedule};

use super::observe::Sources;

pub const CONTROLLER: &str = "valkey-backup-schedule-controller";

/// Sets up the schedule controller (its cache exists when this returns) and returns it, to run
/// until shutdown or lost leadership. `backups` and `sources` are the backup controller's caches.
pub fn start(
    handles: &plumbing::Handles,
    backups: kube::runtime::reflector::Store<DeserializeGuard<ValkeyBackup>>,
    sources: Sources,
) -> impl std::future::Future<Output = ()> + '_ {
    let schedules: Cache<DeserializeGuard<ValkeyBackupSchedule>> =
        handles.cache(watcher::Config::default());
    let ctx = reconcile::Context {
        client: handles.client.clone(),
        events: handles.events.clone(),
        backups,
        sources,
    };
    handles.run_as(CONTROLLER, schedules, |c| c, ctx)
}
