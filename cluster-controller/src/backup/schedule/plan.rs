//! What a ValkeyBackupSchedule should do now, from its spec, its status and the backups it made
//! (read from the cache): pure, so each rule is tested without a cluster or a clock.
//!
//! - **When.** The due time is the schedule's newest time that is not after now and after the
//!   last one it acted on (`status.lastScheduleTime`, else its creation): times missed while the
//!   controller was down make one backup, not one each.
//! - **Name.** `<schedule>-<due time in UTC, yyyymmddhhmmss>`: two controllers, or one that died
//!   between creating a backup and recording it, create the same name, and the second create is
//!   refused by the API server. No Lease is needed for that.
//! - **One at a time.** A due time that comes while a backup it made is not finished is skipped
//!   (recorded as acted on, with an Event), not queued.
//! - **Retention.** Of its Completed backups the newest `count` are kept, and none older than
//!   `maxAge`, but the newest Completed one is always kept; a backup that is not Completed is
//!   deleted once a newer one completed, and never while it runs.

use std::str::FromStr;
use valkey_api::v1alpha1::StatusReason;

use croner::Cron;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use valkey_api::v1alpha1::{BackupPhase, ValkeyBackupScheduleSpec};

use crate::parent::conditions::Problem;

/// The label that names the schedule that made a backup. Deleting the schedule leaves its
/// backups (and their objects): a backup is data of record, not a child to collect.
pub const SCHEDULE_LABEL: &str = "valkey.io/backup-schedule";

/// A backup the schedule made, as the cache shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Made {
    pub name: String,
    pub phase: Option<BackupPhase>,
    pub created: Timestamp,
    pub completed: Option<Timestamp>,
    /// It has a deletionTimestamp: already going.
    pub going: bool,
}

impl Made {
    fn finished(&self) -> bool {
        matches!(
            self.phase,
            Some(BackupPhase::Completed | BackupPhase::Failed)
        )
    }
}

/// A parsed schedule: the cron times in their time zone.
pub struct Times {
    cron: Cron,
    zone: TimeZone,
}

impl Times {
    /// `spec.schedule` read in `spec.timeZone`; a problem naming the field when either does not
    /// parse.
    pub fn parse(spec: &ValkeyBackupScheduleSpec) -> Result<Self, Problem> {
        let cron = Cron::from_str(spec.schedule.trim()).map_err(|error| Problem {
            reason: StatusReason::InvalidSchedule,
            message: format!(
                "spec.schedule {:?} is not a cron schedule ({error}): write five fields (minute hour day-of-month month day-of-week), for example \"0 2 * * *\", or @daily. No backup is made until it is corrected.",
                spec.schedule
            ),
        })?;
        let zone = TimeZone::get(&spec.time_zone).map_err(|error| Problem {
            reason: StatusReason::InvalidTimeZone,
            message: format!(
                "spec.timeZone {:?} is not a known time zone ({error}): use an IANA name such as UTC or Europe/Paris. No backup is made until it is corrected.",
                spec.time_zone
            ),
        })?;
        Ok(Self { cron, zone })
    }

    /// The newest time of the schedule at or before `now`.
    fn latest(&self, now: Timestamp) -> Option<Timestamp> {
        let zoned = now.to_zoned(self.zone.clone());
        self.cron
            .find_previous_occurrence(&zoned, true)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The first time of the schedule after `now`.
    pub fn next(&self, now: Timestamp) -> Option<Timestamp> {
        let zoned = now.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The time of the schedule before `at`.
    fn before(&self, at: Timestamp) -> Option<Timestamp> {
        let zoned = at.to_zoned(self.zone.clone());
        self.cron
            .find_previous_occurrence(&zoned, false)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// What the schedule does this pass.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Create this backup (its name), for this due time.
    pub create: Option<(String, Timestamp)>,
    /// A due time skipped because `.1` (a backup it made) still runs.
    pub skipped: Option<(Timestamp, String)>,
    /// The due time acted on (created or skipped): the new `status.lastScheduleTime`.
    pub acted_on: Option<Timestamp>,
    /// Backups retention no longer keeps.
    pub delete: Vec<String>,
    /// Its backup that is not finished, if any.
    pub active: Option<String>,
    /// Its newest Completed backup and when it completed.
    pub newest_completed: Option<(String, Timestamp)>,
    /// The next time it will make a backup (none while suspended).
    pub next: Option<Timestamp>,
    /// No backup completed since the schedule's time before the last one it acted on: at least
    /// two backups in a row are missing.
    pub stale: bool,
}

/// The backup's name for a due time: `<schedule>-<yyyymmddhhmmss>` in UTC.
pub fn backup_name(schedule: &str, due: Timestamp) -> String {
    format!("{schedule}-{}", due.strftime("%Y%m%d%H%M%S"))
}

/// The plan for `schedule` (its name) at `now`. `created`: when the schedule was created;
/// `acted`: the last due time acted on (`status.lastScheduleTime`).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    schedule: &str,
    spec: &ValkeyBackupScheduleSpec,
    times: &Times,
    created: Timestamp,
    acted: Option<Timestamp>,
    made: &[Made],
    now: Timestamp,
) -> Plan {
    let since = acted.unwrap_or(created);
    let mut plan = Plan {
        active: made
            .iter()
            .filter(|m| !m.finished() && !m.going)
            .max_by_key(|m| m.created)
            .map(|m| m.name.clone()),
        ..Plan::default()
    };
    let mut completed: Vec<(&Made, Timestamp)> = made
        .iter()
        .filter(|m| m.phase == Some(BackupPhase::Completed))
        .filter_map(|m| Some((m, m.completed?)))
        .collect();
    // Newest first; a tie is broken by name, so every controller picks the same one.
    completed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.name.cmp(&a.0.name)));
    plan.newest_completed = completed.first().map(|(m, at)| (m.name.clone(), *at));

