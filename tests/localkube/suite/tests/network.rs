//! The pod network: routed through the bridge address, so that each pod needs one neighbour
//! entry however many pods it talks to, and hundreds of pods fit (see the kubelet's network.rs).

use std::time::{Duration, Instant};

use e2e::{Poll, Result, TestNamespace, check, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;

use crate::{VALKEY_IMAGE, host, migrate, netns_of, ping, skip};

/// The readiness probe's command: `valkey-cli ping`, which the kubelet answers natively from
/// inside the pod, or the same through a shell pipe, which it must exec in the container.
fn probe_command(exec: bool) -> &'static str {
    if exec {
        r#"[sh, -c, "valkey-cli ping | grep -q PONG"]"#
    } else {
        "[valkey-cli, ping]"
    }
}

fn deployment(name: &str, replicas: usize) -> String {
    deployment_probed(name, replicas, false)
}

fn deployment_probed(name: &str, replicas: usize, exec: bool) -> String {
    let probe = probe_command(exec);
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: valkey
        image: {VALKEY_IMAGE}
        command: [valkey-server, --protected-mode, "no", --save, "", --appendonly, "no"]
        readinessProbe:
          exec: {{command: {probe}}}
          periodSeconds: 10
"#
    )
}

/// Waits until `count` pods of `app` are Ready; returns them.
async fn ready_pods(
    ns: &TestNamespace,
    app: &str,
    count: usize,
    within: Duration,
) -> Result<Vec<Pod>> {
    let pods = ns.api::<Pod>();
    let selector = format!("app={app}");
    wait_until(within, &format!("{count} Ready pods of {app}"), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            let ready: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| e2e::pod_ready(p) && e2e::pod_ip(p).is_some())
                .collect();
            Ok(if ready.len() >= count {
                Poll::Ready(ready)
            } else {
                Poll::NotYet(format!("{} of {count} Ready", ready.len()))
            })
        }
    })
    .await
}

/// The neighbour entries of a pod's network namespace, as `ip neigh` lists them.
async fn neighbours(pod: &Pod) -> Result<Vec<String>> {
    let out = host("ip", &["-n", &netns_of(pod), "neigh", "show"]).await?;
    Ok(out
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect())
}

/// Each pod opens a connection to `peers` others (server to server, as a cluster bus does);
/// the replies that were not OK.
async fn mesh(ips: &[String], peers: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, from) in ips.iter().enumerate() {
        for k in 1..=peers.min(ips.len() - 1) {
            let to = &ips[(i + k) % ips.len()];
            match migrate(from, to, 5000).await {
                Ok(r) if r == "OK" => {}
                Ok(r) => failures.push(format!("{from} -> {to}: {r}")),
                Err(e) => failures.push(format!("{from} -> {to}: {e}")),
            }
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_reach_each_other_with_one_neighbour_entry_each() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("counts neighbour entries in localkube's pod namespaces");
    }
    let ns = TestNamespace::create("mesh").await?;
    ns.apply(&deployment("mesh", 6)).await?;
    let pods = ready_pods(&ns, "mesh", 6, crate::POD_READY).await?;
    let ips: Vec<String> = pods.iter().filter_map(e2e::pod_ip).collect();
    let failures = mesh(&ips, ips.len() - 1).await;
    check(failures.is_empty(), format!("unreachable: {failures:?}"))?;
    for pod in &pods {
        let entries = neighbours(pod).await?;
        // The gateway (the bridge address) and nothing else: no other pod is a neighbour.
        check(
            entries.len() <= 1 && entries.iter().all(|e| e.starts_with("10.213.0.1 ")),
            format!("{} has neighbour entries {entries:?}", netns_of(pod)),
        )?;
    }
    Ok(())
}

/// User and system CPU of the process kubelet and its waited-for children (exec probes) so far,
/// in clock ticks (100 a second).
fn kubelet_cpu_ticks() -> Option<u64> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "localkube-kubelet") {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
            // utime, stime, cutime, cstime: fields 14-17 of the stat line.
            return Some(tick(11)? + tick(12)? + tick(13)? + tick(14)?);
        }
    }
    None
}

/// Sum of the resident memory of this namespace's pod processes, in KiB.
fn rss_kib(pods: &[Pod]) -> u64 {
    let mut total = 0;
    for pod in pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let record = e2e::localkube_kubelet_dir()
            .join("pods")
            .join(uid)
            .join("pids/valkey.pid");
        let pid = std::fs::read_to_string(&record)
            .ok()
            .and_then(|t| t.split_whitespace().next().map(str::to_string));
        let status = pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok());
        total += status
            .as_deref()
            .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// Hundreds of pods (300 unless LOCALKUBE_SCALE_PODS says otherwise), all Ready, each reaching
