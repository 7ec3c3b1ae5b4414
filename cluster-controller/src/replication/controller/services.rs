//! The replication's two Services, for clients: `<name>` (read/write) selects the pod of the
//! primary the operator recorded, and only while Valkey there says primary (the node-controller's
//! `valkey.io/role` label); `<name>-replicas` (read only) selects every pod that Valkey says is a
//! replica. An old primary back from a partition, or a member restarted alone, is never in the
//! read/write Service. Beside them a PodDisruptionBudget `<name>`: at most one member voluntarily
//! down, so a drain cannot take the primary and its last replica together. Pure builders; the
//! reconcile applies them when they differ.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::contract::{NODE_LABEL, ROLE_LABEL};
use valkey_api::v1alpha1::{Role, ValkeyReplication};

use crate::parent::external;
use crate::parent::labels::FIELD_MANAGER;
use crate::parent::serving::{Owner, disruption_budget, valkey_port};

/// `<replication>-replicas`.
pub fn replicas_service_name(replication: &str) -> String {
    format!("{replication}-replicas")
}

/// Both Services, for the primary recorded now (none before the first is chosen: the read/write
/// Service then selects no pod).
pub fn services(replication: &ValkeyReplication, primary: Option<&str>) -> Option<Vec<Service>> {
    let name = replication.meta().name.clone()?;
    let owner = replication.controller_owner_ref(&())?;
    let namespace = replication.namespace()?;
    let service = |service_name: String, selector: BTreeMap<String, String>| Service {
        metadata: ObjectMeta {
            name: Some(service_name),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_owned(), "valkey".to_owned()),
                ("app.kubernetes.io/instance".to_owned(), name.clone()),
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    FIELD_MANAGER.to_owned(),
                ),
                (REPLICATION_LABEL.to_owned(), name.clone()),
            ])),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(vec![valkey_port()]),
            ..Default::default()
        }),
        status: None,
    };
    let read_write = BTreeMap::from([
        (REPLICATION_LABEL.to_owned(), name.clone()),
        (
            NODE_LABEL.to_owned(),
            primary.unwrap_or_default().to_owned(),
        ),
        (ROLE_LABEL.to_owned(), Role::Primary.as_str().to_owned()),
    ]);
    let read_only = BTreeMap::from([
        (REPLICATION_LABEL.to_owned(), name.clone()),
        (ROLE_LABEL.to_owned(), Role::Replica.as_str().to_owned()),
    ]);
    let mut wanted = vec![
        service(name.clone(), read_write.clone()),
        service(replicas_service_name(&name), read_only.clone()),
    ];
    // Clients outside Kubernetes get the same two, through load balancers.
    if let (Some(access), Some(owner)) = (
        replication.spec.external_access.as_ref(),
        Owner::of(replication, REPLICATION_LABEL),
    ) {
        wanted.push(external::service(
            &owner,
            external_service_name(&name),
            read_write,
            access,
            "primary",
        ));
        wanted.push(external::service(
            &owner,
            external_service_name(&replicas_service_name(&name)),
            read_only,
            access,
            "replicas",
        ));
    }
    Some(wanted)
}

/// The external Service beside the client Service `service`.
pub fn external_service_name(service: &str) -> String {
    format!("{service}-external")
}

/// The replication's PodDisruptionBudget `<name>`, over every member: at most one evicted at
/// once, none while the replication is `held` (a replica does not hold the primary's data yet).
pub fn budget(replication: &ValkeyReplication, held: bool) -> Option<PodDisruptionBudget> {
    let name = replication.meta().name.clone()?;
    let owner = Owner::of(replication, REPLICATION_LABEL)?;
    let members = BTreeMap::from([(REPLICATION_LABEL.to_owned(), name.clone())]);
    Some(disruption_budget(
        &owner,
        name,
        &BTreeMap::new(),
        &members,
        held,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parent::serving::service_as_wanted;
    use crate::replication::controller::fixtures::{REPLICATION, replication};

    #[test]
    fn the_read_write_service_selects_the_recorded_primary_only_while_it_is_one() {
        let r = replication(REPLICATION);
        let Some([rw, ro]) =
            services(&r, Some("orders-2")).and_then(|s| <[Service; 2]>::try_from(s).ok())
        else {
            panic!("no services");
        };
        assert_eq!(rw.metadata.name.as_deref(), Some("orders"));
        assert_eq!(ro.metadata.name.as_deref(), Some("orders-replicas"));
        let selector = |s: &Service| s.spec.clone().and_then(|s| s.selector).unwrap_or_default();
        assert_eq!(
            selector(&rw),
            BTreeMap::from([
                ("valkey.io/node".to_owned(), "orders-2".to_owned()),
                ("valkey.io/replication".to_owned(), "orders".to_owned()),
                ("valkey.io/role".to_owned(), "primary".to_owned()),
            ])
        );
        assert_eq!(
            selector(&ro).get("valkey.io/role").map(String::as_str),
            Some("replica")
        );
        assert!(service_as_wanted(&rw, &rw));
        let Some([moved, _]) =
            services(&r, Some("orders-0")).and_then(|s| <[Service; 2]>::try_from(s).ok())
        else {
            panic!("no services");
        };
        assert!(
            !service_as_wanted(&rw, &moved),
            "a failover moves the selector"
        );
    }

    #[test]
    fn the_budget_lets_one_member_of_the_replication_out() {
        let Some(budget) = budget(&replication(REPLICATION), false) else {
            panic!("no budget");
        };
        assert_eq!(budget.metadata.name.as_deref(), Some("orders"));
        let spec = budget.spec.unwrap_or_default();
        assert_eq!(
            spec.max_unavailable,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
        );
        assert_eq!(
            spec.selector.and_then(|s| s.match_labels),
            Some(BTreeMap::from([(
                "valkey.io/replication".to_owned(),
                "orders".to_owned()
            )]))
        );
        assert!(
            budget
                .metadata
                .owner_references
                .is_some_and(|o| o.len() == 1)
        );
    }
}
