use k8s_openapi::jiff::Timestamp;

use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

const READY_POD: &str = r#"
metadata: {name: valkey-n-0, annotations: {valkey.io/revision: r1}}
spec: {nodeName: localkube-b, containers: [{name: valkey}]}
status:
  phase: Running
  podIP: 10.213.2.7
  hostIP: 10.213.2.1
  conditions: [{type: Ready, status: "True"}]
  containerStatuses: [{name: valkey, image: valkey/valkey:9.1, imageID: "", ready: true, restartCount: 0, state: {running: {}}}]
"#;

fn observed<'a>(pod: Option<&'a Pod>, valkey: Option<Answer>) -> Observed<'a> {
    Observed {
        generation: Some(3),
        workload_name: "valkey-n",
        workload: WorkloadState::Present { ready_replicas: 1 },
        pvc: None,
        credentials: None,
        pod,
        valkey,
        desired_revision: "r1",
        restart_allowed: true,
        live_config: None,
        initial_data: None,
    }
}

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap_or_else(|e| panic!("{e}")))
}

fn condition<'a>(
    status: &'a ValkeyNodeStatus,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status
        .conditions
        .as_deref()
        .and_then(|c| plumbing::conditions::find_condition(c, type_))
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

#[test]
fn a_ready_pod_whose_valkey_answers_is_ready_with_its_role() {
    let p = pod(READY_POD);
    let s = compute(
        None,
        &observed(
            Some(&p),
            Some(Answer::Pong {
                role: Some(Role::Primary),
                server: Default::default(),
            }),
        ),
        &at(1),
    );
    assert!(s.ready);
    assert_eq!(s.role, Some(Role::Primary));
    assert_eq!(s.pod_ip.as_deref(), Some("10.213.2.7"));
    assert_eq!(s.pod_name.as_deref(), Some("valkey-n-0"));
    assert_eq!(s.node_name.as_deref(), Some("localkube-b"));
    assert_eq!(
        s.host_ip.as_deref(),
        Some("10.213.2.1"),
        "where a NodePort reaches it"
    );
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(condition(&s, READY).reason, "ValkeyReady");
    assert_eq!(condition(&s, POD_UP_TO_DATE).status, "True");
}

#[test]
fn a_ready_pod_whose_valkey_is_silent_is_not_ready() {
    let p = pod(READY_POD);
    let s = compute(
        None,
        &observed(Some(&p), Some(Answer::Failed("connection refused".into()))),
        &at(1),
    );
    assert!(!s.ready);
    assert_eq!(s.role, None);
    let c = condition(&s, READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ValkeyNotResponding")
    );
    assert!(c.message.contains("connection refused"));
}

#[test]
fn a_terminating_pod_reports_no_stale_address_or_role() {
    let mut p = pod(READY_POD);
    p.metadata.deletion_timestamp = Some(at(5));
    let s = compute(
        None,
        &observed(
            Some(&p),
            Some(Answer::Pong {
                role: Some(Role::Primary),
                server: Default::default(),
            }),
        ),
        &at(6),
    );
    assert!(!s.ready);
    assert_eq!((s.role, s.pod_ip.as_deref()), (None, None));
    assert_eq!(condition(&s, READY).reason, "PodTerminating");
}

#[test]
fn a_waiting_container_gives_the_kubelets_reason() {
    for (reason, exit) in [
        ("ImagePullBackOff", None),
        ("ErrImagePull", None),
        ("CrashLoopBackOff", Some(1)),
    ] {
        let last = exit
            .map(|c| format!(", lastState: {{terminated: {{exitCode: {c}}}}}"))
            .unwrap_or_default();
        let p = pod(&format!(
            r#"
metadata: {{name: valkey-n-0}}
status:
  phase: Pending
  conditions: [{{type: PodScheduled, status: "True"}}, {{type: Ready, status: "False"}}]
  containerStatuses: [{{name: valkey, image: x, imageID: "", ready: false, restartCount: 2, state: {{waiting: {{reason: {reason}, message: back-off}}}}{last}}}]
"#
        ));
        let s = compute(None, &observed(Some(&p), None), &at(1));
        let c = condition(&s, READY);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", reason));
        // Looked at again while it still waits (every reread::NOT_READY): the same status, so no
        // write and no watch event of its own to wake the controller: no hot loop.
        assert_eq!(compute(Some(&s), &observed(Some(&p), None), &at(50)), s);
        if let Some(code) = exit {
            assert!(
                c.message.contains(&format!("last exit code {code}")),
                "{}",
                c.message
            );
        }
    }
}

