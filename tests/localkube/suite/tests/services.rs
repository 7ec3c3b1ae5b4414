//! Services as on a real cluster: kube-proxy routes ClusterIPs, NodePorts and LoadBalancer
//! addresses (from pods, the host and the outside namespace), localkube's allocator gives
//! LoadBalancer Services their addresses, and CoreDNS answers for Service and pod names.
//!
//! The outside namespace stands for a client outside the cluster: it reaches the node addresses
//! and the LoadBalancer pool, never a pod or a ClusterIP (`e2e::outside`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, check, describe_pod, outside, wait_until};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{POD_READY, VALKEY_IMAGE, passes, ready_valkey, skip};

/// How long kube-proxy may take to route a new Service or endpoint (it syncs at most once a
/// second) and the allocator to answer.
const ROUTED: Duration = Duration::from_secs(30);

fn localkube_only() -> Option<Result<()>> {
    if !e2e::is_localkube() || !outside::available() {
        return Some(skip(
            "kube-proxy's addresses, the allocator and the outside namespace are localkube's",
        ));
    }
    None
}

/// Sends one inline command over a RESP connection and returns the first line of the reply.
async fn resp(stream: tokio::net::TcpStream, command: &str) -> Result<String> {
    let mut stream = BufReader::new(stream);
    let io = |e: std::io::Error| E2eError::Check(format!("{command}: {e}"));
    stream
        .get_mut()
        .write_all(format!("{command}\r\n").as_bytes())
        .await
        .map_err(io)?;
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_line(&mut line))
        .await
        .map_err(|_| E2eError::Check(format!("{command}: no answer within 5 s")))?
        .map_err(io)?;
    // A bulk string's length line comes first: the value is on the next one.
    if line.starts_with('$') && !line.starts_with("$-1") {
        line.clear();
        stream.read_line(&mut line).await.map_err(io)?;
    }
    let line = line.trim_end();
    Ok(line.strip_prefix('+').unwrap_or(line).to_string())
}

/// `command` over a new connection from the outside namespace.
pub async fn from_outside(addr: SocketAddr, command: &str) -> Result<String> {
    resp(
        outside::connect(addr, Duration::from_secs(3)).await?,
        command,
    )
    .await
}

/// `command` over a new connection from the host.
pub async fn from_host(addr: SocketAddr, command: &str) -> Result<String> {
    let stream = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| E2eError::Check(format!("connecting to {addr}: timed out")))?
        .map_err(|e| E2eError::Check(format!("connecting to {addr}: {e}")))?;
    resp(stream, command).await
}