    if !spec.suspend {
        if let Some(due) = times.latest(now).filter(|due| *due > since) {
            plan.acted_on = Some(due);
            match &plan.active {
                Some(active) => plan.skipped = Some((due, active.clone())),
                None => plan.create = Some((backup_name(schedule, due), due)),
            }
        }
        plan.next = times.next(now);
    }

    // Stale: the schedule's time before the last one acted on has no Completed backup since.
    let last = plan.acted_on.unwrap_or(since);
    if let Some(before) = times.before(last).filter(|b| *b >= created) {
        plan.stale = plan
            .newest_completed
            .as_ref()
            .is_none_or(|(_, at)| *at < before);
    }

    plan.delete = expired(spec, &completed, made, now);
    plan
}

/// The backups retention no longer keeps (see the module's rules).
fn expired(
    spec: &ValkeyBackupScheduleSpec,
    completed: &[(&Made, Timestamp)],
    made: &[Made],
    now: Timestamp,
) -> Vec<String> {
    let retention = &spec.retention;
    let count = usize::try_from(retention.count.max(1)).unwrap_or(1);
    let max_age = retention.max_age.as_deref().and_then(age_seconds);
    let mut delete: Vec<String> = completed
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0)
        .filter(|(i, (_, at))| {
            *i >= count || max_age.is_some_and(|age| now.as_second() - at.as_second() > age)
        })
        .map(|(_, (m, _))| m.name.clone())
        .collect();
    if let Some((_, newest)) = completed.first() {
        delete.extend(
            made.iter()
                .filter(|m| m.phase == Some(BackupPhase::Failed) && m.created < *newest)
                .map(|m| m.name.clone()),
        );
    }
    delete.retain(|name| made.iter().any(|m| &m.name == name && !m.going));
    delete.sort();
    delete
}

