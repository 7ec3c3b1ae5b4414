//! The validation stage of a ValkeyCluster's pass: every spec error found from the object alone
//! and from its member nodes already in the cache, checked right after the claim and before
//! anything is applied. A spec a person must correct then creates or changes no Secret, policy or
//! member; the pass stops there with the problem in the status, and the engine's data-safety
//! rules still run (see `reconcile::protect`). Pure.
//!
//! What needs the API to be found (a restore's backup, a Secret the spec names) is found by the
//! stage that reads it, which also comes before anything is made.

use std::sync::Arc;

use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::{bus, desired};
use crate::engine::Desired;
use crate::parent::conditions::Problem;
use crate::parent::tls;

/// What a valid spec gives the rest of the pass: read once here, so no later stage can find it
/// malformed.
#[derive(Debug)]
pub struct Valid {
    /// What the spec asks of the engine (shards, replicas, the loss it accepts).
    pub engine_desired: Desired,
}

/// The first spec error of `cluster`, as the problem its status shows, with a message naming the
/// field; or what the valid spec says.
pub fn spec(cluster: &ValkeyCluster, existing: &[Arc<ValkeyNode>]) -> Result<Valid, Problem> {
    if let Some(problem) = tls::unsupported(&cluster.spec.tls) {
        return Err(problem);
    }
    // The recorded bus port against what the members run with: a port changed by hand would
    // otherwise be written into every member and policy before the members disagree.
    if let bus::Check::Changed(problem) = bus::check(cluster, existing) {
        return Err(problem);
    }
    let engine_desired = desired::for_engine(cluster)?;
    Ok(Valid { engine_desired })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use kube::ResourceExt;
    use valkey_api::v1alpha1::StatusReason;

    fn recorded(yaml: &str) -> ValkeyCluster {
        let mut c = cluster(yaml);
        c.annotations_mut()
            .insert(bus::ANNOTATION.into(), "23456".into());
        c
    }

    fn problem(c: &ValkeyCluster) -> Problem {
        spec(c, &[])
            .err()
            .unwrap_or_else(|| panic!("the spec was taken as valid"))
    }

    #[test]
    fn a_valid_spec_gives_what_it_asks_of_the_engine() {
        let valid = spec(&recorded(CLUSTER), &[]).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(valid.engine_desired.shards, 3);
    }

    #[test]
    fn slots_that_are_no_slots_are_an_invalid_spec_naming_the_field() {
        let p = problem(&recorded(&format!(
            "{CLUSTER}  acceptLostSlots: \"0-20000\"\n"
        )));
        assert_eq!(p.reason, StatusReason::InvalidSpec);
        assert!(p.message.contains("spec.acceptLostSlots"), "{}", p.message);
    }

    #[test]
    fn a_tls_setting_this_version_does_not_serve_is_refused() {
        let yaml = format!("{CLUSTER}  tls: {{enabled: true, plaintext: true}}\n");
        let p = problem(&recorded(&yaml));
        assert_eq!(p.reason, StatusReason::TLSNotSupported);
        assert!(p.message.contains("spec.tls.plaintext"), "{}", p.message);
    }

    #[test]
    fn a_bus_port_annotation_that_names_no_port_is_refused() {
        let mut c = cluster(CLUSTER);
        c.annotations_mut()
            .insert(bus::ANNOTATION.into(), "nonsense".into());
        let p = problem(&c);
        assert_eq!(p.reason, StatusReason::BusPortChanged);
        assert!(p.message.contains(bus::ANNOTATION), "{}", p.message);
    }
}
