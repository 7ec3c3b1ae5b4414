//! Moving slots on Valkey 9+, where the source migrates whole ranges itself
//! (`CLUSTER MIGRATESLOTS`) and reports progress in `CLUSTER GETSLOTMIGRATIONS`.
//!
//! The machine starts one job for every slot not yet on the target, waits while any job for
//! these slots is unfinished on either side, and is done once the target owns them all. A job
//! that failed or was cancelled is retried until `max_attempts` consecutive ones have not
//! succeeded, then reported. The job log is bounded by the server
//! (`cluster-slot-migration-log-max-len`), so the attempt count is a lower bound.

use crate::valkey::cluster_nodes::NodeId;
use crate::valkey::commands;
use crate::valkey::slot_migrations::{JobState, Operation, SlotMigrationJob};
use crate::valkey::slots::{SlotRange, SlotSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub source: NodeId,
    pub target: NodeId,
    /// The slots to move.
    pub slots: SlotSet,
    /// The slots the source serves, from its own CLUSTER NODES line.
    pub source_owns: SlotSet,
    /// The slots the target serves, from its own CLUSTER NODES line (it claims them when the
    /// job hands off).
    pub target_owns: SlotSet,
    /// `CLUSTER GETSLOTMIGRATIONS` on the source, as listed (newest first).
    pub source_jobs: Vec<SlotMigrationJob>,
    /// `CLUSTER GETSLOTMIGRATIONS` on the target; may be empty when it could not be read.
    pub target_jobs: Vec<SlotMigrationJob>,
    /// How many jobs in a row may fail or be cancelled before giving up.
    pub max_attempts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send [`Step::args`] (`CLUSTER MIGRATESLOTS ...`) to `source`.
    Start {
        source: NodeId,
        target: NodeId,
        ranges: Vec<SlotRange>,
    },
    /// A job for these slots is still running (on the source or the target).
    Wait { job: String, state: String },
    /// The target owns every slot.
    Done,
    /// `attempts` jobs in a row did not succeed; the newest said `message`.
    Failed {
        attempts: u32,
        message: Option<String>,
    },
    /// Some slots are served neither by the source nor by the target.
    NotOnSource { slots: SlotSet },
}

impl Step {
    /// The command of a [`Step::Start`]; `None` for the other steps.
    pub fn command(&self) -> Option<redis::Cmd> {
        match self {
            Step::Start { target, ranges, .. } => Some(commands::cluster_migrateslots([(
                ranges.as_slice(),
                target,
            )])),
            _ => None,
        }
    }
}

pub fn next_step(o: &Observed) -> Step {
    let remaining = o.slots.difference(&o.target_owns);
    let relevant = |job: &&SlotMigrationJob, operation: Operation| {
        job.operation == operation
            && !job.slots.is_disjoint(&o.slots)
            && job.source_node.as_ref().is_none_or(|n| *n == o.source)
            && job.target_node.as_ref().is_none_or(|n| *n == o.target)
    };
    let exports: Vec<&SlotMigrationJob> = o
        .source_jobs
        .iter()
        .filter(|j| relevant(j, Operation::Export))
        .collect();
    let imports = o
        .target_jobs
        .iter()
        .filter(|j| relevant(j, Operation::Import));
    if let Some(job) = exports
        .iter()
        .copied()
        .chain(imports)
        .find(|j| !j.state.is_finished())
    {
        return Step::Wait {
            job: job.name.clone(),
            state: state_name(&job.state),
        };
    }
    if remaining.is_empty() {
        return Step::Done;
    }
    let elsewhere = remaining.difference(&o.source_owns);
    if !elsewhere.is_empty() {
        return Step::NotOnSource { slots: elsewhere };
    }
    // Newest first: by creation time, and by list position (the server lists newest first)
    // among jobs created in the same second.
    let mut history: Vec<(usize, &SlotMigrationJob)> = exports.into_iter().enumerate().collect();
    history.sort_by(|(ia, a), (ib, b)| b.create_time.cmp(&a.create_time).then(ia.cmp(ib)));
    let unsuccessful: Vec<&SlotMigrationJob> = history
        .iter()
        .map(|(_, job)| *job)
        .take_while(|job| job.state != JobState::Success)
        .collect();
    let attempts = u32::try_from(unsuccessful.len()).unwrap_or(u32::MAX);
    if attempts >= o.max_attempts {
        return Step::Failed {
            attempts,
            message: unsuccessful.first().and_then(|job| job.message.clone()),
        };
    }
    Step::Start {
        source: o.source.clone(),
        target: o.target.clone(),
        ranges: remaining.ranges(),
    }
}

fn state_name(state: &JobState) -> String {
    match state {
        JobState::Success => "success".into(),
        JobState::Cancelled => "cancelled".into(),
        JobState::Failed => "failed".into(),
        JobState::CleaningUp => "cleaning-up".into(),
        JobState::InProgress(name) => name.clone(),
    }
}