/// A server the kernel killed for its memory limit: the pod is not ready until it is again, and
/// the Ready condition says why; a probe failing later, long after the restart, is not blamed on
/// it. A server that cannot start at all says so in the waiting reason's exit.
#[test]
fn an_oom_killed_server_is_reported_until_it_is_ready_again() {
    let oom = |ready_changed: &str, ready: &str| {
        pod(&format!(
            r#"
metadata: {{name: valkey-n-0}}
spec: {{containers: [{{name: valkey, resources: {{limits: {{memory: 96Mi}}}}}}]}}
status:
  phase: Running
  podIP: 10.213.2.7
  conditions: [{{type: Ready, status: "{ready}", lastTransitionTime: "{ready_changed}"}}]
  containerStatuses:
  - name: valkey
    image: x
    imageID: ""
    ready: false
    restartCount: 1
    state: {{running: {{startedAt: "2026-01-01T00:00:10Z"}}}}
    lastState: {{terminated: {{exitCode: 137, reason: OOMKilled, finishedAt: "2026-01-01T00:00:09Z"}}}}
"#
        ))
    };
    for changed in [
        "2026-01-01T00:00:09Z",
        "2026-01-01T00:00:10Z",
        "2026-01-01T00:00:11Z",
    ] {
        let p = oom(changed, "False");
        let s = compute(None, &observed(Some(&p), None), &at(20));
        let c = condition(&s, READY);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", OOM_KILLED.as_str())
        );
        assert!(
            c.message.contains("OOM-killed at 2026-01-01T00:00:09Z")
                && c.message.contains("memory limit of 96Mi")
                && c.message.contains("1 restarts"),
            "{}",
            c.message
        );
    }
    // Ready since the restart and not ready again a minute later: not the OOM kill's doing.
    let p = oom("2026-01-01T00:01:10Z", "False");
    let s = compute(None, &observed(Some(&p), None), &at(80));
    assert_eq!(condition(&s, READY).reason, "PodNotReady");
    // Ready again: ready, whatever the last run's end.
    let mut p = oom("2026-01-01T00:00:15Z", "True");
    if let Some(statuses) = p
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        statuses[0].ready = true;
    }
    let s = compute(
        None,
        &observed(
            Some(&p),
            Some(Answer::Pong {
                role: Some(Role::Primary),
                server: Default::default(),
            }),
        ),
        &at(20),
    );
    assert_eq!(condition(&s, READY).reason, "ValkeyReady");
    // Dead and not restarted yet.
    let p = pod(r#"
metadata: {name: valkey-n-0}
status:
  phase: Running
  conditions: [{type: Ready, status: "False"}]
  containerStatuses: [{name: valkey, image: x, imageID: "", ready: false, restartCount: 0, state: {terminated: {exitCode: 137, reason: OOMKilled}}}]
"#);
    let s = compute(None, &observed(Some(&p), None), &at(20));
    assert_eq!(condition(&s, READY).reason, OOM_KILLED.as_str());
    // Killed again and again: the kubelet backs off, and the reason is its, with the kill's.
    let p = pod(r#"
metadata: {name: valkey-n-0}
status:
  phase: Running
  conditions: [{type: Ready, status: "False"}]
  containerStatuses: [{name: valkey, image: x, imageID: "", ready: false, restartCount: 3, state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {exitCode: 137, reason: OOMKilled}}}]
"#);
    let s = compute(None, &observed(Some(&p), None), &at(20));
    let c = condition(&s, READY);
    assert_eq!(c.reason, "CrashLoopBackOff");
    assert!(
        c.message.contains("(last exit code 137, OOMKilled)"),
        "{}",
        c.message
    );
}

/// An exporter that cannot start keeps the pod from being ready: the reason names it, so a parent
/// sees a pod that cannot run (and rolls the fix) rather than one that is slow to start.
#[test]
fn a_waiting_exporter_gives_its_reason_after_a_running_valkey() {
    let p = pod(r#"
metadata: {name: valkey-n-0}
status:
  phase: Running
  conditions: [{type: PodScheduled, status: "True"}, {type: Ready, status: "False"}]
  containerStatuses:
    - {name: valkey, image: x, imageID: "", ready: true, restartCount: 0, state: {running: {}}}
    - {name: exporter, image: y, imageID: "", ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff, message: no such image}}}
"#);
    let s = compute(None, &observed(Some(&p), None), &at(1));
    let c = condition(&s, READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ImagePullBackOff")
    );
    assert!(
        c.message.contains("Container exporter of pod valkey-n-0"),
        "{}",
        c.message
    );
    assert!(valkey_api::contract::POD_CANNOT_RUN_REASONS.contains(&c.reason.as_str()));
}

#[test]
fn an_unschedulable_pod_gives_the_schedulers_message() {
    let p = pod(r#"
metadata: {name: valkey-n-0}
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}]
"#);
    let s = compute(None, &observed(Some(&p), None), &at(1));
    let c = condition(&s, READY);
    assert_eq!(c.reason, "Unschedulable");
    assert!(c.message.contains("0/3 nodes are available"));
}

