//! Pod status as a kubelet writes it, built from a plain view of what runs (pure).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub container_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
        /// The startup probe passed (or there is none).
        started: bool,
        ready: bool,
    },
    Terminated(Terminated),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub state: State,
    pub last_terminated: Option<Terminated>,
    pub restart_count: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub sandbox_ready: bool,
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Timestamp,
    pub init_containers: Vec<ContainerView>,
    pub containers: Vec<ContainerView>,
    /// Why the pod cannot run, for the pod-level message.
    pub message: Option<String>,
}

/// Second precision, as the API stores times: a value read back compares equal.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: Some(Time(t.started_at)),
        finished_at: Some(Time(t.finished_at)),
        container_id: Some(t.container_id.clone()),
    }
}

fn container_status(c: &ContainerView) -> ContainerStatus {
    let (state, ready, started) = match &c.state {
        State::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            false,
            false,
        ),
        State::Running {
            started_at,
            started,
            ready,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..Default::default()
            },
            *ready,
            *started,
        ),
        State::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            false,
            false,
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        ready,
        started: Some(started),
        restart_count: c.restart_count,
        state: Some(state),
        last_state: Some(
            c.last_terminated
                .as_ref()
                .map(|t| ContainerState {
                    terminated: Some(terminated(t)),
                    ..Default::default()
                })
                .unwrap_or_default(),
        ),
        ..Default::default()
    }
}

/// The phase as a kubelet's `getPhase` computes it.
pub fn phase(pod: &Pod, view: &PodView) -> &'static str {
    let restart_policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if let Some(current) = pod.status.as_ref().and_then(|s| s.phase.as_deref())
        && matches!(current, "Succeeded" | "Failed")
    {
        return if current == "Succeeded" {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let init_failed = view.init_containers.iter().any(|c| {
        matches!(&c.state, State::Terminated(t) if t.exit_code != 0) && restart_policy == "Never"
    });
    if init_failed {
        return "Failed";
    }
    if !initialized(view) {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.containers {
        match &c.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            State::Waiting { .. } if c.last_terminated.is_some() => stopped += 1,
            State::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 || view.containers.is_empty() {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded
            && view
                .containers
                .iter()
                .all(|c| matches!(c.state, State::Terminated(_)))
        {
            return "Succeeded";
        }
        if restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn initialized(view: &PodView) -> bool {
    view.sandbox_ready
        && view
            .init_containers
            .iter()
            .all(|c| matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
}

fn condition(
    pod: &Pod,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_));
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(String::from),
        message,
        last_transition_time,
        last_probe_time: None,
        observed_generation: None,
    }
}

const OWN_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// The full status the kubelet wants the pod to have.
pub fn build(pod: &Pod, view: &PodView, now: Timestamp) -> PodStatus {
    let phase = phase(pod, view);
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let initialized = initialized(view) || terminal && view.sandbox_ready;
    let unready: Vec<&str> = view
        .containers
        .iter()
        .filter(|c| !matches!(c.state, State::Running { ready: true, .. }))
        .map(|c| c.name.as_str())
        .collect();
    let containers_ready = unready.is_empty() && !view.containers.is_empty();
    let unready_message = (!unready.is_empty())
        .then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    let not_ready_reason = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let gates_ok = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|gates| {
            gates.iter().all(|g| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == g.condition_type && c.status == "True")
                    })
            })
        })
        .unwrap_or(true);
    let uninitialized: Vec<&str> = view
        .init_containers
        .iter()
        .filter(|c| !matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
        .map(|c| c.name.as_str())
        .collect();

    let mut conditions = vec![
        condition(
            pod,
            "PodReadyToStartContainers",
            view.sandbox_ready,
            None,
            None,
            now,
        ),
        condition(
            pod,
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            (!initialized && !uninitialized.is_empty()).then(|| {
                format!(
                    "containers with incomplete status: [{}]",
                    uninitialized.join(" ")
                )
            }),
            now,
        ),
        condition(
            pod,
            "ContainersReady",
            containers_ready && !terminal,
            (!containers_ready || terminal).then_some(not_ready_reason),
            unready_message.clone().filter(|_| !terminal),
            now,
        ),
        condition(
            pod,
            "Ready",
            containers_ready && gates_ok && !terminal,
            (!containers_ready || !gates_ok || terminal).then_some(
                if !gates_ok && containers_ready {
                    "ReadinessGatesNotReady"
                } else {
                    not_ready_reason
                },
            ),
            unready_message.filter(|_| !terminal),
            now,
        ),
    ];
    // Conditions written by others (PodScheduled, DisruptionTarget, readiness gates) are kept.
    for c in pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
    {
        if !OWN_CONDITIONS.contains(&c.type_.as_str()) {
            conditions.push(c);
        }
    }
    conditions.sort_by_key(|c| condition_order(&c.type_));

    let mut statuses: Vec<ContainerStatus> = view.containers.iter().map(container_status).collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    let init_statuses: Vec<ContainerStatus> =
        view.init_containers.iter().map(container_status).collect();

    let previous = pod.status.clone().unwrap_or_default();
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        pod_ip: view.pod_ip.clone(),
        pod_ips: view
            .pod_ip
            .as_ref()
            .map(|ip| vec![PodIP { ip: ip.clone() }]),
        host_ip: Some(view.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.clone(),
        }]),
        start_time: previous.start_time.or(Some(Time(view.start_time))),
        message: view.message.clone(),
        qos_class: previous.qos_class,
        ..Default::default()
    }
}

