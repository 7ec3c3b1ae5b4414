//! The observe stage: the node's children as the watch caches hold them (never read from the
//! API per pass): its pods, its volume's phase, its workload's ready replicas.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use valkey_api::contract::VALKEY_CONTAINER;

use crate::names::NODE_LABEL;
use crate::render::volume;
use crate::status::{self, PvcState, Resize, ResizeStep, WorkloadState};

pub fn pvc_state(store: &Store<PersistentVolumeClaim>, namespace: &str, name: &str) -> PvcState {
    let live = store.get(&ObjectRef::new(name).within(namespace));
    pvc_state_of(name, live.as_deref())
}

/// What the claim's status says: its phase, and a resize in progress when it asks for more
/// than its volume holds.
pub fn pvc_state_of(name: &str, pvc: Option<&PersistentVolumeClaim>) -> PvcState {
    let Some(pvc) = pvc else {
        return PvcState::Missing;
    };
    let status = pvc.status.as_ref();
    let phase = status
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    if phase != "Bound" {
        return PvcState::Phase {
            name: name.to_owned(),
            phase,
        };
    }
    let (request, capacity) = (volume::request(pvc), volume::capacity(pvc));
    let resize = match (request, capacity) {
        (Some(to), Some(from)) if volume::larger(request, capacity) => Some(Resize {
            from: from.0.clone(),
            to: to.0.clone(),
            step: resize_step(pvc),
        }),
        _ => None,
    };
    PvcState::Bound {
        name: name.to_owned(),
        resize,
    }
}

/// The step of a resize, from `allocatedResourceStatuses` (set by resizers since Kubernetes
/// 1.32), else from the older conditions.
fn resize_step(pvc: &PersistentVolumeClaim) -> ResizeStep {
    let status = pvc.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let condition = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    let failure = || {
        ["ControllerResizeError", "NodeResizeError"]
            .iter()
            .find_map(|t| condition(t).and_then(|c| c.message.clone()))
            .unwrap_or_else(|| "the storage found the new size infeasible".to_owned())
    };
    let allocated = status
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|a| a.get("storage"))
        .map(String::as_str);
    match allocated {
        Some("ControllerResizeInfeasible" | "NodeResizeInfeasible") => {
            ResizeStep::Failed(failure())
        }
        Some("NodeResizePending" | "NodeResizeInProgress") => ResizeStep::FileSystem,
        Some(_) => ResizeStep::Controller,
        None if condition("FileSystemResizePending").is_some() => ResizeStep::FileSystem,
        None if condition("Resizing").is_some() => ResizeStep::Controller,
        None => ResizeStep::Pending,
    }
}

pub fn ready_replicas<K>(
    store: &Store<K>,
    namespace: &str,
    name: &str,
    ready: impl Fn(&K) -> Option<i32>,
) -> WorkloadState
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match store.get(&ObjectRef::new(name).within(namespace)) {
        None => WorkloadState::Missing,
        Some(w) => WorkloadState::Present {
            ready_replicas: ready(&w).unwrap_or(0),
        },
    }
}

/// Whether `pod` belongs to ValkeyNode `node` (terminating or not).
fn is_pod_of(pod: &Pod, namespace: &str, node: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NODE_LABEL))
            .map(String::as_str)
            == Some(node)
}

/// Whether the node has a pod and every pod not being deleted runs `revision`: only then may
/// the configs of earlier revisions go.
pub fn rolled_out(pods: &[Arc<Pod>], namespace: &str, node: &str, revision: &str) -> bool {
    let mut live = pods
        .iter()
        .filter(|p| is_pod_of(p, namespace, node) && p.metadata.deletion_timestamp.is_none())
        .peekable();
    live.peek().is_some() && live.all(|p| status::pod_revision(p).as_deref() == Some(revision))
}

/// The pod that speaks for the node: not terminating, on the desired revision if one is, then
/// the newest. A Deployment rolling may briefly have two.
pub fn choose_pod<'a>(
    pods: &'a [Arc<Pod>],
    namespace: &str,
    node: &str,
    revision: &str,
) -> Option<&'a Arc<Pod>> {
    let mine = pods.iter().filter(|p| is_pod_of(p, namespace, node));
    mine.max_by_key(|p| {
        (
            p.metadata.deletion_timestamp.is_none(),
            status::pod_revision(p).as_deref() == Some(revision),
            status::pod_is_ready(p),
            p.metadata.creation_timestamp.clone().map(|t| t.0),
        )
    })
}

