//! `CLUSTER GETSLOTMIGRATIONS` (Valkey 9.0+): the jobs started by `CLUSTER MIGRATESLOTS`, on
//! the source (operation `EXPORT`) and on the target (`IMPORT`), newest first, finished jobs
//! kept for a while as a log.
//!
//! Each job is a map (RESP3) or flat array (RESP2) with, on 9.1: `name`, `operation`,
//! `slot_ranges` (`0-99 200-299`), `target_node`, `source_node`, `create_time`,
//! `last_update_time`, `last_ack_time` (Unix seconds), `state`, `message` (empty unless it
//! failed), `cow_size`, `remaining_repl_size`.

use redis::Value;

use super::ParseError;
use super::cluster_nodes::NodeId;
use super::slots::{SlotRange, SlotSet};
use super::value::{self, bad, field, opt_int, opt_text, shape};

const REPLY: &str = "CLUSTER GETSLOTMIGRATIONS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Seen on the source.
    Export,
    /// Seen on the target.
    Import,
    Other(String),
}

/// Where a job stands. Anything not finished counts as in progress, including states this
/// controller does not know, so an unknown state means "wait", never "retry".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Success,
    Cancelled,
    Failed,
    /// The target is deleting what it imported for a job that did not succeed; not finished.
    CleaningUp,
    /// Any other state, e.g. `waiting-to-snapshot`, `snapshotting`, `replicating`,
    /// `failover-granted` on the source or `receiving-snapshot` on the target.
    InProgress(String),
}

impl JobState {
    fn parse(text: &str) -> Self {
        match text {
            "success" => Self::Success,
            "cancelled" | "canceled" => Self::Cancelled,
            "failed" => Self::Failed,
            "cleaning-up" => Self::CleaningUp,
            other => Self::InProgress(other.to_owned()),
        }
    }

    /// Success, cancelled or failed: the job will not change again.
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Success | Self::Cancelled | Self::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMigrationJob {
    /// The job's name (a 40-hex id), the same on source and target.
    pub name: String,
    pub operation: Operation,
    pub slots: SlotSet,
    pub source_node: Option<NodeId>,
    pub target_node: Option<NodeId>,
    pub create_time: i64,
    pub last_update_time: i64,
    pub last_ack_time: Option<i64>,
    pub state: JobState,
    /// Why the job failed or was cancelled; `None` when empty.
    pub message: Option<String>,
    pub cow_size: Option<i64>,
    pub remaining_repl_size: Option<i64>,
}

/// Parses the whole reply (an array of jobs; `Nil` reads as none).
pub fn parse(reply: &Value) -> Result<Vec<SlotMigrationJob>, ParseError> {
    if matches!(reply, Value::Nil) {
        return Ok(Vec::new());
    }
    value::list(reply)
        .ok_or_else(|| shape(REPLY, "an array of jobs", reply))?
        .iter()
        .map(parse_job)
        .collect()
}

fn parse_job(job: &Value) -> Result<SlotMigrationJob, ParseError> {
    let fields = value::pairs(job).ok_or_else(|| shape(REPLY, "a map per job", job))?;
    let text = |key: &str| {
        let v = field(REPLY, &fields, key)?;
        value::text(v).ok_or_else(|| bad(REPLY, key, v))
    };
    let int = |key: &str| {
        let v = field(REPLY, &fields, key)?;
        value::int(v).ok_or_else(|| bad(REPLY, key, v))
    };
    let node = |key: &str| -> Result<Option<NodeId>, ParseError> {
        match opt_text(REPLY, &fields, key)? {
            None => Ok(None),
            Some(id) => NodeId::parse(&id)
                .map(Some)
                .ok_or_else(|| ParseError::BadValue {
                    reply: REPLY,
                    key: key.to_owned(),
                    value: id,
                }),
        }
    };
    let ranges = text("slot_ranges")?;
    let slots = parse_ranges(&ranges).ok_or_else(|| ParseError::BadValue {
        reply: REPLY,
        key: "slot_ranges".into(),
        value: ranges.clone(),
    })?;
    Ok(SlotMigrationJob {
        name: text("name")?,
        operation: match text("operation")?.to_ascii_uppercase().as_str() {
            "EXPORT" => Operation::Export,
            "IMPORT" => Operation::Import,
            other => Operation::Other(other.to_owned()),
        },
        slots,
        source_node: node("source_node")?,
        target_node: node("target_node")?,
        create_time: int("create_time")?,
        last_update_time: int("last_update_time")?,
        last_ack_time: opt_int(REPLY, &fields, "last_ack_time")?,
        state: JobState::parse(&text("state")?),
        message: opt_text(REPLY, &fields, "message")?.filter(|m| !m.is_empty()),
        cow_size: opt_int(REPLY, &fields, "cow_size")?,
        remaining_repl_size: opt_int(REPLY, &fields, "remaining_repl_size")?,
    })
}

/// `0-99 200-299` (spaces or commas between ranges).
fn parse_ranges(text: &str) -> Option<SlotSet> {
    let mut set = SlotSet::new();
    for part in text.split([' ', ',']).filter(|p| !p.is_empty()) {
        set.insert_range(part.parse::<SlotRange>().ok()?);
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_ranges("0-99 200").unwrap().to_string(), "0-99,200");
        assert_eq!(parse_ranges("").unwrap().count(), 0);
        assert!(parse_ranges("0-99 x").is_none());
    }

    #[test]
    fn shapes_that_are_not_jobs() {
        assert_eq!(parse(&Value::Nil), Ok(Vec::new()));
        assert_eq!(parse(&Value::Array(vec![])), Ok(Vec::new()));
        assert!(matches!(
            parse(&Value::Int(3)),
            Err(ParseError::Shape { .. })
        ));
        assert!(matches!(
            parse(&Value::Array(vec![bulk("name")])),
            Err(ParseError::Shape { .. })
        ));
        let missing = Value::Array(vec![Value::Array(vec![bulk("name"), bulk("x")])]);
        assert!(matches!(parse(&missing), Err(ParseError::Missing { .. })));
    }

    #[test]
    fn unknown_state_is_in_progress() {
        let state = JobState::parse("some-new-state");
        assert_eq!(state, JobState::InProgress("some-new-state".into()));
        assert!(!state.is_finished());
        assert!(!JobState::CleaningUp.is_finished());
    }
}