/// Waits until `attempt` returns `want`.
async fn answers<F, Fut>(what: &str, want: &str, mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String>>,
{
    wait_until(ROUTED, what, || {
        let fut = attempt();
        async move {
            Ok(match fut.await {
                Ok(r) if r == want => Poll::Ready(()),
                Ok(r) => Poll::NotYet(format!("answered {r:?}")),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        }
    })
    .await
}

pub fn addr(ip: &str, port: i32) -> Result<SocketAddr> {
    format!("{ip}:{port}")
        .parse()
        .map_err(|e| E2eError::Check(format!("{ip}:{port}: {e}")))
}

pub async fn service(ns: &TestNamespace, name: &str) -> Result<Service> {
    Ok(ns.api::<Service>().get(name).await?)
}

pub fn cluster_ip(svc: &Service) -> Result<String> {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or_else(|| E2eError::Check("the Service has no ClusterIP".into()))
}

fn ingress_ip(svc: &Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// Waits until the LoadBalancer Service has an address; returns it.
pub async fn wait_ingress(ns: &TestNamespace, name: &str) -> Result<String> {
    let api = ns.api::<Service>();
    wait_until(ROUTED, &format!("an address for Service {name}"), || {
        let api = api.clone();
        async move {
            let svc = api.get(name).await?;
            Ok(match ingress_ip(&svc) {
                Some(ip) => Poll::Ready(ip),
                None => Poll::NotYet(format!("status {:?}", svc.status)),
            })
        }
    })
    .await
}

fn in_pool(ip: &str) -> bool {
    ip.strip_prefix("10.213.255.")
        .and_then(|h| h.parse::<u8>().ok())
        .is_some_and(|h| (1..=254).contains(&h))
}

/// Every node's InternalIP.
async fn node_addresses() -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(e2e::client().await?);
    let mut out = Vec::new();
    for n in nodes.list(&Default::default()).await?.items {
        for a in n.status.and_then(|s| s.addresses).unwrap_or_default() {
            if a.type_ == "InternalIP" {
                out.push(a.address);
            }
        }
    }
    Ok(out)
}

/// The Events of the namespace's objects, one line each: `<object> <type> <reason> <controller>
/// <note>`.
async fn events(ns: &TestNamespace) -> Result<Vec<String>> {
    let out = ns
        .kubectl(&[
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.regarding.name} {.type} {.reason} {.reportingController} {.note}{\"\\n\"}{end}",
        ])
        .await?;
    Ok(out.lines().map(String::from).collect())
}

/// Two Valkey pods `be-0` and `be-1` (label `app: be`), each holding its own name under `who`.
async fn two_backends(ns: &TestNamespace) -> Result<()> {
    for name in ["be-0", "be-1"] {
        ns.apply(&valkey_pod_labelled(name, "be", None)).await?;
    }
    for name in ["be-0", "be-1"] {
        let pod = ns.wait_pod_ready(name, POD_READY).await?;
        let ip = e2e::pod_ip(&pod)
            .ok_or_else(|| E2eError::Check(format!("no IP: {}", describe_pod(&pod))))?;
        let mut conn = e2e::valkey(&ip, 6379).await?;
        e2e::valkey_cmd(&mut conn, &["SET", "who", name]).await?;
    }
    Ok(())
}

/// A Valkey pod with label `app: <app>`, on `node` when given.
fn valkey_pod_labelled(name: &str, app: &str, node: Option<&str>) -> String {
    let placement = node
        .map(|n| format!("  nodeSelector: {{kubernetes.io/hostname: {n}}}\n"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: {app}}}}}
spec:
  terminationGracePeriodSeconds: 2
{placement}  containers:
  - name: valkey
    image: {VALKEY_IMAGE}
    command: [valkey-server, --protected-mode, "no", --save, "", --appendonly, "no"]
    readinessProbe:
      exec: {{command: [valkey-cli, ping]}}
      periodSeconds: 1
"#
    )
}

pub fn service_manifest(name: &str, app: &str, kind: &str, port: i32, extra: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: {kind}
  selector: {{app: {app}}}
  ports: [{{name: valkey, port: {port}, targetPort: 6379}}]
{extra}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_ip_reaches_every_pod_from_the_host_and_from_a_pod() -> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("clusterip").await?;
    two_backends(&ns).await?;
    ns.apply(&service_manifest("be", "be", "ClusterIP", 6379, ""))
        .await?;
    let ip = cluster_ip(&service(&ns, "be").await?)?;
    let svc = addr(&ip, 6379)?;

    // From the host, a connection at a time, until both pods have answered.
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + ROUTED;
    while seen.len() < 2 {
        if tokio::time::Instant::now() > deadline {
            return Err(E2eError::Check(format!(
                "only {seen:?} answered at {svc} from the host within {ROUTED:?}"
            )));
        }
        if let Ok(who) = from_host(svc, "GET who").await {
            seen.insert(who);
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // From a pod, by address (no DNS here), and the server sees the pod's own address: traffic
    // from the pod network is not masqueraded.
    let client = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: {VALKEY_IMAGE}
    env:
    - {{name: SVC, value: "{ip}"}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    command: [sh, -c]
    args:
    - |
      seen=""
      for i in $(seq 1 60); do
        who=$(valkey-cli -h "$SVC" get who)
        case " $seen " in *" $who "*) ;; *) seen="$seen $who" ;; esac
      done
      echo "seen:$seen"
      list=$(valkey-cli -h "$SVC" client list)
      echo "$list" | grep -q "addr=$POD_IP:" || {{ echo "the server saw: $list (the pod is $POD_IP)"; exit 1; }}
"#
    );
    let log = passes(&ns, &client, "client", "c").await?;
    check(
        log.contains("be-0") && log.contains("be-1"),
        format!("a pod did not reach both pods through {ip}: {log}"),
    )
}

