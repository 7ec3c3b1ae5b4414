//! One pass of the engine over one big cluster: every member's CLUSTER NODES in Valkey's own
//! format, read through the real `observe` (with servers that answer from memory) and decided by
//! the real `decide`, `bindings` and `health`, as `Engine::pass` calls them.
//!
//! Every member's view lists every node, so a pass holds members² lines: the cost that grows
//! fastest with the cluster. The test that runs by default checks the decision at a small size;
//! the ignored benchmark measures peak heap and CPU time at 30, 300 and 990 members (the
//! schema's maximum) and writes `bench/results/engine-scale.json` (see `bench/README.md`).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cluster_controller::engine::{
    Action, Decision, Health, Observation, Reason, Verdict, bindings, decide, health, judge,
    observe_fenced,
};

use cluster_controller::valkey::cluster_nodes::NodeId;
use common::memory::{Cluster, REPLICATION_USER, Servers};

/// The system allocator, counting the bytes in use and the most ever in use, so a measurement
/// can read the peak of one pass above what was live when it started.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = IN_USE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    IN_USE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is passed to `System` unchanged; only the counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// CPU time of the calling thread (user and system), in seconds.
fn thread_cpu() -> f64 {
    let mut usage = std::mem::MaybeUninit::<nix::libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid rusage to fill; RUSAGE_THREAD reads the calling thread's.
    let rc = unsafe { nix::libc::getrusage(nix::libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: getrusage succeeded, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: nix::libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// What one pass computed, and what it cost.
struct Measured {
    members: usize,
    decision: Decision,
    health: Option<Health>,
    /// Heap the observation holds once read, above what was live before the pass.
    observation_bytes: usize,
    /// The most heap in use during the pass, above what was live before it.
    peak_bytes: usize,
    observe_cpu: f64,
    decide_cpu: f64,
}

/// One pass as `Engine::pass` makes it: observe every member, then judge that observation (the
/// decision, the bindings and the health, from one topology). Single-threaded, so the thread's
/// CPU time is the pass's.
fn pass(cluster: &Cluster) -> Measured {
    let servers = Servers::new(cluster);
    let members = cluster.members();
    let desired = cluster.desired();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");

    let before = IN_USE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let started = thread_cpu();
    let observation: Observation = runtime.block_on(observe_fenced(
        &servers,
        &members,
        Duration::from_secs(2),
        Some(REPLICATION_USER),
    ));
    let observed = thread_cpu();
    let observation_bytes = IN_USE.load(Ordering::Relaxed).saturating_sub(before);
    let verdict: Verdict = judge(&desired, &members, &observation);
    let decided = thread_cpu();
    let peak_bytes = PEAK.load(Ordering::Relaxed).saturating_sub(before);

    // One topology for the three answers gives what three topologies give.
    assert_eq!(decide(&desired, &members, &observation), verdict.decision);
    assert_eq!(bindings(&desired, &members, &observation), verdict.bindings);
    assert_eq!(health(&desired, &members, &observation), verdict.health);
    let (decision, bound, health) = (verdict.decision, verdict.bindings, verdict.health);

    assert_eq!(bound.len(), members.len(), "every member stays bound");
    for (name, reach) in &observation.members {
        assert!(reach.state().is_some(), "{name} was not read: {reach:?}");
    }
    Measured {
        members: members.len(),
        decision,
        health,
        observation_bytes,
        peak_bytes,
        observe_cpu: observed - started,
        decide_cpu: decided - observed,
    }
}

/// What a healthy cluster of `shards` shards of a primary and a replica reports.
fn steady(shards: u32, members: usize) -> Health {
    Health {
        shards,
        ready_shards: shards,
        slots_assigned: 16384,
        replicas_wanted: shards,
        replicas_in_sync: shards,
        nodes: members,
        slots_to_move: Some(0),
        members_to_restart: 0,
        shards_wanted: shards,
        spread_held: None,
    }
}

#[test]
fn a_healthy_cluster_of_30_is_steady() {
    for members in [6, 30] {
        let measured = steady_pass(members);
        let shards = (members / 2) as u32;
        assert_eq!(measured.health, Some(steady(shards, members)));
    }
}

/// One pass over a healthy cluster of `members`, whose decision must be `Steady`.
fn steady_pass(members: usize) -> Measured {
    let measured = pass(&Cluster::new(members));
    let shards = (members / 2) as u32;
    assert_eq!(
        measured.decision,
        Decision::Steady(steady(shards, members)),
        "{members} members: {}",
        measured.decision
    );
    measured
}

#[test]
fn a_fresh_node_is_attached_to_its_shard_as_with_fewer_members() {
    let decisions: Vec<Decision> = [6, 30]
        .into_iter()
        .map(|members| pass(&Cluster::new(members).with_fresh_replica()).decision)
        .collect();
    match &decisions[0] {
        Decision::Act {
            action: Action::Replicate { on, primary_id },
            reason: Reason::AttachingReplicas,
            ..
        } => {
            assert_eq!(on.member, "c-0-1");
            assert_eq!(
                Some(primary_id),
                NodeId::parse(&Cluster::new(6).nodes[0].id).as_ref()
            );
        }
        other => panic!("{other}"),
    }
    assert_eq!(decisions[0], decisions[1]);
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}

fn rustc() -> Option<String> {
    let out = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `make bench-engine`. Sizes from `PASS_SCALE_MEMBERS` (comma separated), 30, 300 and 990 by
/// default.
#[test]
#[ignore = "benchmark: make bench-engine"]
fn pass_at_scale() {
    let sizes: Vec<usize> = std::env::var("PASS_SCALE_MEMBERS")
        .unwrap_or_else(|_| "30,300,990".into())
        .split(',')
        .map(|s| s.trim().parse().expect("PASS_SCALE_MEMBERS: member counts"))
        .collect();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!("one observe + decide pass over a healthy cluster ({profile} build)");
    println!(
        "{:>8} {:>12} {:>16} {:>12} {:>12}",
        "members", "peak MiB", "observation MiB", "observe s", "decide s"
    );
    let mut rows = Vec::new();
    for members in sizes {
        let m = steady_pass(members);
        println!(
            "{:>8} {:>12.1} {:>16.1} {:>12.3} {:>12.3}",
            m.members,
            mib(m.peak_bytes),
            mib(m.observation_bytes),
            m.observe_cpu,
            m.decide_cpu
        );
        rows.push(serde_json::json!({
            "members": m.members,
            "peak_heap_bytes": m.peak_bytes,
            "observation_heap_bytes": m.observation_bytes,
            "observe_cpu_seconds": m.observe_cpu,
            "decide_cpu_seconds": m.decide_cpu,
        }));
    }
    let report = serde_json::json!({
        "benchmark": "engine-scale",
        "what": "one observe + decide + bindings + health pass over a healthy cluster of primaries with one replica each",
        "profile": profile,
        "machine": machine(),
        "rustc": rustc(),
        "results": rows,
    });
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/results/engine-scale.json");
    std::fs::create_dir_all(path.parent().expect("folder")).expect("bench/results");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).expect("json") + "\n",
    )
    .expect("write the results");
    println!("written to {}", path.display());
}