/// `maxAge` (`30d`, `12h`, `90m`) in seconds.
fn age_seconds(age: &str) -> Option<i64> {
    let (number, unit) = age.split_at(age.len().checked_sub(1)?);
    let n: i64 = number.parse().ok()?;
    let unit = match unit {
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ValkeyBackupScheduleSpec {
        let mut value: serde_json::Value =
            serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        let object = value.as_object_mut().unwrap_or_else(|| panic!("a map"));
        object.entry("timeZone").or_insert("UTC".into());
        object
            .entry("retention")
            .or_insert(serde_json::json!({"count": 7}));
        object.entry("template").or_insert(serde_json::json!({
            "source": {"kind": "ValkeyCluster", "name": "cache"},
            "store": {"s3": {"endpoint": "http://store", "bucket": "b", "credentials": {"secretName": "s"}}}
        }));
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    const CREATED: &str = "2026-11-01T00:00:00Z";

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn made(
        name: &str,
        phase: Option<BackupPhase>,
        created: &str,
        completed: Option<&str>,
    ) -> Made {
        Made {
            name: name.into(),
            phase,
            created: at(created),
            completed: completed.map(at),
            going: false,
        }
    }

    fn times(spec: &ValkeyBackupScheduleSpec) -> Times {
        Times::parse(spec).unwrap_or_else(|p| panic!("{}", p.message))
    }

    #[test]
    fn a_due_time_makes_one_backup_named_by_it_and_missed_times_make_one_not_many() {
        let s = spec("{schedule: '0 * * * *'}");
        // Created at 09:30; the controller looks at 12:10: 10:00, 11:00 and 12:00 were missed.
        let p = plan(
            "hourly",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T09:30:00Z")),
            &[],
            at("2026-12-04T12:10:00Z"),
        );
        assert_eq!(
            p.create,
            Some(("hourly-20261204120000".into(), at("2026-12-04T12:00:00Z")))
        );
        assert_eq!(p.acted_on, Some(at("2026-12-04T12:00:00Z")));
        assert_eq!(p.next, Some(at("2026-12-04T13:00:00Z")));
    }

    #[test]
    fn a_time_already_acted_on_makes_nothing_until_the_next() {
        let s = spec("{schedule: '@hourly'}");
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T12:00:00Z")),
            &[],
            at("2026-12-04T12:59:59Z"),
        );
        assert_eq!(p.create, None);
        assert_eq!(p.acted_on, None);
        assert_eq!(p.next, Some(at("2026-12-04T13:00:00Z")));
    }

    #[test]
    fn the_time_zone_decides_which_instant_is_two_in_the_morning() {
        let s = spec("{schedule: '0 2 * * *', timeZone: Europe/Paris}");
        let p = plan(
            "n",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-03T12:00:00Z")),
            &[],
            at("2026-12-04T01:30:00Z"),
        );
        // 02:00 in Paris in December is 01:00 UTC.
        assert_eq!(
            p.create,
            Some(("n-20261204010000".into(), at("2026-12-04T01:00:00Z")))
        );
    }

    #[test]
    fn a_time_that_comes_while_its_backup_runs_is_skipped_not_queued() {
        let s = spec("{schedule: '*/5 * * * *'}");
        let running = made(
            "m-20261204120000",
            Some(BackupPhase::Running),
            "2026-12-04T12:00:00Z",
            None,
        );
        let p = plan(
            "m",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T12:00:00Z")),
            &[running],
            at("2026-12-04T12:05:01Z"),
        );
        assert_eq!(p.create, None);
        assert_eq!(
            p.skipped,
            Some((at("2026-12-04T12:05:00Z"), "m-20261204120000".into()))
        );
        assert_eq!(p.acted_on, Some(at("2026-12-04T12:05:00Z")));
        assert_eq!(p.active.as_deref(), Some("m-20261204120000"));
    }

    #[test]
    fn suspended_it_makes_nothing_and_has_no_next_time_but_still_expires() {
        let s = spec("{schedule: '@hourly', suspend: true, retention: {count: 1}}");
        let old = made(
            "h-1",
            Some(BackupPhase::Completed),
            "2026-12-04T10:00:00Z",
            Some("2026-12-04T10:01:00Z"),
        );
        let new = made(
            "h-2",
            Some(BackupPhase::Completed),
            "2026-12-04T11:00:00Z",
            Some("2026-12-04T11:01:00Z"),
        );
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T09:00:00Z")),
            &[old, new],
            at("2026-12-04T13:10:00Z"),
        );
        assert_eq!((p.create, p.next), (None, None));
        assert_eq!(p.delete, vec!["h-1".to_string()]);
    }

    #[test]
    fn retention_keeps_the_newest_count_and_none_older_than_max_age_but_always_the_newest() {
        let s = spec("{schedule: '@daily', retention: {count: 2, maxAge: 2d}}");
        let backups = [
            made(
                "d-1",
                Some(BackupPhase::Completed),
                "2026-11-01T00:00:00Z",
                Some("2026-11-01T00:05:00Z"),
            ),
            made(
                "d-2",
                Some(BackupPhase::Completed),
                "2026-12-03T00:00:00Z",
                Some("2026-12-03T00:05:00Z"),
            ),
            made(
                "d-3",
                Some(BackupPhase::Completed),
                "2026-12-04T00:00:00Z",
                Some("2026-12-04T00:05:00Z"),
            ),
        ];
        let p = plan(
            "d",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T00:00:00Z")),
            &backups,
            at("2026-12-04T10:00:00Z"),
        );
        assert_eq!(
            p.delete,
            vec!["d-1".to_string()],
            "d-1 is third and too old"
        );

        // Ten days later nothing new completed: age expires d-2, but d-3, the newest, stays.
        let p = plan(
            "d",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-14T00:00:00Z")),
            &backups,
            at("2026-12-14T10:00:00Z"),
        );
        assert_eq!(p.delete, vec!["d-1".to_string(), "d-2".to_string()]);
        assert_eq!(
            p.newest_completed,
            Some(("d-3".into(), at("2026-12-04T00:05:00Z")))
        );
    }

    #[test]
    fn a_failed_backup_goes_once_a_newer_one_completed_and_a_running_one_never() {
        let s = spec("{schedule: '@hourly', retention: {count: 5}}");
        let backups = [
            made(
                "h-1",
                Some(BackupPhase::Failed),
                "2026-12-04T10:00:00Z",
                Some("2026-12-04T10:01:00Z"),
            ),
            made(
                "h-2",
                Some(BackupPhase::Completed),
                "2026-12-04T11:00:00Z",
                Some("2026-12-04T11:02:00Z"),
            ),
            made(
                "h-3",
                Some(BackupPhase::Failed),
                "2026-12-04T12:00:00Z",
                Some("2026-12-04T12:01:00Z"),
            ),
            made(
                "h-4",
                Some(BackupPhase::Running),
                "2026-12-04T09:00:00Z",
                None,
            ),
        ];
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T12:00:00Z")),
            &backups,
            at("2026-12-04T12:30:00Z"),
        );
        assert_eq!(
            p.delete,
            vec!["h-1".to_string()],
            "h-3 is newer than the newest Completed"
        );
    }

    #[test]
    fn a_backup_already_going_is_not_deleted_again() {
        let s = spec("{schedule: '@hourly', retention: {count: 1}}");
        let mut old = made(
            "h-1",
            Some(BackupPhase::Completed),
            "2026-12-04T10:00:00Z",
            Some("2026-12-04T10:01:00Z"),
        );
        old.going = true;
        let new = made(
            "h-2",
            Some(BackupPhase::Completed),
            "2026-12-04T11:00:00Z",
            Some("2026-12-04T11:01:00Z"),
        );
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T11:00:00Z")),
            &[old, new],
            at("2026-12-04T11:30:00Z"),
        );
        assert!(p.delete.is_empty(), "{:?}", p.delete);
    }

    #[test]
    fn stale_once_two_times_in_a_row_made_no_completed_backup() {
        let s = spec("{schedule: '@hourly'}");
        let good = made(
            "h-1",
            Some(BackupPhase::Completed),
            "2026-12-04T10:00:00Z",
            Some("2026-12-04T10:01:00Z"),
        );
        let failed = made(
            "h-2",
            Some(BackupPhase::Failed),
            "2026-12-04T11:00:00Z",
            Some("2026-12-04T11:01:00Z"),
        );
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T11:00:00Z")),
            &[good.clone(), failed.clone()],
            at("2026-12-04T11:30:00Z"),
        );
        assert!(!p.stale, "one missed time is not stale yet");
        let p = plan(
            "h",
            &s,
            &times(&s),
            at(CREATED),
            Some(at("2026-12-04T11:00:00Z")),
            &[good, failed],
            at("2026-12-04T12:00:30Z"),
        );
        assert!(p.stale, "11:00 failed and 12:00 is only starting");
    }

    #[test]
    fn a_new_schedule_is_not_stale_before_its_second_time() {
        let s = spec("{schedule: '@hourly'}");
        let created = at("2026-12-04T09:30:00Z");
        let p = plan(
            "h",
            &s,
            &times(&s),
            created,
            None,
            &[],
            at("2026-12-04T10:00:30Z"),
        );
        assert!(p.create.is_some() && !p.stale, "{p:?}");
    }

    #[test]
    fn a_schedule_or_time_zone_that_does_not_parse_names_its_field() {
        let bad = spec("{schedule: '61 * * * *'}");
        let problem = Times::parse(&bad).err().unwrap_or_else(|| panic!("parsed"));
        assert_eq!(problem.reason.as_str(), "InvalidSchedule");
        assert!(
            problem.message.contains("spec.schedule"),
            "{}",
            problem.message
        );
        let bad = spec("{schedule: '@daily', timeZone: Mars/Olympus}");
        let problem = Times::parse(&bad).err().unwrap_or_else(|| panic!("parsed"));
        assert_eq!(problem.reason.as_str(), "InvalidTimeZone");
        assert!(
            problem.message.contains("spec.timeZone"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn max_age_reads_minutes_hours_and_days() {
        assert_eq!(age_seconds("90m"), Some(5400));
        assert_eq!(age_seconds("12h"), Some(43_200));
        assert_eq!(age_seconds("30d"), Some(2_592_000));
        assert_eq!(age_seconds("3w"), None);
    }
}
