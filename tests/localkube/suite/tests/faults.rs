//! Each fault of `e2e::faults` does what it says, and its guard undoes it.
//!
//! Node and zone faults use the fault-test node (localkube-d, zone-d, tainted so that only these
//! tests' pods run there), one test at a time, so the other tests on the shared cluster keep
//! their nodes.

use std::time::Duration;

use e2e::faults::{self, Endpoint, NodeStop};
use e2e::{E2eError, Poll, Result, TestNamespace, check, describe_pod, wait_until};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::runtime::watcher;

use crate::{POD_READY, host, migrate, netns_of, ping, ready_valkey, services, skip};

const FAULT_NODE: &str = "localkube-d";
const FAULT_ZONE: &str = "zone-d";
/// The node controller's grace period is 50 s; its monitor looks every 5 s.
const NODE_NOT_READY: Duration = Duration::from_secs(120);
const UNREACHABLE: Duration = Duration::from_secs(3);

/// One test at a time on the fault-test node.
static FAULT_NODE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn fault_node_present() -> Result<bool> {
    let nodes: Api<Node> = Api::all(e2e::client().await?);
    Ok(nodes.get_opt(FAULT_NODE).await?.is_some())
}

/// Fails unless PING from the host gets no answer.
async fn unreachable(ip: &str) -> Result<()> {
    match ping(ip, UNREACHABLE).await {
        Ok(()) => Err(E2eError::Check(format!("{ip} still answers PING"))),
        Err(_) => Ok(()),
    }
}