#[test]
fn unchanged_observations_give_an_identical_status() {
    let p = pod(READY_POD);
    let o = observed(
        Some(&p),
        Some(Answer::Pong {
            role: Some(Role::Replica),
            server: Default::default(),
        }),
    );
    let first = compute(None, &o, &at(1));
    let second = compute(Some(&first), &o, &at(99));
    assert_eq!(first, second, "no write when nothing changed");

    let flipped = compute(
        Some(&first),
        &observed(Some(&p), Some(Answer::Failed("x".into()))),
        &at(100),
    );
    assert_eq!(condition(&flipped, READY).last_transition_time, at(100));
    assert_eq!(
        condition(&flipped, WORKLOAD_READY).last_transition_time,
        at(1)
    );
}

#[test]
fn a_missing_secret_is_named() {
    let p = pod(READY_POD);
    let mut o = observed(Some(&p), None);
    o.credentials = Some(CredentialsState::SecretMissing {
        secret: "cache-acl".into(),
    });
    let s = compute(None, &o, &at(1));
    let c = condition(&s, CREDENTIALS);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "SecretNotFound")
    );
    assert!(c.message.contains("cache-acl"));
}

#[test]
fn a_held_pod_says_it_awaits_approval() {
    let p = pod(READY_POD);
    let mut o = observed(
        Some(&p),
        Some(Answer::Pong {
            role: None,
            server: Default::default(),
        }),
    );
    o.desired_revision = "r2";
    o.restart_allowed = false;
    let s = compute(None, &o, &at(1));
    assert_eq!(s.current_revision.as_deref(), Some("r1"));
    assert_eq!(s.desired_revision.as_deref(), Some("r2"));
    assert_eq!(
        condition(&s, POD_UP_TO_DATE).reason,
        "AwaitingRestartApproval"
    );
    o.restart_allowed = true;
    assert_eq!(
        condition(&compute(None, &o, &at(1)), POD_UP_TO_DATE).reason,
        "Restarting"
    );
}

#[test]
fn the_ready_condition_quotes_what_valkey_answered_ready_pod_or_not() {
    let answers = [
        (
            "DENIED Valkey is running in protected mode because protected mode is enabled",
            "ValkeyProtectedMode",
        ),
        (
            "Valkey refused the health user: WRONGPASS: invalid username-password pair",
            "ValkeyAuthenticationFailed",
        ),
        (
            "LOADING: Valkey is loading the dataset in memory",
            "ValkeyLoading",
        ),
        ("connection refused", "ValkeyNotResponding"),
    ];
    let mut not_ready = pod(READY_POD);
    if let Some(status) = not_ready.status.as_mut() {
        status.conditions = Some(vec![
            serde_yaml::from_str("{type: Ready, status: \"False\"}")
                .unwrap_or_else(|e| panic!("{e}")),
        ]);
    }
    for p in [pod(READY_POD), not_ready] {
        for (answer, reason) in answers {
            let s = compute(
                None,
                &observed(Some(&p), Some(Answer::Failed(answer.into()))),
                &at(1),
            );
            let c = condition(&s, READY);
            assert!(!s.ready);
            assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", reason));
            assert!(c.message.contains(answer), "{}", c.message);
        }
    }
    // A pod not ready whose Valkey was not asked yet says just that.
    let s = compute(None, &observed(Some(&pod(READY_POD)), None), &at(1));
    assert_eq!(condition(&s, READY).reason, "ValkeyNotResponding");
}

#[test]
fn a_growing_volume_serves_on_and_one_that_cannot_grow_says_why() {
    let p = pod(READY_POD);
    let pong = || {
        Some(Answer::Pong {
            role: Some(Role::Primary),
            server: Default::default(),
        })
    };
    let with = |pvc: PvcState| {
        let mut o = observed(Some(&p), pong());
        o.pvc = Some(pvc);
        compute(None, &o, &at(1))
    };
    let growing = |step: ResizeStep| PvcState::Bound {
        name: "valkey-n-data".into(),
        resize: Some(Resize {
            from: "1Gi".into(),
            to: "2Gi".into(),
            step,
        }),
    };
    for (step, reason) in [
        (ResizeStep::Pending, "VolumeResizePending"),
        (ResizeStep::Controller, "VolumeResizing"),
        (ResizeStep::FileSystem, "FileSystemResizePending"),
    ] {
        let s = with(growing(step));
        let c = condition(&s, PVC_READY);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reason));
        assert!(c.message.contains("2Gi"), "{}", c.message);
        assert!(s.ready, "a growing volume keeps the node ready");
    }
    let s = with(growing(ResizeStep::Failed("disk too big".into())));
    let c = condition(&s, PVC_READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", RESIZE_FAILED.as_str())
    );
    assert!(c.message.contains("disk too big"), "{}", c.message);

    let s = with(PvcState::ExpansionNotSupported {
        name: "valkey-n-data".into(),
        class: Some("slow".into()),
        wanted: "2Gi".into(),
        holds: "1Gi".into(),
        answer: "forbidden: the storageclass must support resize".into(),
    });
    let c = condition(&s, PVC_READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", EXPANSION_NOT_SUPPORTED.as_str())
    );
    for words in [
        "StorageClass slow",
        "allowVolumeExpansion: true",
        "stays at 1Gi",
        "no pod restarts",
    ] {
        assert!(c.message.contains(words), "{words:?} not in {}", c.message);
    }
    assert!(s.ready, "the node runs on the volume it has");
    assert_eq!(s.desired_revision.as_deref(), Some("r1"));
}

