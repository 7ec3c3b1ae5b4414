//! A pass over a ValkeyBackupSchedule: carry out its [`plan`] (create the due backup, delete
//! the expired ones, say what was skipped) and write its status when it changed. No Lease: the
//! due backup's name is fixed by its time, so a second controller's create is refused by the API
//! server, and a delete of what is already gone is nothing.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use plumbing::conditions::{ConditionStatus, set_condition};
use plumbing::events::EventPublisher;
use plumbing::{ObjectKey, Reconciler};
use valkey_api::v1alpha1::{
    LastBackup, StatusReason, ValkeyBackup, ValkeyBackupSchedule, ValkeyBackupScheduleStatus,
};

use super::plan::{self, Made, Plan, SCHEDULE_LABEL, Times};
use crate::backup::observe::Sources;
use crate::parent::conditions::Problem;
use crate::parent::error::{Error, api_error};
use crate::parent::labels::FIELD_MANAGER;

/// How often a pass looks while a backup of the schedule runs (its end frees the next time and
/// may expire older ones). Read from the caches: no API request.
pub const LOOK_IN: Duration = Duration::from_secs(10);
/// The longest a schedule at rest waits before it looks again, whatever its next time.
const AT_MOST: Duration = Duration::from_secs(3600);

const READY: &str = "Ready";
const STALE: &str = "BackupStale";

pub struct Context {
    pub client: kube::Client,
    pub events: EventPublisher,
    pub backups: Store<DeserializeGuard<ValkeyBackup>>,
    pub sources: Sources,
}

impl Reconciler for Context {
    type Object = ValkeyBackupSchedule;
    type Error = Error;

    async fn reconcile(
        &self,
        schedule: &ValkeyBackupSchedule,
        key: &ObjectKey,
    ) -> Result<Requeue, Error> {
        let now = Timestamp::now();
        let times = match Times::parse(&schedule.spec) {
            Ok(times) => times,
            Err(problem) => {
                self.write_status(schedule, &Plan::default(), Some(&problem))
                    .await?;
                return Ok(Requeue::await_change());
            }
        };
        let created = schedule
            .meta()
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let acted = schedule
            .status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_deref())
            .and_then(|t| t.parse().ok());
        let made = self.made(key);
        let plan = plan::plan(
            key.name(),
            &schedule.spec,
            &times,
            created,
            acted,
            &made,
            now,
        );

        let api: Api<ValkeyBackup> = Api::namespaced(self.client.clone(), key.namespace());
        let candidate = self.backup(schedule, key, "");
        let source = self.sources.find(&candidate).err();
        if let Some((name, due)) = &plan.create {
            self.create(&api, schedule, key, name, *due).await?;
        }
        if let Some((due, active)) = &plan.skipped {
            let note = format!(
                "The backup due at {due} is skipped: {active}, made at an earlier time, still runs (one backup of a schedule at a time)."
            );
            self.events
                .warning(schedule, "BackupSkipped", "Schedule", &note)
                .await;
        }
        for name in &plan.delete {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {
                    let note = format!("{name} expired under spec.retention: deleted.");
                    self.events
                        .normal(schedule, "BackupExpired", "Retention", &note)
                        .await;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(api_error("deleting an expired ValkeyBackup")(error)),
            }
        }
        self.write_status(schedule, &plan, source.as_ref()).await?;

        let wait = if plan.active.is_some() || plan.create.is_some() {
            LOOK_IN
        } else {
            plan.next
                .map(|next| next.as_second() - now.as_second() + 1)
                .and_then(|s| u64::try_from(s).ok())
                .map_or(AT_MOST, |s| Duration::from_secs(s).min(AT_MOST))
        };
        Ok(Requeue::requeue(wait))
    }
}

