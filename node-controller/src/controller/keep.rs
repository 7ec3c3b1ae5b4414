//! What the node-controller keeps of the children it caches. A node's pod and workload each
//! carry the whole pod template (containers, probes, volumes, environment), which is most of
//! their size and which no pass reads: the apply stage compares what it last sent by hash and the
//! live object by its generation, and the status reads the pod's state. Over thousands of nodes
//! those templates were most of the controller's memory, so the caches drop them on arrival.
//!
//! What a pass reads of each, and so what stays:
//! - a pod: its metadata (labels, revision annotation, deletion and creation times), its whole
//!   status, and of its spec the node it runs on and the memory limit of Valkey's container (the
//!   OOM-killed report names it);
//! - a StatefulSet or Deployment: its metadata (the generation) and its status (ready replicas).
//!
//! ConfigMaps keep their data (the configs of revisions a pod still runs are carried over) and
//! claims their spec (a request only grows), as they are.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use valkey_api::contract::VALKEY_CONTAINER;

/// A pod without its template: its node and Valkey's container's name and resources remain.
pub fn pod(pod: &mut Pod) {
    let Some(spec) = pod.spec.take() else {
        return;
    };
    let containers = spec
        .containers
        .into_iter()
        .filter(|c| c.name == VALKEY_CONTAINER)
        .map(|c| Container {
            name: c.name,
            resources: c.resources,
            ..Container::default()
        })
        .collect();
    pod.spec = Some(PodSpec {
        node_name: spec.node_name,
        containers,
        ..PodSpec::default()
    });
}

/// A StatefulSet without its spec: its generation and status remain.
pub fn stateful_set(workload: &mut StatefulSet) {
    workload.spec = None;
}

/// A Deployment without its spec: its generation and status remain.
pub fn deployment(workload: &mut Deployment) {
    workload.spec = None;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning};
    use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use valkey_api::v1alpha1::ValkeyNode;

    use super::*;
    use crate::controller::observe;
    use crate::render::{self, Workload};
    use crate::status::{self, Observed, WorkloadState};

    /// A node with everything that shapes a pod: persistence, credentials, TLS, an exporter,
    /// placement and a memory limit.
    const NODE: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: cache-0-0, namespace: prod, uid: 7f9d2c1e-0000-4000-8000-000000000001}
spec:
  image: valkey/valkey:9.1
  persistence: {enabled: true, size: 2Gi}
  config: {cluster-enabled: "yes", save: "3600 1 300 100"}
  credentials: {secretName: cache-acl, username: healthcheck}
  tls: {secretName: cache-tls}
  exporter: {image: oliver006/redis_exporter:v1.45.0}
  nodeSelector: {topology.kubernetes.io/zone: zone-b}
  tolerations: [{key: dedicated, operator: Equal, value: valkey, effect: NoSchedule}]
  resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 96Mi}}
"#;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The node's StatefulSet as rendered, and its pod as the API serves it once the kubelet
    /// restarted a Valkey the kernel OOM-killed.
    fn children() -> (StatefulSet, Pod, String) {
        let node: ValkeyNode = serde_yaml::from_str(NODE).unwrap_or_else(|e| panic!("{e}"));
        let children = render::build(&node).unwrap_or_else(|e| panic!("{e}"));
        let Workload::StatefulSet(sts) = children.workload else {
            panic!("a node with persistence runs as a StatefulSet");
        };
        let template = sts.spec.as_ref().map(|s| s.template.clone());
        let template = template.unwrap_or_else(|| panic!("no template"));
        let mut metadata = template.metadata.unwrap_or_default();
        metadata.name = Some("cache-0-0-0".into());
        metadata.namespace = Some("prod".into());
        metadata.creation_timestamp = Some(at(1));
        let mut spec = template.spec.unwrap_or_default();
        spec.node_name = Some("node-b".into());
        let status = |name: &str| ContainerStatus {
            name: name.into(),
            ready: true,
            restart_count: 1,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(at(10)),
                }),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("OOMKilled".into()),
                    finished_at: Some(at(9)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = Pod {
            metadata,
            spec: Some(spec),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.213.2.7".into()),
                host_ip: Some("10.213.2.1".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    last_transition_time: Some(at(10)),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![status("valkey"), status("exporter")]),
                ..Default::default()
            }),
        };
        (*sts, pod, children.revision)
    }

    fn observed<'a>(pod: &'a Pod, revision: &'a str) -> Observed<'a> {
        Observed {
            generation: Some(3),
            workload_name: "cache-0-0",
            workload: WorkloadState::Present { ready_replicas: 1 },
            pvc: None,
            credentials: None,
            pod: Some(pod),
            valkey: None,
            desired_revision: revision,
            restart_allowed: true,
            live_config: None,
            initial_data: None,
        }
    }

    fn size<T: serde::Serialize>(object: &T) -> usize {
        serde_json::to_vec(object)
            .map(|v| v.len())
            .unwrap_or_default()
    }

    #[test]
    fn a_kept_pod_tells_every_stage_what_the_whole_pod_did() {
        let (_, whole, revision) = children();
        let mut kept = whole.clone();
        pod(&mut kept);

        let whole_status = status::compute(None, &observed(&whole, &revision), &at(20));
        let kept_status = status::compute(None, &observed(&kept, &revision), &at(20));
        assert_eq!(kept_status, whole_status);
        // The OOM kill's report names the limit, read from Valkey's container.
        let ready = whole_status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(ready.contains("memory limit of 96Mi"), "{ready}");

        let (whole, kept) = (std::sync::Arc::new(whole), std::sync::Arc::new(kept));
        assert_eq!(observe::running_ip(&kept), observe::running_ip(&whole));
        assert_eq!(
            observe::rolled_out(std::slice::from_ref(&kept), "prod", "cache-0-0", &revision),
            observe::rolled_out(std::slice::from_ref(&whole), "prod", "cache-0-0", &revision),
        );
        assert!(
            size(kept.as_ref()) * 2 < size(whole.as_ref()),
            "the pod kept is {} bytes of {}",
            size(kept.as_ref()),
            size(whole.as_ref())
        );
    }

    #[test]
    fn a_kept_workload_keeps_its_generation_and_ready_replicas() {
        let (mut whole, _, _) = children();
        whole.metadata.generation = Some(4);
        whole.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
            ready_replicas: Some(1),
            ..Default::default()
        });
        let mut kept = whole.clone();
        stateful_set(&mut kept);
        assert_eq!(
            plumbing::apply::written_version(&kept.metadata),
            plumbing::apply::written_version(&whole.metadata)
        );
        assert_eq!(kept.status, whole.status);
        assert!(size(&kept) * 4 < size(&whole));
    }
}