/// On kube-proxy's own node and on another: kube-proxy masquerades the hairpin connections of its
/// node's pods only, localkube's table those of the others.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_reaches_a_service_backed_by_itself() -> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("hairpin").await?;
    for (name, node) in [("on-a", "localkube-a"), ("on-b", "localkube-b")] {
        ns.apply(&service_manifest(name, name, "ClusterIP", 7001, ""))
            .await?;
        let ip = cluster_ip(&service(&ns, name).await?)?;
        // The pod serves and is its Service's only endpoint: its client's packets come back to
        // it through the Service, masqueraded to the bridge's address.
        let pod = format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: {name}}}}}
spec:
  restartPolicy: Never
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  containers:
  - name: c
    image: {VALKEY_IMAGE}
    env: [{{name: SVC, value: "{ip}"}}]
    command: [sh, -c]
    args:
    - |
      valkey-server --protected-mode no --save "" --daemonize yes --logfile /tmp/valkey.log
      for i in $(seq 1 60); do
        reply=$(timeout 2 valkey-cli -h "$SVC" -p 7001 ping 2>&1)
        if [ "$reply" = PONG ]; then
          valkey-cli -h "$SVC" -p 7001 client list
          exit 0
        fi
        echo "$reply"
        sleep 0.5
      done
      echo "no answer through $SVC:7001"; exit 1
