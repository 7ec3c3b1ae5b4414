//! The conditions every parent kind reports (Ready, Progressing, Degraded), and a problem found
//! before the engine could run, in the words a person reads. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use plumbing::conditions::{ConditionStatus, set_condition};
use valkey_api::v1alpha1::StatusReason;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

/// A problem found before the engine could run (a missing Secret, an API error), with the words
/// a person should read: a reason of the schema's vocabulary, so no other word reaches a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: StatusReason,
    pub message: String,
}

/// What a pass concluded about a parent, in the words its conditions carry.
#[derive(Debug, Clone, Copy)]
pub struct Summary<'a> {
    pub reason: StatusReason,
    pub message: &'a str,
    pub ready: bool,
    pub progressing: bool,
    pub degraded: bool,
}

/// A parent's Ready / Progressing / Degraded conditions after a pass that concluded `summary`,
/// from the previous ones (a condition keeps its transition time while its status holds). Every
/// parent kind reports the same three.
pub fn summary_conditions(
    previous: Option<Vec<Condition>>,
    summary: &Summary<'_>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut conditions = previous.unwrap_or_default();
    let mut set = |type_: &str, ok: bool, why: StatusReason, text: &str| {
        set_condition(
            &mut conditions,
            type_,
            ConditionStatus::from(ok),
            why.as_str(),
            text,
            generation,
            now,
        );
    };
    let (reason, message) = (summary.reason, summary.message);
    set(READY, summary.ready, reason, message);
    if summary.progressing {
        set(PROGRESSING, true, reason, message);
    } else {
        set(
            PROGRESSING,
            false,
            StatusReason::Idle,
            "Nothing is in progress.",
        );
    }
    if summary.degraded {
        set(DEGRADED, true, reason, message);
    } else {
        set(
            DEGRADED,
            false,
            StatusReason::AsExpected,
            "Nothing needs attention.",
        );
    }
    conditions
}
