//! The port of a cluster's bus: one of its own per cluster, chosen when the cluster is created and
//! never changed.
//!
//! Why: the cluster bus has no password. A server takes in any node that sends it a MEET on its
//! bus port, and everything that node gossips. In a shared pod network an address moves between
//! clusters (a pod of one cluster restarts elsewhere, a pod of another gets its old address), and
//! Valkey's nodes keep knocking on a peer's last address: a node with no inbound link from a peer
//! even sends it a MEET. With every cluster on bus port 16379 such a knock joins two clusters into
//! one, and the higher config epoch then takes the other cluster's slots, data and all. A
//! NetworkPolicy stops that where the network enforces it; a bus port of each cluster's own stops
//! it on any network: the stray MEET reaches a closed port.
//!
//! Where it is kept: in the annotation [`ANNOTATION`] on the ValkeyCluster, written by the first
//! pass, and in every member's `cluster-port` setting. A cluster created before clusters had their
//! own port keeps 16379 (its servers run with it; moving a running bus is not done in place).

use std::sync::Arc;
use valkey_api::v1alpha1::StatusReason;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::parent::conditions::Problem;
use crate::parent::error::{Error, api_error};

/// The annotation on a ValkeyCluster that records its bus port.
pub const ANNOTATION: &str = "valkey.io/cluster-bus-port";
/// Valkey's bus port for the client port 6379: that of clusters created before each had its own.
pub const SHARED: u16 = 16379;
/// The setting that moves a server's bus.
pub const SETTING: &str = "cluster-port";
/// The ports a new cluster's bus is chosen from: below the usual ephemeral range (32768 up),
/// away from the client port and the bus port every cluster used to share.
const FIRST: u16 = 20000;
const COUNT: u16 = 10000;

/// The bus port the cluster's servers run with, as recorded on the cluster; [`SHARED`] until the
/// first pass records it (and for clusters in tests that never ran one).
pub fn port(cluster: &ValkeyCluster) -> u16 {
    recorded(cluster).and_then(Result::ok).unwrap_or(SHARED)
}

/// The settings a member runs with for `port`: none for the shared port, so that servers that
/// have always run on it see no change of their settings (and no restart).
pub fn settings(port: u16) -> Option<(String, String)> {
    (port != SHARED).then(|| (SETTING.to_owned(), port.to_string()))
}

/// A new cluster's bus port, from its uid: two clusters share one with odds of 1 in 10 000.
pub fn for_new_cluster(uid: &str) -> u16 {
    // FNV-1a: stable across releases, unlike the standard library's hasher; the result is
    // recorded, but a pass that records it and the next must agree.
    let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    FIRST + u16::try_from(hash % u64::from(COUNT)).unwrap_or(0)
}

/// The port the annotation names: `None` without one, `Err` with one that names no port.
fn recorded(cluster: &ValkeyCluster) -> Option<Result<u16, String>> {
    let text = cluster.annotations().get(ANNOTATION)?;
    Some(
        text.parse::<u16>()
            .ok()
            .filter(|p| *p >= 1024 && *p != 6379)
            .ok_or_else(|| text.clone()),
    )
}

/// The bus port the members' settings name: `None` when there is no member yet.
fn running(existing: &[Arc<ValkeyNode>]) -> Option<u16> {
    let node = existing.first()?;
    let config = node.spec.config.as_ref();
    Some(
        config
            .and_then(|c| c.get(SETTING))
            .and_then(|p| p.parse().ok())
            .unwrap_or(SHARED),
    )
}

/// What the pass does about the bus port before anything is applied.
#[derive(Debug, PartialEq)]
pub enum Check {
    /// Recorded, and what the members run with: go on.
    Recorded(u16),
    /// Not recorded yet: record this port, then look again.
    Record(u16),
    /// The annotation was changed by hand: nothing is applied until it is put back.
    Changed(Problem),
}

/// Compares the annotation with what the members run with (`existing`, the cluster's
/// ValkeyNodes).
pub fn check(cluster: &ValkeyCluster, existing: &[Arc<ValkeyNode>]) -> Check {
    let running = running(existing);
    let changed = |what: String, port: u16| {
        Check::Changed(Problem {
            reason: StatusReason::BusPortChanged,
            message: format!(
                "metadata.annotations[{ANNOTATION}] {what}, but the servers' cluster bus runs on \
                 port {port}. The operator records this port when the cluster is created and never \
                 moves a running bus: set the annotation back to \"{port}\""
            ),
        })
    };
    match recorded(cluster) {
        Some(Ok(port)) => match running {
            Some(runs) if runs != port => changed(format!("says {port}"), runs),
            _ => Check::Recorded(port),
        },
        Some(Err(text)) => changed(
            format!("is \"{text}\", not a port from 1024 to 65535"),
            running.unwrap_or(SHARED),
        ),
        None => Check::Record(running.unwrap_or_else(|| {
            cluster
                .meta()
                .uid
                .as_deref()
                .map_or(SHARED, for_new_cluster)
        })),
    }
}

