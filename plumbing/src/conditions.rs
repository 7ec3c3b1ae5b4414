//! Kubernetes-style status conditions over k8s-openapi's `meta/v1` `Condition`.
//!
//! The list is keyed by `type` and kept sorted by it, so that rebuilding a status yields the same
//! bytes and a steady state writes nothing. `lastTransitionTime` moves only when the status flips.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The three statuses the Kubernetes API conventions allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// Reads a status as written in a condition; anything unrecognised counts as `Unknown`.
    pub fn parse(value: &str) -> Self {
        match value {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value { Self::True } else { Self::False }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sets the condition of type `type_`, adding it when missing.
///
/// `lastTransitionTime` becomes `now` only for a new condition or when `status` differs from the
/// current one; a changed reason, message or generation keeps it. The list ends sorted by type
/// with one entry per type. Returns whether the list changed at all, so a caller can skip a
/// status write that would change nothing.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let before = conditions.clone();
    let last_transition_time = match find_condition(conditions, type_) {
        Some(current) if current.status == status.as_str() => current.last_transition_time.clone(),
        _ => now.clone(),
    };
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.as_str().to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation,
        last_transition_time,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    *conditions != before
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of the condition of type `type_`; `Unknown` when the condition is absent.
pub fn condition_status(conditions: &[Condition], type_: &str) -> ConditionStatus {
    find_condition(conditions, type_)
        .map(|c| ConditionStatus::parse(&c.status))
        .unwrap_or(ConditionStatus::Unknown)
}

pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    condition_status(conditions, type_) == ConditionStatus::True
}

/// Removes every condition of type `type_`; returns whether one was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Logs what a parent's status says when its reason or message changed (`before`: the last
/// status's, if any). Actions log themselves; a wait or a refusal leaves no other trace in the
/// log, and a stall must be readable after the fact. A status holds no secret, so neither does
/// this line.
pub fn log_status_change(
    before: Option<(Option<&str>, Option<&str>)>,
    state: &dyn std::fmt::Debug,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if before == Some((reason, message)) {
        return;
    }
    tracing::info!(
        state = ?state,
        reason = reason.unwrap_or_default(),
        "status: {}",
        message.unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    #[test]
    fn adds_a_new_condition_with_now() {
        let mut conditions = Vec::new();
        let changed = set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "PodPending",
            "The pod is not running yet.",
            Some(3),
            &at(100),
        );
        assert!(changed);
        assert_eq!(conditions.len(), 1);
        let ready = &conditions[0];
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "PodPending");
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(ready.last_transition_time, at(100));
    }

    #[test]
    fn same_values_change_nothing() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            true.into(),
            "Up",
            "Up.",
            Some(1),
            &at(100),
        );
        let snapshot = conditions.clone();
        let changed = set_condition(
            &mut conditions,
            "Ready",
            true.into(),
            "Up",
            "Up.",
            Some(1),
            &at(200),
        );
        assert!(!changed);
        assert_eq!(conditions, snapshot);
    }

    #[test]
    fn reason_change_keeps_transition_time() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            false.into(),
            "PodPending",
            "a",
            Some(1),
            &at(100),
        );
        let changed = set_condition(
            &mut conditions,
            "Ready",
            false.into(),
            "ValkeyDown",
            "b",
            Some(2),
            &at(200),
        );
        assert!(changed);
        let ready = find_condition(&conditions, "Ready");
        assert_eq!(ready.map(|c| c.reason.as_str()), Some("ValkeyDown"));
        assert_eq!(ready.map(|c| c.observed_generation), Some(Some(2)));
        assert_eq!(ready.map(|c| c.last_transition_time.clone()), Some(at(100)));
    }

    #[test]
    fn status_flip_moves_transition_time() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            false.into(),
            "PodPending",
            "a",
            None,
            &at(100),
        );
        assert!(set_condition(
            &mut conditions,
            "Ready",
            true.into(),
            "Up",
            "b",
            None,
            &at(200)
        ));
        assert_eq!(conditions[0].last_transition_time, at(200));
        assert!(is_condition_true(&conditions, "Ready"));
    }

    #[test]
    fn sorted_by_type_and_deduplicated() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            true.into(),
            "Up",
            "",
            None,
            &at(1),
        );
        set_condition(
            &mut conditions,
            "Degraded",
            false.into(),
            "Fine",
            "",
            None,
            &at(1),
        );
        set_condition(
            &mut conditions,
            "Progressing",
            false.into(),
            "Idle",
            "",
            None,
            &at(1),
        );
        let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Degraded", "Progressing", "Ready"]);

        // An unsorted list with a duplicate, as a hand-edited status might hold, is normalised.
        let mut messy = vec![
            conditions[2].clone(),
            conditions[0].clone(),
            conditions[2].clone(),
        ];
        assert!(set_condition(
            &mut messy,
            "Ready",
            true.into(),
            "Up",
            "",
            None,
            &at(9)
        ));
        assert_eq!(messy.len(), 2);
        assert_eq!(messy[0].type_, "Degraded");
        assert_eq!(messy[1].last_transition_time, at(1));
    }

    #[test]
    fn lookups_and_removal() {
        let mut conditions = Vec::new();
        assert_eq!(
            condition_status(&conditions, "Ready"),
            ConditionStatus::Unknown
        );
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::Unknown,
            "Probing",
            "",
            None,
            &at(1),
        );
        assert!(!is_condition_true(&conditions, "Ready"));
        assert_eq!(
            condition_status(&conditions, "Ready"),
            ConditionStatus::Unknown
        );
        assert!(remove_condition(&mut conditions, "Ready"));
        assert!(!remove_condition(&mut conditions, "Ready"));
        assert!(conditions.is_empty());
    }

    #[test]
    fn status_strings_round_trip() {
        for status in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::parse(status.as_str()), status);
        }
        assert_eq!(ConditionStatus::parse("yes"), ConditionStatus::Unknown);
    }
}
