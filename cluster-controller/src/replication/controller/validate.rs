//! The validation stage of a ValkeyReplication's pass: every spec error found from the object
//! alone, checked right after the claim and before anything is applied, so a spec a person must
//! correct creates or changes no Secret or member; the pass stops there with the problem in the
//! status, and the engine's data-safety rules still run (see `reconcile::protect`). Pure.
//!
//! The rest of a replication's spec is checked by the API server at admission (its CEL rules);
//! what needs the API to be found (a restore's backup, a Secret the spec names) is found by the
//! stage that reads it, which also comes before anything is made.

use valkey_api::v1alpha1::ValkeyReplication;

use crate::parent::conditions::Problem;
use crate::parent::tls;

/// The first spec error of `replication`, as the problem its status shows, with a message naming
/// the field.
pub fn spec(replication: &ValkeyReplication) -> Result<(), Problem> {
    match tls::unsupported(&replication.spec.tls) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use valkey_api::v1alpha1::StatusReason;

    fn replication(tls: &str) -> ValkeyReplication {
        let yaml = format!(
            "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\nmetadata: {{name: r, namespace: prod}}\nspec:\n  replicas: 1\n  tls: {tls}\n"
        );
        serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_tls_setting_this_version_does_not_serve_is_refused_naming_the_field() {
        assert_eq!(spec(&replication("{enabled: true}")), Ok(()));
        let p = spec(&replication("{enabled: true, plaintext: true}"))
            .err()
            .unwrap_or_else(|| panic!("the spec was taken as valid"));
        assert_eq!(p.reason, StatusReason::TLSNotSupported);
        assert!(p.message.contains("spec.tls.plaintext"), "{}", p.message);
    }
}