/// The IP to ask Valkey on: only a pod whose container is running now.
pub fn running_ip(pod: &Arc<Pod>) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let running = status.container_statuses.as_ref()?.iter().any(|c| {
        c.name == VALKEY_CONTAINER && c.state.as_ref().is_some_and(|s| s.running.is_some())
    });
    if running { status.pod_ip.clone() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Arc<Pod> {
        Arc::new(serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn the_live_pod_on_the_desired_revision_speaks_for_the_node() {
        let old = pod(
            "metadata: {name: a, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r1}, creationTimestamp: '2026-01-01T00:00:00Z'}",
        );
        let new = pod(
            "metadata: {name: b, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r2}, creationTimestamp: '2026-01-01T00:01:00Z'}",
        );
        let gone = pod(
            "metadata: {name: c, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r2}, deletionTimestamp: '2026-01-01T00:02:00Z'}",
        );
        let other = pod(
            "metadata: {name: d, namespace: ns, labels: {valkey.io/node: m}, annotations: {valkey.io/revision: r2}}",
        );
        let pods = vec![old, new, gone, other];
        let chosen = choose_pod(&pods, "ns", "n", "r2").and_then(|p| p.metadata.name.clone());
        assert_eq!(chosen.as_deref(), Some("b"));
        let chosen = choose_pod(&pods, "ns", "n", "r1").and_then(|p| p.metadata.name.clone());
        assert_eq!(chosen.as_deref(), Some("a"));
        assert!(choose_pod(&pods, "other", "n", "r1").is_none());
    }

    #[test]
    fn a_node_has_rolled_out_when_every_live_pod_runs_the_revision() {
        let on = |name: &str, revision: &str, deleting: bool| {
            let deletion = if deleting {
                ", deletionTimestamp: '2026-01-01T00:02:00Z'"
            } else {
                ""
            };
            pod(&format!(
                "metadata: {{name: {name}, namespace: ns, labels: {{valkey.io/node: n}}, annotations: {{valkey.io/revision: {revision}}}{deletion}}}"
            ))
        };
        assert!(!rolled_out(&[], "ns", "n", "r2"), "no pod yet");
        assert!(!rolled_out(&[on("a", "r1", false)], "ns", "n", "r2"));
        assert!(rolled_out(&[on("b", "r2", false)], "ns", "n", "r2"));
        assert!(
            !rolled_out(
                &[on("a", "r1", false), on("b", "r2", false)],
                "ns",
                "n",
                "r2"
            ),
            "a Deployment half way"
        );
        assert!(
            rolled_out(
                &[on("a", "r1", true), on("b", "r2", false)],
                "ns",
                "n",
                "r2"
            ),
            "the old pod is going"
        );
        assert!(
            !rolled_out(&[on("a", "r2", true)], "ns", "n", "r2"),
            "only a terminating pod"
        );
        assert!(
            !rolled_out(&[on("b", "r2", false)], "ns", "m", "r2"),
            "another node's pod"
        );
    }

    fn claim(status: &str) -> PersistentVolumeClaim {
        serde_yaml::from_str(&format!(
            "metadata: {{name: data}}\nspec: {{resources: {{requests: {{storage: 2Gi}}}}}}\nstatus: {status}"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn step(status: &str) -> Option<ResizeStep> {
        match pvc_state_of("data", Some(&claim(status))) {
            PvcState::Bound { resize, .. } => resize.map(|r| r.step),
            other => panic!("not bound: {other:?}"),
        }
    }

    #[test]
    fn a_claim_tells_how_far_its_growth_is() {
        assert_eq!(
            pvc_state_of("data", Some(&claim("{phase: Pending}"))),
            PvcState::Phase {
                name: "data".into(),
                phase: "Pending".into()
            }
        );
        assert_eq!(pvc_state_of("data", None), PvcState::Missing);
        assert_eq!(step("{phase: Bound, capacity: {storage: 2Gi}}"), None);
        assert_eq!(
            step("{phase: Bound, capacity: {storage: 2048Mi}}"),
            None,
            "the same size"
        );
        assert_eq!(
            step("{phase: Bound, capacity: {storage: 1Gi}}"),
            Some(ResizeStep::Pending)
        );
        assert_eq!(
            step(
                "{phase: Bound, capacity: {storage: 1Gi}, allocatedResourceStatuses: {storage: ControllerResizeInProgress}}"
            ),
            Some(ResizeStep::Controller)
        );
        assert_eq!(
            step(
                "{phase: Bound, capacity: {storage: 1Gi}, allocatedResourceStatuses: {storage: NodeResizePending}}"
            ),
            Some(ResizeStep::FileSystem)
        );
        assert_eq!(
            step(
                "{phase: Bound, capacity: {storage: 1Gi}, conditions: [{type: FileSystemResizePending, status: 'True'}]}"
            ),
            Some(ResizeStep::FileSystem),
            "as resizers before allocatedResourceStatuses said it"
        );
        assert_eq!(
            step(
                "{phase: Bound, capacity: {storage: 1Gi}, allocatedResourceStatuses: {storage: ControllerResizeInfeasible}, conditions: [{type: ControllerResizeError, status: 'True', message: disk too big}]}"
            ),
            Some(ResizeStep::Failed("disk too big".into()))
        );
        let PvcState::Bound {
            resize: Some(resize),
            ..
        } = pvc_state_of(
            "data",
            Some(&claim("{phase: Bound, capacity: {storage: 1Gi}}")),
        )
        else {
            panic!("no resize")
        };
        assert_eq!((resize.from.as_str(), resize.to.as_str()), ("1Gi", "2Gi"));
    }

    #[test]
    fn only_a_running_container_is_asked() {
        let waiting = pod(
            "metadata: {name: a}\nstatus: {podIP: 10.0.0.1, containerStatuses: [{name: valkey, image: x, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: CrashLoopBackOff}}}]}",
        );
        let running = pod(
            "metadata: {name: a}\nstatus: {podIP: 10.0.0.1, containerStatuses: [{name: valkey, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]}",
        );
        assert_eq!(running_ip(&waiting), None);
        assert_eq!(running_ip(&running).as_deref(), Some("10.0.0.1"));
    }
}
