//! `spec.restoreFrom` on a parent kind. The API takes it (the schema is the backup's), but this
//! version of the operator captures backups and does not restore them yet: a parent that asks
//! for a restore is not formed at all, rather than formed empty, which would look like a restore
//! that lost every key. The stop comes before any member exists, so nothing is to undo.

use valkey_api::v1alpha1::RestoreFrom;

use super::conditions::Problem;

/// The problem of a parent that asks for a restore, naming what it asked for.
pub fn not_available(restore_from: Option<&RestoreFrom>, kind: &str) -> Option<Problem> {
    let from = restore_from?;
    let what = match (&from.backup, &from.path) {
        (Some(backup), _) => format!("ValkeyBackup {backup}"),
        (None, Some(path)) => format!("the backup at {path}"),
        (None, None) => "a backup".to_owned(),
    };
    Some(Problem {
        reason: "RestoreNotAvailable".into(),
        message: format!(
            "spec.restoreFrom asks to start from {what}, and this version of the operator cannot restore yet; no member is created, so the {kind} does not start empty. Delete this {kind} and create it without restoreFrom, or restore with an operator version that supports it."
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_restore_asked_nothing_to_say() {
        assert!(not_available(None, "ValkeyCluster").is_none());
    }

    #[test]
    fn a_restore_asked_is_refused_naming_the_backup() {
        let from: RestoreFrom = serde_json::from_value(serde_json::json!({"backup": "nightly"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let problem =
            not_available(Some(&from), "ValkeyCluster").unwrap_or_else(|| panic!("taken"));
        assert_eq!(problem.reason, "RestoreNotAvailable");
        assert!(
            problem.message.contains("ValkeyBackup nightly"),
            "{}",
            problem.message
        );
        assert!(
            problem.message.contains("does not start empty"),
            "{}",
            problem.message
        );
    }
}