"#
        );
        ns.apply(&pod).await?;
    }
    for name in ["on-a", "on-b"] {
        let (phase, log) = crate::finished(&ns, name, "c").await?;
        check(
            phase == "Succeeded" && log.contains("addr=10.213.0.1:"),
            format!(
                "{name}: {phase}, the hairpin connection did not come back masqueraded to the bridge address: {log}"
            ),
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_port_answers_from_outside_on_every_node_address_and_pods_stay_out_of_reach()
-> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("nodeport").await?;
    let (_, pod_ip) = ready_valkey(&ns, "np", None, &[]).await?;
    ns.apply(&service_manifest("np", "np", "NodePort", 6379, ""))
        .await?;
    let svc = service(&ns, "np").await?;
    let node_port = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| p.node_port)
        .ok_or_else(|| E2eError::Check("no nodePort".into()))?;
    let nodes = node_addresses().await?;
    check(nodes.len() >= 3, format!("node addresses: {nodes:?}"))?;
    for node in &nodes {
        let at = addr(node, node_port)?;
        answers(&format!("PONG from {at} outside"), "PONG", || {
            from_outside(at, "PING")
        })
        .await?;
    }

    // The host reaches the pod and the ClusterIP; the outside namespace neither, and says so at
    // once.
    let pod = addr(&pod_ip, 6379)?;
    let cip = addr(&cluster_ip(&svc)?, 6379)?;
    check(
        from_host(pod, "PING").await? == "PONG",
        "the host cannot reach the pod",
    )?;
    answers(&format!("PONG from {cip} on the host"), "PONG", || {
        from_host(cip, "PING")
    })
    .await?;
    for target in [pod, cip] {
        let t0 = std::time::Instant::now();
        match outside::connect(target, Duration::from_secs(5)).await {
            Ok(_) => {
                return Err(E2eError::Check(format!(
                    "the outside namespace reached {target}"
                )));
            }
            Err(e) => check(
                t0.elapsed() < Duration::from_secs(2),
                format!("refused only after {:?}: {e}", t0.elapsed()),
            )?,
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_load_balancer_answers_from_outside_within_its_source_ranges() -> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("lb").await?;
    ready_valkey(&ns, "lb", None, &[]).await?;
    ns.apply(&service_manifest("lb", "lb", "LoadBalancer", 7000, ""))
        .await?;
    let ip = wait_ingress(&ns, "lb").await?;
    check(in_pool(&ip), format!("{ip} is not in {}", outside::LB_POOL))?;
    let at = addr(&ip, 7000)?;
    answers(&format!("PONG from {at} outside"), "PONG", || {
        from_outside(at, "PING")
    })
    .await?;
    answers(&format!("PONG from {at} on the host"), "PONG", || {
        from_host(at, "PING")
    })
    .await?;

    // Only the pod network (and the host, 10.213.0.1) may come in: the outside client's packets
    // are dropped.
    let services = ns.api::<Service>();
    let ranges =
        |r: &str| Patch::Merge(serde_json::json!({"spec": {"loadBalancerSourceRanges": [r]}}));
    services
        .patch("lb", &PatchParams::default(), &ranges("10.213.0.0/16"))
        .await?;
    wait_until(
        ROUTED,
        &format!("{at} closed to the outside"),
        || async move {
            Ok(match from_outside(at, "PING").await {
                Ok(r) => Poll::NotYet(format!("answered {r}")),
                Err(_) => Poll::Ready(()),
            })
        },
    )
    .await?;
    check(
        from_host(at, "PING").await? == "PONG",
        "the host, inside the source ranges, was refused",
    )?;
    services
        .patch("lb", &PatchParams::default(), &ranges(outside::CLIENT_CIDR))
        .await?;
    answers(&format!("PONG from {at} outside again"), "PONG", || {
        from_outside(at, "PING")
    })
    .await
}

/// One kube-proxy serves every node, speaking for localkube-a: a Service with
/// externalTrafficPolicy Local keeps the client's address, and answers only when it has an
/// endpoint on localkube-a.
#[tokio::test(flavor = "multi_thread")]
async fn external_traffic_policy_local_keeps_the_client_address_on_kube_proxys_node() -> Result<()>
{
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("etplocal").await?;
    let local = "  externalTrafficPolicy: Local\n";
    for (name, node) in [("on-a", "localkube-a"), ("on-b", "localkube-b")] {
        ns.apply(&valkey_pod_labelled(name, name, Some(node)))
            .await?;
        ns.apply(&service_manifest(name, name, "LoadBalancer", 7000, local))
            .await?;
    }
    for name in ["on-a", "on-b"] {
        ns.wait_pod_ready(name, POD_READY).await?;
    }
    let at = addr(&wait_ingress(&ns, "on-a").await?, 7000)?;
    let clients = wait_until(
        ROUTED,
        &format!("CLIENT LIST at {at} from outside"),
        || async move {
            Ok(match from_outside(at, "CLIENT LIST").await {
                Ok(r) if r.contains("addr=") => Poll::Ready(r),
                Ok(r) => Poll::NotYet(format!("answered {r:?}")),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        },
    )
    .await?;
    check(
        clients.contains(&format!("addr={}:", outside::CLIENT_IP)),
        format!("the server did not see the outside client's own address: {clients}"),
    )?;
    // Its only endpoint is on localkube-b, which is not kube-proxy's node: nothing answers.
    let elsewhere = addr(&wait_ingress(&ns, "on-b").await?, 7000)?;
    match from_outside(elsewhere, "PING").await {
        Ok(r) => Err(E2eError::Check(format!(
            "{elsewhere} answered {r} without a local endpoint"
        ))),
        Err(_) => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn load_balancer_addresses_follow_classes_requests_and_deletions() -> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("lbclass").await?;
    let lb = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  type: LoadBalancer\n  ports: [{{port: 80}}]\n{extra}"
        )
    };
    ns.apply(&lb(
        "own",
        &format!("  loadBalancerClass: {}\n", outside::LB_CLASS),
    ))
    .await?;
    ns.apply(&lb("nobody", "  loadBalancerClass: example.com/nobody\n"))
        .await?;
    ns.apply(&lb(
        "empty",
        &format!("  loadBalancerClass: {}\n", outside::LB_CLASS_NO_ADDRESSES),
    ))
    .await?;
    let taken = wait_ingress(&ns, "own").await?;
    check(in_pool(&taken), format!("{taken} is not in the pool"))?;
    // Asks for the address "own" holds.
    ns.apply(&lb("wants", &format!("  loadBalancerIP: {taken}\n")))
        .await?;

    let ns_name = ns.name.clone();
    let pending = wait_until(
        ROUTED,
        "the allocator's Warnings for the Services it cannot serve",
        || {
            let (ns, ns_name, taken) = (&ns, ns_name.clone(), taken.clone());
            async move {
                let evs = events(ns).await?;
                let warned = |svc: &str, says: &str| {
                    evs.iter().any(|e| {
                        e.starts_with(&format!(
                            "{svc} Warning AllocationFailed localkube-loadbalancer"
                        )) && e.contains(says)
                    })
                };
                Ok(
                    if warned("empty", "(no addresses)")
                        && warned(
                            "wants",
                            &format!("{taken} is in use by Service {ns_name}/own"),
                        )
                    {
                        Poll::Ready(evs)
                    } else {
                        Poll::NotYet(format!("events: {evs:?}"))
                    },
                )
            }
        },
    )
    .await?;
    // The allocator has seen every Service by now: a class nobody serves stays as it was,
    // without an address and without a word from it (the API server's own Cluster IP repair
    // may speak of it: that is not the allocator).
    let from_the_allocator = |e: &&String| {
        let mut fields = e.split_whitespace();
        fields.next() == Some("nobody") && fields.nth(2) == Some("localkube-loadbalancer")
    };
    check(
        !pending.iter().any(|e| from_the_allocator(&e)),
        format!("the allocator spoke of a class it does not serve: {pending:?}"),
    )?;
    for name in ["nobody", "empty", "wants"] {
        let svc = service(&ns, name).await?;
        check(
            ingress_ip(&svc).is_none(),
            format!("{name} got an address: {:?}", svc.status),
        )?;
    }

    // Deleting the holder frees its address: the Service that asked for it gets it.
    ns.api::<Service>()
        .delete("own", &DeleteParams::default())
        .await?;
    let got = wait_ingress(&ns, "wants").await?;
    check(
        got == taken,
        format!("wants got {got}, not the freed {taken}"),
    )?;
    check(
        ingress_ip(&service(&ns, "nobody").await?).is_none(),
        "the class nobody serves got an address",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn service_and_pod_names_resolve_from_a_pod() -> Result<()> {
    if let Some(skipped) = localkube_only() {
        return skipped;
    }
    let ns = TestNamespace::create("dns").await?;
    // A StatefulSet's pods get their hostname and the headless Service as subdomain, so each is
    // <pod>.<service>.<namespace>.svc.cluster.local.
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: db}}
spec:
  clusterIP: None
  selector: {{app: db}}
  ports: [{{port: 6379}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  serviceName: db
  replicas: 1
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: valkey
        image: {VALKEY_IMAGE}
        command: [valkey-server, --protected-mode, "no", --save, ""]
        readinessProbe:
          exec: {{command: [valkey-cli, ping]}}
          periodSeconds: 1
"#
    ))
    .await?;
    ns.apply(&service_manifest("front", "db", "ClusterIP", 6379, ""))
        .await?;
    let front = cluster_ip(&service(&ns, "front").await?)?;
    let db0 = ns.wait_pod_ready("db-0", POD_READY).await?;
    let db0_ip = e2e::pod_ip(&db0).ok_or_else(|| E2eError::Check("db-0 has no IP".into()))?;
    let ns_name = &ns.name;
    let dashed = db0_ip.replace('.', "-");
    // Each name against the address it must have; a name that does not exist must not resolve.
    let probe = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: resolver}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: {VALKEY_IMAGE}
    command: [sh, -c]
    args:
    - |
      cat /etc/resolv.conf
      grep -qx "nameserver {dns}" /etc/resolv.conf || exit 1
      fail=0
      expect() {{
        got=$(getent ahostsv4 "$1" | awk 'NR==1 {{print $1}}')
        echo "$1 -> ${{got:-nothing}} (want $2)"
        [ "$got" = "$2" ] || fail=1
      }}
      expect front {front}
      expect front.{ns_name} {front}
      expect front.{ns_name}.svc.cluster.local {front}
      expect db-0.db {db0_ip}
      expect db-0.db.{ns_name}.svc.cluster.local {db0_ip}
      expect kubernetes.default 10.0.0.1
      expect {dashed}.{ns_name}.pod.cluster.local {db0_ip}
      if getent hosts nosuch.{ns_name}.svc.cluster.local; then echo "nosuch resolved"; fail=1; fi
      [ "$(valkey-cli -h front ping)" = PONG ] || {{ echo "front by name: no PONG"; fail=1; }}
      exit $fail
"#,
        dns = outside::DNS_SERVICE_IP
    );
    let log = wait_until(Duration::from_secs(60), "names resolving in a pod", || {
        let (ns, probe) = (&ns, probe.clone());
        async move {
            // The EndpointSlice of a pod just Ready may reach CoreDNS a moment later: try anew.
            let _ = ns
                .kubectl(&[
                    "delete",
                    "pod",
                    "resolver",
                    "--wait=true",
                    "--ignore-not-found",
                ])
                .await;
            Ok(match passes(ns, &probe, "resolver", "c").await {
                Ok(log) => Poll::Ready(log),
                Err(e) => Poll::NotYet(e.to_string()),
            })
        }
    })
    .await?;
    check(
        log.contains(&format!("db-0.db -> {db0_ip}")),
        format!("unexpected output: {log}"),
    )
}