/// Waits until PING from the host answers again.
async fn answers_again(ip: &str) -> Result<()> {
    wait_until(
        Duration::from_secs(30),
        &format!("{ip} answering PING"),
        || async move {
            Ok(match ping(ip, Duration::from_secs(2)).await {
                Ok(()) => Poll::Ready(()),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_cut_from_the_host_is_unreachable_until_the_guard_drops() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("cut").await?;
    let (_, ip) = ready_valkey(&ns, "cut", None, &[]).await?;
    ping(&ip, Duration::from_secs(5)).await?;
    {
        let _cut = faults::partition(&[Endpoint::pod(&ns.name, "cut")], &[Endpoint::Host]).await?;
        unreachable(&ip).await?;
        // Its kubelet still probes it (from the node, as a real one does): it stays Ready.
        check(
            e2e::pod_ready(&ns.pod("cut").await?),
            "a pod cut from the host lost its readiness",
        )?;
    }
    answers_again(&ip).await
}

/// A one-way cut from A to B: A cannot reach B, while what B sends still arrives at A (A's kernel
/// holds B's connection half-open, its answers being the packets that are dropped).
#[tokio::test(flavor = "multi_thread")]
async fn a_one_way_cut_drops_only_what_goes_one_way() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("oneway").await?;
    let (pod_a, ip_a) = ready_valkey(&ns, "a", None, &[]).await?;
    let (_, ip_b) = ready_valkey(&ns, "b", None, &[]).await?;
    check(
        migrate(&ip_a, &ip_b, 5000).await? == "OK",
        "a cannot reach b before the fault",
    )?;
    let cut = faults::partition_one_way(
        &[Endpoint::pod(&ns.name, "a")],
        &[Endpoint::pod(&ns.name, "b")],
    )
    .await?;
    let reply = migrate(&ip_a, &ip_b, 1500).await?;
    check(
        reply.contains("IOERR"),
        format!("a reached b through a cut: {reply}"),
    )?;
    // b tries a for ten seconds while the test looks at a's half-open connections.
    let (from_b, to_a) = (ip_b.clone(), ip_a.clone());
    let attempt = tokio::spawn(async move { migrate(&from_b, &to_a, 10_000).await });
    let netns_a = netns_of(&pod_a);
    let seen = wait_until(
        Duration::from_secs(8),
        "b's connection attempt arriving at a",
        || {
            let (netns_a, ip_b) = (netns_a.clone(), ip_b.clone());
            async move {
                let out = host(
                    "ip",
                    &["netns", "exec", &netns_a, "ss", "-Htn", "state", "syn-recv"],
                )
                .await?;
                Ok(if out.contains(&format!("{ip_b}:")) {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("half-open at a: {out:?}"))
                })
            }
        },
    )
    .await;
    let b_reply = attempt
        .await
        .map_err(|e| E2eError::Check(format!("b's attempt: {e}")))??;
    seen?;
    check(
        b_reply.contains("IOERR"),
        format!("b completed a connection to a through a cut: {b_reply}"),
    )?;
    // The host reaches both all along: only a -> b is cut.
    ping(&ip_a, Duration::from_secs(5)).await?;
    ping(&ip_b, Duration::from_secs(5)).await?;
    cut.undo().await?;
    check(
        migrate(&ip_a, &ip_b, 5000).await? == "OK",
        "a cannot reach b after the undo",
    )?;
    check(
        migrate(&ip_b, &ip_a, 5000).await? == "OK",
        "b cannot reach a after the undo",
    )
}

/// Faults cut what goes through Services too: kube-proxy translates a ClusterIP, a NodePort or a
/// LoadBalancer address before the fault's rules look at the packet, which then names the pods.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_cuts_the_paths_through_services_too() -> Result<()> {
    if !e2e::is_localkube() || !e2e::outside::available() {
        return skip("fault injection and the outside namespace are localkube's");
    }
    let ns = TestNamespace::create("svccut").await?;
    let (_, ip_a) = ready_valkey(&ns, "a", None, &[]).await?;
    ready_valkey(&ns, "b", None, &[]).await?;
    ns.apply(&services::service_manifest(
        "to-b",
        "b",
        "LoadBalancer",
        6379,
        "",
    ))
    .await?;
    let svc_b = services::cluster_ip(&services::service(&ns, "to-b").await?)?;
    let lb = services::addr(&services::wait_ingress(&ns, "to-b").await?, 6379)?;
    wait_until(
        Duration::from_secs(30),
        "a reaching b through its Service",
        || {
            let (ip_a, svc_b) = (ip_a.clone(), svc_b.clone());
            async move {
                let reply = migrate(&ip_a, &svc_b, 2000).await?;
                Ok(if reply == "OK" {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(reply)
                })
            }
        },
    )
    .await?;
    wait_until(
        Duration::from_secs(30),
        "b answering outside at its LoadBalancer address",
        || async move {
            Ok(match services::from_outside(lb, "PING").await {
                Ok(r) if r == "PONG" => Poll::Ready(()),
                Ok(r) => Poll::NotYet(r),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        },
    )
    .await?;
    {
        let _ab = faults::partition(
            &[Endpoint::pod(&ns.name, "a")],
            &[Endpoint::pod(&ns.name, "b")],
        )
        .await?;
        let reply = migrate(&ip_a, &svc_b, 1500).await?;
        check(
            reply.contains("IOERR"),
            format!("a reached b through its ClusterIP across a cut: {reply}"),
        )?;
        // The host is on neither side: it still reaches b through the same ClusterIP.
        ping(&svc_b, Duration::from_secs(5)).await?;
        let _outside =
            faults::partition(&[Endpoint::Outside], &[Endpoint::pod(&ns.name, "b")]).await?;
        if let Ok(r) = services::from_outside(lb, "PING").await {
            return Err(E2eError::Check(format!(
                "the outside client reached b across a cut: {r}"
            )));
        }
        check(
            services::from_host(lb, "PING").await? == "PONG",
            "the host lost b's LoadBalancer address to a cut of the outside client",
        )?;
        let _host = faults::partition(&[Endpoint::pod(&ns.name, "b")], &[Endpoint::Host]).await?;
        unreachable(&svc_b).await?;
    }
    check(
        migrate(&ip_a, &svc_b, 5000).await? == "OK",
        "a cannot reach b's Service after the undo",
    )?;
    check(
        services::from_outside(lb, "PING").await? == "PONG",
        "the outside client cannot reach b after the undo",
    )?;
    answers_again(&svc_b).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zone_cut_from_the_rest_keeps_traffic_inside_the_zone() -> Result<()> {
    if !e2e::is_localkube() || !fault_node_present().await? {
        return skip("needs localkube's fault-test node");
    }
    let _node = FAULT_NODE_LOCK.lock().await;
    let ns = TestNamespace::create("zonecut").await?;
    let (_, in_1) = ready_valkey(&ns, "in1", Some(FAULT_NODE), &[]).await?;
    let (_, in_2) = ready_valkey(&ns, "in2", Some(FAULT_NODE), &[]).await?;
    let (_, out) = ready_valkey(&ns, "out", None, &[]).await?;
    let zone = faults::partition(&[Endpoint::Zone(FAULT_ZONE.into())], &[Endpoint::Rest]).await?;
    let across = migrate(&in_1, &out, 1500).await?;
    check(
        across.contains("IOERR"),
        format!("a pod of the zone reached a pod outside: {across}"),
    )?;
    let into = migrate(&out, &in_1, 1500).await?;
    check(
        into.contains("IOERR"),
        format!("a pod outside reached the zone: {into}"),
    )?;
    check(
        migrate(&in_1, &in_2, 5000).await? == "OK",
        "two pods of the cut zone cannot reach each other",
    )?;
    // Only pods were named: the host still reaches both sides.
    ping(&in_1, Duration::from_secs(5)).await?;
    ping(&out, Duration::from_secs(5)).await?;
    zone.undo().await?;
    check(
        migrate(&out, &in_1, 5000).await? == "OK",
        "out cannot reach in1 after the undo",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_pod_answers_nothing_until_the_guard_drops() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("pause").await?;
    let (pod, ip) = ready_valkey(&ns, "paused", None, &[]).await?;
    let pause = faults::pause(&ns.name, "paused").await?;
    unreachable(&ip).await?;
    // Its readiness probe times out as well.
    let pods = ns.api::<Pod>();
    wait_until(Duration::from_secs(30), "the paused pod not Ready", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("paused").await?;
            Ok(if e2e::pod_ready(&p) {
                Poll::NotYet(describe_pod(&p))
            } else {
                Poll::Ready(())
            })
        }
    })
    .await?;
    pause.undo().await?;
    answers_again(&ip).await?;
    let after = ns.wait_pod_ready("paused", POD_READY).await?;
    check(
        after.metadata.uid == pod.metadata.uid && restarts(&after) == 0,
        format!(
            "the paused container was restarted: {}",
            describe_pod(&after)
        ),
    )
}

/// Waits until the pod's container has restarted at least once and the pod is Ready again.
async fn restarted_and_ready(ns: &TestNamespace, name: &str) -> Result<Pod> {
    let pods = ns.api::<Pod>();
    wait_until(POD_READY, &format!("{name} restarted and Ready"), || {
        let pods = pods.clone();
        async move {
            let p = pods.get(name).await?;
            Ok(if restarts(&p) >= 1 && e2e::pod_ready(&p) {
                Poll::Ready(p)
            } else {
                Poll::NotYet(describe_pod(&p))
            })
        }
    })
    .await
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_container_restarts_in_place_with_its_empty_dir() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("kill").await?;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: victim}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: valkey
    image: valkey/valkey:9.1
    command: [valkey-server, --protected-mode, "no", --dir, /data, --appendonly, "yes", --appendfsync, always]
    readinessProbe:
      exec: {command: [valkey-cli, ping]}
      periodSeconds: 1
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
"#,
    )
    .await?;
    let pod = ns.wait_pod_ready("victim", POD_READY).await?;
    let ip = e2e::pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let mut conn = e2e::valkey(&ip, 6379).await?;
    e2e::valkey_cmd(&mut conn, &["SET", "kept", "in the emptyDir"]).await?;
    faults::kill(&ns.name, "victim", None).await?;
    let after = restarted_and_ready(&ns, "victim").await?;
    check(
        restarts(&after) == 1,
        format!("restarted more than once: {}", describe_pod(&after)),
    )?;
    check(
        after.metadata.uid == pod.metadata.uid,
        "the pod was replaced, not restarted in place",
    )?;
    let ip_after = e2e::pod_ip(&after).unwrap_or_default();
    check(
        ip_after == ip,
        format!("the pod's IP changed: {ip} -> {ip_after}"),
    )?;
    let mut conn = e2e::valkey(&ip, 6379).await?;
    let value = e2e::valkey_cmd(&mut conn, &["GET", "kept"]).await?;
    check(
        value == "in the emptyDir",
        format!("after the restart GET kept = {value:?}"),
    )
}

/// A fault whose owner process ends without undoing it (killed: no unwinding, no Drop) is undone
/// by the supervisor within seconds.
#[tokio::test(flavor = "multi_thread")]
async fn a_fault_ends_with_the_process_that_owns_it() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("owner").await?;
    let (_, ip) = ready_valkey(&ns, "owned", None, &[]).await?;
    let mut owner = tokio::process::Command::new("sleep")
        .arg("600")
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| E2eError::Spawn {
            program: "sleep".into(),
            source,
        })?;
    let owner_pid = owner.id().unwrap_or_default().to_string();
    let target = format!("pod/{}/owned", ns.name);
    let program = faults::localkube_program().display().to_string();
    let id = host(
        &program,
        &[
            "fault",
            "partition",
            "--from",
            &target,
            "--to",
            "host",
            "--owner",
            &owner_pid,
        ],
    )
    .await?;
    let id = id.trim().to_string();
    unreachable(&ip).await?;
    owner
        .kill()
        .await
        .map_err(|e| E2eError::Check(format!("killing the owner: {e}")))?;
    answers_again(&ip).await?;
    let listed = host(&program, &["fault", "list"]).await?;
    check(
        !listed.lines().any(|l| l.starts_with(&id)),
        format!("fault {id} is still listed after its owner ended:\n{listed}"),
    )
}