#[test]
fn live_settings_waiting_for_the_restart_are_not_applied_nor_refused() {
    let p = pod(READY_POD);
    let mut o = observed(Some(&p), None);
    o.live_config = Some(LiveSettingsOutcome::AwaitingRestart {
        running: "r0".into(),
        desired: "r1".into(),
    });
    let s = compute(None, &o, &at(1));
    let c = condition(&s, CONFIG_APPLIED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", valkey_api::contract::CONFIG_AWAITS_RESTART)
    );
    assert!(c.message.contains("r0") && c.message.contains("r1"));
}

fn restoring_pod(init_status: &str) -> Pod {
    pod(&format!(
        r#"
metadata: {{name: valkey-n-0, annotations: {{valkey.io/revision: r1}}}}
spec: {{nodeName: localkube-b, containers: [{{name: valkey}}]}}
status:
  phase: Pending
  podIP: 10.213.2.7
  conditions: [{{type: Ready, status: "False"}}]
  initContainerStatuses: [{{name: restore, image: op, imageID: "", ready: false, restartCount: 1, {init_status}}}]
  containerStatuses: [{{name: valkey, image: valkey/valkey:9.1, imageID: "", ready: false, restartCount: 0, state: {{waiting: {{reason: PodInitializing}}}}}}]
"#
    ))
}

#[test]
fn initial_data_that_failed_says_why_in_its_condition_and_in_ready() {
    const MESSAGE: &str = "valkey-restore: initial data s3://b/x/shard-0.rdb: SHA-256 aa does not match the expected bb: the snapshot changed since it was taken";
    // The kubelet waits to run it again; the last run's message says why.
    let p = restoring_pod(&format!(
        "state: {{waiting: {{reason: CrashLoopBackOff}}}}, lastState: {{terminated: {{exitCode: 1, reason: Error, message: \"{MESSAGE}\"}}}}"
    ));
    let mut o = observed(Some(&p), None);
    o.initial_data = Some("x/shard-0.rdb");
    let s = compute(None, &o, &at(1));
    assert!(!s.ready);
    let c = condition(&s, INITIAL_DATA);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", INITIAL_DATA_FAILED.as_str())
    );
    assert_eq!(c.message, MESSAGE);
    let ready = condition(&s, READY);
    assert_eq!(ready.reason, INITIAL_DATA_FAILED.as_str());
    assert!(ready.message.contains(MESSAGE), "{}", ready.message);

    // Without a termination message (a runtime that keeps none): the exit code.
    let p = restoring_pod("state: {terminated: {exitCode: 1, reason: Error}}");
    let mut o = observed(Some(&p), None);
    o.initial_data = Some("x/shard-0.rdb");
    let s = compute(None, &o, &at(1));
    assert!(
        condition(&s, INITIAL_DATA)
            .message
            .contains("exited with code 1"),
        "{:?}",
        condition(&s, INITIAL_DATA)
    );
}

#[test]
fn initial_data_fetching_then_restored_then_gone_with_the_field() {
    let p = restoring_pod("state: {running: {}}");
    let mut o = observed(Some(&p), None);
    o.initial_data = Some("x/shard-0.rdb");
    let s = compute(None, &o, &at(1));
    assert_eq!(condition(&s, INITIAL_DATA).reason, "Fetching");

    let p = restoring_pod("state: {terminated: {exitCode: 0, reason: Completed}}");
    let mut o = observed(Some(&p), None);
    o.initial_data = Some("x/shard-0.rdb");
    let s = compute(Some(&s), &o, &at(2));
    let c = condition(&s, INITIAL_DATA);
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Restored"));

    let o = observed(Some(&p), None);
    let s = compute(Some(&s), &o, &at(3));
    assert!(
        s.conditions
            .as_deref()
            .and_then(|c| plumbing::conditions::find_condition(c, INITIAL_DATA))
            .is_none()
    );
}