/// Writes the annotation.
pub async fn record(ctx: &Context, cluster: &ValkeyCluster, port: u16) -> Result<(), Error> {
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let name = cluster.name_any();
    let patch = json!({"metadata": {"annotations": {ANNOTATION: port.to_string()}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!(
            "recording the bus port of ValkeyCluster {name}"
        )))?;
    tracing::info!(port, "the cluster bus of this cluster runs on port {port}");
    Ok(())
}

/// What the status says when the port could not be recorded (most often: the cluster-controller
/// may not patch ValkeyClusters). Nothing is made before the port is recorded, so without this the
/// cluster would wait with no word on why.
pub fn not_recorded(port: u16, error: &Error) -> Problem {
    Problem {
        reason: StatusReason::BusPortNotRecorded,
        message: format!(
            "the cluster bus port {port} could not be recorded in \
             metadata.annotations[{ANNOTATION}] ({error}); no member is made until it is. Check \
             that the cluster-controller may patch ValkeyClusters (its ClusterRole)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::desired::desired_node;
    use crate::cluster::fixtures::{CLUSTER, cluster};
    use crate::parent::node::NodeAuth;

    fn annotated(port: &str) -> ValkeyCluster {
        let mut c = cluster(CLUSTER);
        c.metadata.uid = Some("0b5c1a2e-3f4d-4e5f-8a6b-7c8d9e0f1a2b".into());
        c.annotations_mut().insert(ANNOTATION.into(), port.into());
        c
    }

    fn member(c: &ValkeyCluster) -> Arc<ValkeyNode> {
        Arc::new(
            desired_node(c, 0, 0, &NodeAuth::of("cache"), None)
                .unwrap_or_else(|| panic!("no node")),
        )
    }

    #[test]
    fn a_new_cluster_gets_a_port_of_its_own_from_its_uid() {
        let mut c = cluster(CLUSTER);
        c.metadata.uid = Some("0b5c1a2e-3f4d-4e5f-8a6b-7c8d9e0f1a2b".into());
        let Check::Record(port) = check(&c, &[]) else {
            panic!("a new cluster records its port")
        };
        assert_eq!(
            port,
            for_new_cluster("0b5c1a2e-3f4d-4e5f-8a6b-7c8d9e0f1a2b")
        );
        assert!((FIRST..FIRST + COUNT).contains(&port));
        // Another cluster, another port (these two uids do not collide).
        assert_ne!(
            port,
            for_new_cluster("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
        );
        // The same uid always gives the same port.
        assert_eq!(
            port,
            for_new_cluster("0b5c1a2e-3f4d-4e5f-8a6b-7c8d9e0f1a2b")
        );
    }

    #[test]
    fn the_ports_of_many_clusters_spread_over_the_range() {
        let ports: std::collections::BTreeSet<u16> = (0..1000)
            .map(|i| for_new_cluster(&format!("{i:08x}-0000-4000-8000-000000000000")))
            .collect();
        assert!(ports.len() > 900, "only {} distinct ports", ports.len());
        assert!(ports.iter().all(|p| (FIRST..FIRST + COUNT).contains(p)));
    }

    #[test]
    fn a_cluster_whose_members_run_on_the_shared_port_keeps_it() {
        let c = cluster(CLUSTER);
        let old = member(&c);
        assert_eq!(check(&c, &[old]), Check::Record(SHARED));
        assert_eq!(settings(SHARED), None, "no setting, so no restart");
    }

    #[test]
    fn a_recorded_port_reaches_the_members_settings() {
        let c = annotated("23456");
        assert_eq!(port(&c), 23456);
        let node = member(&c);
        let config = node.spec.config.clone().unwrap_or_default();
        assert_eq!(config.get(SETTING).map(String::as_str), Some("23456"));
        assert_eq!(check(&c, &[node]), Check::Recorded(23456));
    }

    #[test]
    fn a_port_that_could_not_be_recorded_says_so_and_what_to_check() {
        let error = Error::Api {
            what: "recording the bus port of ValkeyCluster cache".into(),
            source: kube::Error::Api(Box::new(
                kube::core::Status::failure(
                    "valkeyclusters.valkey.io \"cache\" is forbidden",
                    "Forbidden",
                )
                .with_code(403),
            )),
        };
        let problem = not_recorded(23456, &error);
        assert_eq!(problem.reason.as_str(), "BusPortNotRecorded");
        for part in ["23456", ANNOTATION, "forbidden", "patch ValkeyClusters"] {
            assert!(problem.message.contains(part), "{}", problem.message);
        }
    }

    #[test]
    fn a_lost_annotation_is_written_again_from_what_the_members_run() {
        let running = member(&annotated("23456"));
        let c = cluster(CLUSTER);
        assert_eq!(check(&c, &[running]), Check::Record(23456));
    }

    #[test]
    fn an_annotation_changed_by_hand_stops_the_pass_and_names_the_port_to_put_back() {
        let running = member(&annotated("23456"));
        let Check::Changed(problem) = check(&annotated("24000"), std::slice::from_ref(&running))
        else {
            panic!("a moved bus port must not be applied")
        };
        assert_eq!(problem.reason.as_str(), "BusPortChanged");
        assert!(problem.message.contains(ANNOTATION), "{}", problem.message);
        assert!(problem.message.contains("\"23456\""), "{}", problem.message);
        let Check::Changed(problem) = check(&annotated("soon"), &[running]) else {
            panic!("a port that is no port must not be applied")
        };
        assert!(problem.message.contains("\"soon\""), "{}", problem.message);
        assert_eq!(port(&annotated("soon")), SHARED);
    }
}