impl Context {
    /// The backups this schedule made, from the cache.
    fn made(&self, key: &ObjectKey) -> Vec<Made> {
        self.backups
            .state()
            .iter()
            .filter_map(|guarded| guarded.0.as_ref().ok())
            .filter(|b| b.namespace().as_deref() == Some(key.namespace()))
            .filter(|b| b.labels().get(SCHEDULE_LABEL).map(String::as_str) == Some(key.name()))
            .map(|b| {
                let status = b.status.as_ref();
                Made {
                    name: b.name_any(),
                    phase: status.and_then(|s| s.phase),
                    created: b
                        .meta()
                        .creation_timestamp
                        .as_ref()
                        .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
                    completed: status
                        .and_then(|s| s.completion_time.as_deref())
                        .and_then(|t| t.parse().ok()),
                    going: b.meta().deletion_timestamp.is_some(),
                }
            })
            .collect()
    }

    /// The ValkeyBackup the schedule makes under `name`: its template, labelled with the
    /// schedule's name (no owner reference: deleting a schedule keeps its backups).
    fn backup(&self, schedule: &ValkeyBackupSchedule, key: &ObjectKey, name: &str) -> ValkeyBackup {
        ValkeyBackup {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(key.namespace().to_owned()),
                labels: Some([(SCHEDULE_LABEL.to_owned(), key.name().to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: schedule.spec.template.clone(),
            status: None,
        }
    }

    async fn create(
        &self,
        api: &Api<ValkeyBackup>,
        schedule: &ValkeyBackupSchedule,
        key: &ObjectKey,
        name: &str,
        due: Timestamp,
    ) -> Result<(), Error> {
        let backup = self.backup(schedule, key, name);
        match api.create(&PostParams::default(), &backup).await {
            Ok(_) => {
                let note = format!("{name} created for the time {due}.");
                self.events
                    .normal(schedule, "BackupCreated", "Schedule", &note)
                    .await;
                Ok(())
            }
            // Made already: by this controller before it died, or by another one.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(api_error("creating the scheduled ValkeyBackup")(error)),
        }
    }

    /// The status for `plan`, or for `problem`; written only when it changed.
    async fn write_status(
        &self,
        schedule: &ValkeyBackupSchedule,
        plan: &Plan,
        problem: Option<&Problem>,
    ) -> Result<(), Error> {
        let previous = schedule.status.clone().unwrap_or_default();
        let mut status = ValkeyBackupScheduleStatus {
            last_schedule_time: plan
                .acted_on
                .map(|t| t.to_string())
                .or(previous.last_schedule_time.clone()),
            next_schedule_time: plan.next.map(|t| t.to_string()),
            active: plan.active.clone(),
            last_successful_backup: plan
                .newest_completed
                .as_ref()
                .map(|(name, at)| LastBackup {
                    name: name.clone(),
                    completion_time: at.to_string(),
                })
                .or(previous.last_successful_backup.clone()),
            conditions: previous.conditions.clone(),
            observed_generation: schedule.meta().generation,
        };
        let generation = schedule.meta().generation;
        let now = Time(Timestamp::now());
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let (ready, reason, message) = match problem {
            Some(problem) => (false, problem.reason, problem.message.clone()),
            None if schedule.spec.suspend => (
                true,
                StatusReason::Suspended,
                "spec.suspend is true: no new backup is made; retention still expires old ones."
                    .to_owned(),
            ),
            None => (
                true,
                StatusReason::Scheduled,
                match plan.next {
                    Some(next) => format!("The next backup is made at {next}."),
                    None => "The schedule has no next time.".to_owned(),
                },
            ),
        };
        set_condition(
            conditions,
            READY,
            ConditionStatus::from(ready),
            reason.as_str(),
            &message,
            generation,
            &now,
        );
        let (stale, why, text) = if plan.stale {
            (
                true,
                StatusReason::NoRecentBackup,
                "No backup of this schedule completed at its last two times: see the Failed backups' conditions.",
            )
        } else {
            (
                false,
                StatusReason::AsExpected,
                "A recent backup of this schedule completed, or none is due yet.",
            )
        };
        set_condition(
            conditions,
            STALE,
            ConditionStatus::from(stale),
            why.as_str(),
            text,
            generation,
            &now,
        );
        if schedule.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<ValkeyBackupSchedule> = Api::namespaced(
            self.client.clone(),
            &schedule.namespace().unwrap_or_default(),
        );
        plumbing::apply::apply_status(&api, FIELD_MANAGER, &schedule.name_any(), &status)
            .await
            .map(|_| ())
            .map_err(Error::Status)
    }
}