/// ten others server to server and the host reaching each, with one neighbour entry per pod
/// namespace. Prints the figures. `make localkube-scale`; LOCALKUBE_SCALE_EXEC_PROBE=1 probes
/// through a shell pipe, which the kubelet execs in the container, to compare its CPU.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "hundreds of pods: make localkube-scale"]
async fn hundreds_of_pods_are_ready_and_reach_each_other() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("counts neighbour entries in localkube's pod namespaces");
    }
    let count: usize = std::env::var("LOCALKUBE_SCALE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let exec_probe = std::env::var_os("LOCALKUBE_SCALE_EXEC_PROBE").is_some();
    let ns = TestNamespace::create("scale").await?;
    let t0 = Instant::now();
    ns.apply(&deployment_probed("tiny", count, exec_probe))
        .await?;
    let pods = ready_pods(&ns, "tiny", count, Duration::from_secs(900)).await?;
    let to_ready = t0.elapsed();
    let ips: Vec<String> = pods.iter().filter_map(e2e::pod_ip).collect();

    let t1 = Instant::now();
    let mut unreachable = Vec::new();
    for ip in &ips {
        if let Err(e) = ping(ip, Duration::from_secs(5)).await {
            unreachable.push(e.to_string());
        }
    }
    let failures = mesh(&ips, 10).await;
    let reach_time = t1.elapsed();

    let mut pod_entries = 0;
    let mut crowded = Vec::new();
    for pod in &pods {
        let entries = neighbours(pod).await?;
        pod_entries += entries.len();
        if entries.len() > 1 {
            crowded.push(format!("{}: {entries:?}", netns_of(pod)));
        }
    }
    let host_entries = host("ip", &["neigh", "show", "dev", "lkbr0"])
        .await?
        .lines()
        .count();
    let rss = rss_kib(&pods);
    // The kubelet's CPU (its own and its ended children's) while the pods only get probed, every
    // 10 s each: a fixed window, this is a measurement.
    let window = Duration::from_secs(30);
    let before = kubelet_cpu_ticks();
    tokio::time::sleep(window).await;
    let probe_cpu = kubelet_cpu_ticks()
        .zip(before)
        .map(|(after, before)| (after - before) as f64 / 100.0 / window.as_secs_f64() * 100.0);
    let nodes: std::collections::BTreeMap<String, usize> =
        pods.iter().fold(Default::default(), |mut m, p| {
            let n = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            *m.entry(n).or_default() += 1;
            m
        });
    println!(
        "{count} pods: all Ready in {:.1} s; host PINGed each and each pod MIGRATEd to 10 others in {:.1} s; \
         neighbour entries: {pod_entries} in the pod namespaces, {host_entries} on the bridge; \
         valkey-server RSS {:.0} MiB in total ({:.1} MiB each); pods per node {nodes:?}; \
         kubelet CPU while probing ({}): {probe_cpu:.1?} % of a core",
        to_ready.as_secs_f64(),
        reach_time.as_secs_f64(),
        rss as f64 / 1024.0,
        rss as f64 / 1024.0 / count as f64,
        probe_command(exec_probe),
    );
    check(
        unreachable.is_empty(),
        format!(
            "{} pods unreachable from the host: {:?}",
            unreachable.len(),
            unreachable.iter().take(5).collect::<Vec<_>>()
        ),
    )?;
    check(
        failures.is_empty(),
        format!(
            "{} pod-to-pod connections failed: {:?}",
            failures.len(),
            failures.iter().take(5).collect::<Vec<_>>()
        ),
    )?;
    check(
        crowded.is_empty(),
        format!("pods with more than one neighbour: {crowded:?}"),
    )?;
    // Down again promptly, rather than with the namespace in the background.
    let t2 = Instant::now();
    ns.kubectl(&["scale", "deployment", "tiny", "--replicas=0"])
        .await?;
    let api = ns.api::<Pod>();
    wait_until(Duration::from_secs(600), "every pod of tiny gone", || {
        let api = api.clone();
        async move {
            let left = api
                .list(&ListParams::default().labels("app=tiny"))
                .await?
                .items
                .len();
            Ok(if left == 0 {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("{left} pods left"))
            })
        }
    })
    .await?;
    println!("scaled to 0 in {:.1} s", t2.elapsed().as_secs_f64());
    Ok(())
}