fn condition_order(type_: &str) -> usize {
    [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .position(|t| *t == type_)
    .unwrap_or(usize::MAX)
}

/// The status as a strategic-merge patch body. Conditions merge by `type`, so a field that went
/// away (a reason once the condition is True) must be sent as null or the old value stays; the
/// same holds for the pod-level message. The pod's UID goes with it as a precondition (a real
/// kubelet's does too): a pod recreated under the same name (a StatefulSet's) is another pod, and
/// the API server refuses the write (409) instead of giving it the old pod's IP and state.
pub fn patch_body(status: &PodStatus, uid: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or(serde_json::Value::Null);
    if let Some(conditions) = value.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
            for field in ["reason", "message"] {
                c.entry(field).or_insert(serde_json::Value::Null);
            }
        }
    }
    if let Some(obj) = value.as_object_mut() {
        for field in ["message", "reason"] {
            obj.entry(field).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "metadata": { "uid": uid }, "status": value })
}

/// The part of a status this kubelet owns, as JSON, to decide whether a write is needed.
pub fn owned_json(status: &PodStatus) -> serde_json::Value {
    let mut copy = status.clone();
    copy.qos_class = None;
    copy.nominated_node_name = None;
    copy.resize = None;
    copy.resource_claim_statuses = None;
    copy.observed_generation = None;
    serde_json::to_value(copy).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(restart_policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(restart_policy.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn exited(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: ts(10),
            finished_at: ts(20),
            container_id: "localkube://x".into(),
        }
    }

    fn view(states: Vec<(State, Option<Terminated>)>) -> PodView {
        PodView {
            sandbox_ready: true,
            pod_ip: Some("10.213.1.2".into()),
            host_ip: "10.213.1.1".into(),
            start_time: ts(1),
            init_containers: vec![],
            containers: states
                .into_iter()
                .enumerate()
                .map(|(i, (state, last))| ContainerView {
                    name: format!("c{i}"),
                    image: "valkey/valkey:9.1".into(),
                    image_id: "localkube://valkey-9.1".into(),
                    container_id: None,
                    state,
                    last_terminated: last,
                    restart_count: 0,
                })
                .collect(),
            message: None,
        }
    }

    fn running(ready: bool) -> State {
        State::Running {
            started_at: ts(5),
            started: true,
            ready,
        }
    }

    fn waiting(reason: &str) -> State {
        State::Waiting {
            reason: reason.into(),
            message: None,
        }
    }

    #[test]
    fn phases_follow_the_kubelet() {
        let p = pod("Always");
        assert_eq!(phase(&p, &view(vec![(running(false), None)])), "Running");
        assert_eq!(
            phase(&p, &view(vec![(waiting("ErrImagePull"), None)])),
            "Pending"
        );
        assert_eq!(
            phase(
                &p,
                &view(vec![(waiting("CrashLoopBackOff"), Some(exited(1)))])
            ),
            "Running"
        );
        let never = pod("Never");
        assert_eq!(
            phase(&never, &view(vec![(State::Terminated(exited(0)), None)])),
            "Succeeded"
        );
        assert_eq!(
            phase(
                &never,
                &view(vec![
                    (State::Terminated(exited(0)), None),
                    (State::Terminated(exited(2)), None)
                ])
            ),
            "Failed"
        );
        let mut unready = view(vec![(running(true), None)]);
        unready.sandbox_ready = false;
        assert_eq!(phase(&p, &unready), "Pending");
    }

    #[test]
    fn ready_conditions_and_kept_scheduler_condition() {
        let p = pod("Always");
        let status = build(&p, &view(vec![(running(true), None)]), ts(100));
        let conds = status.conditions.unwrap_or_default();
        let get = |t: &str| {
            conds
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(get("Ready").as_deref(), Some("True"));
        assert_eq!(get("ContainersReady").as_deref(), Some("True"));
        assert_eq!(get("PodScheduled").as_deref(), Some("True"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.213.1.2"));
        let cs = status.container_statuses.unwrap_or_default();
        assert_eq!(cs.len(), 1);
        assert!(cs[0].ready);

        let status = build(&p, &view(vec![(running(false), None)]), ts(100));
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(ready.as_ref().map(|c| c.status.as_str()), Some("False"));
        assert_eq!(
            ready.and_then(|c| c.message),
            Some("containers with unready status: [c0]".into())
        );
    }

    #[test]
    fn the_patch_clears_reasons_that_no_longer_apply() {
        let p = pod("Always");
        let status = build(&p, &view(vec![(running(true), None)]), ts(100));
        let body = patch_body(&status, "u1");
        assert_eq!(body["metadata"]["uid"], "u1");
        let ready = body["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
            .unwrap_or_default();
        assert_eq!(ready["status"], "True");
        assert!(ready["reason"].is_null() && ready.get("reason").is_some());
        assert!(body["status"].get("message").is_some());
    }

    #[test]
    fn transition_times_change_only_with_the_status() {
        let mut p = pod("Always");
        let first = build(&p, &view(vec![(running(false), None)]), ts(100));
        p.status = Some(first.clone());
        let same = build(&p, &view(vec![(running(false), None)]), ts(200));
        assert_eq!(owned_json(&first), owned_json(&same));
        p.status = Some(same);
        let changed = build(&p, &view(vec![(running(true), None)]), ts(300));
        let ready_time = changed
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| c.last_transition_time);
        assert_eq!(ready_time, Some(Time(ts(300))));
    }
}