/// The Ready condition of a node: "True", "False" or "Unknown".
async fn node_ready(name: &str) -> Result<String> {
    let nodes: Api<Node> = Api::all(e2e::client().await?);
    let node = nodes.get(name).await?;
    Ok(node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
        .unwrap_or_default())
}

async fn wait_node(name: &str, ready: bool, within: Duration) -> Result<()> {
    let what = format!("node {name} {}", if ready { "Ready" } else { "NotReady" });
    wait_until(within, &what, || async move {
        let status = node_ready(name).await?;
        Ok(if (status == "True") == ready {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!("Ready={status}"))
        })
    })
    .await
}

/// The live main process of the pod's (only) container, from the kubelet's record.
fn main_pid(pod: &Pod) -> Option<u32> {
    let uid = pod.metadata.uid.as_deref()?;
    let dir = e2e::localkube_kubelet_dir()
        .join("pods")
        .join(uid)
        .join("pids");
    let record = std::fs::read_dir(dir).ok()?.flatten().next()?;
    let pid: u32 = std::fs::read_to_string(record.path())
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

/// Whether the process runs: it exists and is not a zombie (killed, not yet reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .get(stat.rfind(')')? + 1..)?
                .split_whitespace()
                .next()?
                .to_string();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_node_goes_not_ready_its_deleted_pods_stay_terminating_and_the_others_come_back_ready()
-> Result<()> {
    if !e2e::is_localkube() || !fault_node_present().await? {
        return skip("needs localkube's fault-test node");
    }
    let _node = FAULT_NODE_LOCK.lock().await;
    let ns = TestNamespace::create("nodepart").await?;
    let (pod, ip) = ready_valkey(&ns, "stranded", Some(FAULT_NODE), &[]).await?;
    // A second pod stays: the node controller marks it NotReady with its node, and its kubelet
    // must say Ready again once the node is back.
    ready_valkey(&ns, "kept", Some(FAULT_NODE), &[]).await?;
    let pid = main_pid(&pod).ok_or_else(|| E2eError::Check("no recorded process".into()))?;
    let stop = faults::stop_node(FAULT_NODE, NodeStop::Partition).await?;
    unreachable(&ip).await?;
    wait_node(FAULT_NODE, false, NODE_NOT_READY).await?;
    let pods = ns.api::<Pod>();
    let kept_ready = |want: bool| {
        let pods = pods.clone();
        async move {
            let pod = pods.get("kept").await?;
            Ok(if e2e::pod_ready(&pod) == want {
                Poll::Ready(())
            } else {
                Poll::NotYet(describe_pod(&pod))
            })
        }
    };
    wait_until(
        Duration::from_secs(60),
        "the pod left on the stopped node marked NotReady",
        || kept_ready(false),
    )
    .await?;
    check(
        main_pid(&pod) == Some(pid),
        "the partitioned node's container did not live on",
    )?;
    ns.kubectl(&["delete", "pod", "stranded", "--wait=false"])
        .await?;
    // A kubelet would end it in about a second (grace 2 s); this one is cut off.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while tokio::time::Instant::now() < deadline {
        let p = pods.get_opt("stranded").await?;
        check(
            p.as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
            format!("the pod on the stopped node is {p:?}, not Terminating"),
        )?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.undo().await?;
    wait_node(FAULT_NODE, true, Duration::from_secs(60)).await?;
    wait_until(
        Duration::from_secs(60),
        "the pod that stayed Ready again once its node is back",
        || kept_ready(true),
    )
    .await?;
    wait_until(
        Duration::from_secs(60),
        "the deleted pod gone once its node is back",
        || {
            let pods = pods.clone();
            async move {
                Ok(match pods.get_opt("stranded").await? {
                    None => Poll::Ready(()),
                    Some(p) => Poll::NotYet(describe_pod(&p)),
                })
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_node_loses_its_containers_and_restarts_them_when_it_returns() -> Result<()> {
    if !e2e::is_localkube() || !fault_node_present().await? {
        return skip("needs localkube's fault-test node");
    }
    let _node = FAULT_NODE_LOCK.lock().await;
    let ns = TestNamespace::create("nodecrash").await?;
    let (pod, ip) = ready_valkey(&ns, "crashed", Some(FAULT_NODE), &[]).await?;
    let pid = main_pid(&pod).ok_or_else(|| E2eError::Check("no recorded process".into()))?;
    {
        let _crash = faults::stop_node(FAULT_NODE, NodeStop::Crash).await?;
        check(
            !alive(pid),
            format!("process {pid} of the crashed node lives on"),
        )?;
        unreachable(&ip).await?;
        wait_node(FAULT_NODE, false, NODE_NOT_READY).await?;
    }
    wait_node(FAULT_NODE, true, Duration::from_secs(60)).await?;
    let after = restarted_and_ready(&ns, "crashed").await?;
    check(
        after.metadata.uid == pod.metadata.uid,
        "the pod was replaced",
    )?;
    answers_again(&ip).await
}

/// Waits until the watch delivers the ConfigMap `name`.
async fn seen(name: &str, rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(n)) if n == name => return Ok(()),
            Ok(Some(_)) => continue,
            _ => return Err(E2eError::Check(format!("the watch never delivered {name}"))),
        }
    }
}

/// A watch started before the API server restarts (cleanly, then as a crash) goes on delivering.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "restarts the shared API server: make localkube-test runs it alone"]
async fn a_watch_survives_api_server_restarts() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("fault injection is localkube's");
    }
    let ns = TestNamespace::create("apirestart").await?;
    let cms: Api<ConfigMap> = ns.api();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let events = watcher(cms.clone(), watcher::Config::default());
    let watching = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = event {
                let _ = tx.send(cm.metadata.name.unwrap_or_default());
            }
        }
    });
    let create = |name: &str| {
        let cms = cms.clone();
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            wait_until(Duration::from_secs(60), "creating a ConfigMap", || {
                let (cms, cm) = (cms.clone(), cm.clone());
                async move {
                    Ok(match cms.create(&Default::default(), &cm).await {
                        Ok(_) => Poll::Ready(()),
                        Err(e) => Poll::NotYet(e.to_string()),
                    })
                }
            })
            .await
        }
    };
    create("before").await?;
    seen("before", &mut rx).await?;
    faults::restart_apiserver(false).await?;
    create("after-restart").await?;
    seen("after-restart", &mut rx).await?;
    faults::restart_apiserver(true).await?;
    create("after-crash").await?;
    let result = seen("after-crash", &mut rx).await;
    watching.abort();
    result
}
