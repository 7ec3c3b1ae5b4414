//! Chaos scenarios: an operation on a running ValkeyCluster or ValkeyReplication (nothing, a
//! scale-out, a roll, ...) crossed with a fault injected at a random point of it (seeded), while a
//! writer runs as the kind's clients do (a cluster client; the replication's read/write Service,
//! or with Sentinel the primary the Sentinels name, with valkey-py's Sentinel client beside it).
//! Each scenario reports what a user of the data cares about: writes acknowledged and lost (plain
//! `OK`, and `OK` confirmed by `WAIT 1`), the longest stretch without an acknowledged write, the
//! time from the fault's end to a Ready object, and the kind's consistency check (`valkey-cli
//! --cluster check`; one primary and every other member its replica).
//!
//! The bar: no WAIT-acknowledged write is ever lost; no plain-acknowledged write is lost where
//! Valkey on its own would lose none (every planned operation, partitions the majority can see
//! through, restarts with data). A crashed or cut-off primary may lose the writes it acknowledged
//! but had not yet replicated: that is asynchronous replication, and `WAIT` is the client's tool
//! against it ([`Fault::valkey_alone_may_lose_writes`]).

mod fixture;
pub mod results;
pub mod writer;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use valkey_api::v1alpha1::{Role, ValkeyNode};

use crate::cluster::ClusterFixture;
use crate::faults::{self, Endpoint, NodeStop};
use crate::{E2eError, Poll, Result, check, wait_until};
use fixture::{Fixture, Writer};
use writer::Acks;

/// The kind of object a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Cluster,
    Replication,
}

/// What the user does to the cluster or replication while the fault strikes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Nothing: the object only serves.
    Idle,
    /// `spec.shards` to this many (clusters).
    Shards(i32),
    /// `spec.replicas` to this many.
    Replicas(i32),
    /// A new image (a rolling restart of every member; from 8.0 to 9.1 an upgrade).
    Image(&'static str),
    /// `spec.primary` to the member of this index (replications): a planned switchover.
    Primary(u32),
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Idle => f.write_str("idle"),
            Operation::Shards(n) => write!(f, "shards→{n}"),
            Operation::Replicas(n) => write!(f, "replicas→{n}"),
            Operation::Image(image) => write!(f, "image→{image}"),
            Operation::Primary(index) => write!(f, "primary→member {index}"),
        }
    }
}

/// What goes wrong, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The cluster-controller is killed (SIGKILL) and started again.
    KillClusterController,
    /// A primary's pod is deleted (in a cluster Valkey fails over, on 9.x after the primary
    /// handed over; in a replication the new pod reloads its data and may stay the primary).
    DeletePrimaryPod,
    /// A primary cannot reach the operator (the host) nor one of its replicas; every other
    /// member still sees it, so Valkey starts no election.
    PartialPartition {
        seconds: u64,
    },
    /// A primary is cut from everyone: the majority elects its replica (in a replication, the
    /// operator promotes one).
    IsolatePrimary {
        seconds: u64,
    },
    /// A primary's processes are stopped (SIGSTOP) and continued.
    PausePrimary {
        seconds: u64,
    },
    /// A primary's valkey-server is killed and restarted in place by the kubelet (same pod, same
    /// volume; without persistence that is an empty restart with the same node ID).
    RestartPrimaryInPlace,
    /// Every pod of the zone that runs a primary is cut from the rest.
    PartitionZone {
        seconds: u64,
    },
    /// The zone that runs a primary is cut from the operator (the host) and from the zone of
    /// that primary's replica; the third zone still sees both, so Valkey starts no election.
    PartialZonePartition {
        seconds: u64,
    },
    /// A primary's replica is cut from it for `stale_seconds` (longer than Valkey lets a
    /// replica be promoted after), then the primary is paused for `paused_seconds`: Valkey
    /// elects nobody, and the operator must not promote the stale replica either.
    StaleReplicaThenPausedPrimary {
        stale_seconds: u64,
        paused_seconds: u64,
    },
    /// One member is cut from everyone (it stays Ready for the kubelet) for `seconds`, while
    /// the primary of another shard restarts in place: that other shard must be repaired (its
    /// replica in sync again) while the member is still out.
    MemberOutWhileAnotherPrimaryRestarts {
        seconds: u64,
    },
    /// The node that runs a primary stops (its kubelet and its pods).
    StopNode {
        how: NodeStop,
        seconds: u64,
    },
    /// A primary's replica restarts and full-syncs from it (slowed to seconds), and meanwhile
    /// `kubectl drain` empties the primary's node: the primary must not be evicted before its
    /// replica holds the data.
    DrainDuringFullSync,
    /// The Secret of the clients' password is deleted (an accident): it must come back with
    /// the same password, and no client be refused.
    DeletePasswordSecret,
    /// The cluster-controller is held down (SIGSTOP, not killed) while `during` strikes, and for
    /// `seconds` in all; then it goes on.
    OperatorHeldDown {
        seconds: u64,
        during: Box<Fault>,
    },
    /// The API server restarts.
    RestartApiServer,
    /// One of a replication's Sentinels loses its pod (with `spec.sentinel`): the node-controller
    /// starts a new one, clean, at a new address; the operator tells it what to watch and the
    /// others forget the old one.
    DeleteSentinelPod,
}

impl Fault {
    /// Whether Valkey on its own may lose plain-acknowledged writes under this fault: a primary
    /// that crashes or is cut off from the majority may have acknowledged writes it had not yet
    /// replicated. Everything the operator plans, and faults the majority sees through, lose none.
    pub fn valkey_alone_may_lose_writes(&self, persistence: bool) -> bool {
        match self {
            Fault::IsolatePrimary { .. }
            | Fault::PausePrimary { .. }
            | Fault::PartitionZone { .. }
            | Fault::StopNode { .. } => true,
            // The paused primary counts as failed. When the pause and the cut end, the stale
            // replica catches up (a partial resync) and, its data fresh again, Valkey elects it at
            // once (seen: resync at .170, election won at .194); writes the resumed primary
            // acknowledged in between and had not sent yet are lost. The operator takes no step.
            Fault::StaleReplicaThenPausedPrimary { .. } => true,
            Fault::PartialZonePartition { .. }
            | Fault::MemberOutWhileAnotherPrimaryRestarts { .. }
            | Fault::DrainDuringFullSync
            | Fault::DeleteSentinelPod
            | Fault::DeletePasswordSecret => false,
            Fault::OperatorHeldDown { during, .. } => {
                during.valkey_alone_may_lose_writes(persistence)
            }
            Fault::RestartPrimaryInPlace => !persistence,
            Fault::None
            | Fault::KillClusterController
            | Fault::DeletePrimaryPod
            | Fault::PartialPartition { .. }
            | Fault::RestartApiServer => false,
        }
    }

    /// Whether the fault is one for `kind`. A replication has the faults of one primary, of the
    /// operator and of the API server. It is spared those that test what only a cluster has:
    /// partial partitions and a stale replica test that the operator leaves elections to Valkey's
    /// cluster bus (a replication's primary that its replicas still hear is a test of
    /// suite/replication.rs); another shard's primary needs a second shard; and with one member
    /// per node and zone, a cut zone or a stopped node take the primary alone, as isolate-primary
    /// does without disturbing every other test.
    pub fn applies_to(&self, kind: Kind) -> bool {
        match self {
            Fault::None
            | Fault::KillClusterController
            | Fault::DeletePrimaryPod
            | Fault::IsolatePrimary { .. }
            | Fault::PausePrimary { .. }
            | Fault::RestartPrimaryInPlace
            | Fault::RestartApiServer
            | Fault::DeletePasswordSecret => true,
            Fault::DeleteSentinelPod => kind == Kind::Replication,
            Fault::OperatorHeldDown { during, .. } => during.applies_to(kind),
            Fault::PartialPartition { .. }
            | Fault::PartitionZone { .. }
            | Fault::PartialZonePartition { .. }
            | Fault::StaleReplicaThenPausedPrimary { .. }
            | Fault::MemberOutWhileAnotherPrimaryRestarts { .. }
            | Fault::StopNode { .. }
            | Fault::DrainDuringFullSync => kind == Kind::Cluster,
        }
    }

    /// Whether the fault reaches beyond the scenario's own pods and processes (a zone, a node,
    /// the API server): such scenarios must run alone.
    pub fn is_global(&self) -> bool {
        match self {
            Fault::OperatorHeldDown { during, .. } => during.is_global(),
            other => matches!(
                other,
                Fault::PartitionZone { .. }
                    | Fault::PartialZonePartition { .. }
                    | Fault::StopNode { .. }
                    | Fault::DrainDuringFullSync
                    | Fault::RestartApiServer
            ),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => f.write_str("none"),
            Fault::KillClusterController => f.write_str("cluster-controller killed"),
            Fault::DeletePrimaryPod => f.write_str("primary pod deleted"),
            Fault::PartialPartition { seconds } => {
                write!(f, "primary cut from operator and a replica {seconds}s")
            }
            Fault::IsolatePrimary { seconds } => write!(f, "primary isolated {seconds}s"),
            Fault::PausePrimary { seconds } => write!(f, "primary paused {seconds}s"),
            Fault::RestartPrimaryInPlace => f.write_str("primary restarted in place"),
            Fault::PartitionZone { seconds } => write!(f, "primary's zone cut {seconds}s"),
            Fault::PartialZonePartition { seconds } => {
                write!(
                    f,
                    "primary's zone cut from operator and replica's zone {seconds}s"
                )
            }
            Fault::StaleReplicaThenPausedPrimary {
                stale_seconds,
                paused_seconds,
            } => write!(
                f,
                "replica cut {stale_seconds}s, then its primary paused {paused_seconds}s"
            ),
            Fault::MemberOutWhileAnotherPrimaryRestarts { seconds } => write!(
                f,
                "a member cut off {seconds}s while another primary restarts in place"
            ),
            Fault::StopNode { how, seconds } => {
                write!(f, "primary's node stopped ({how:?}) {seconds}s")
            }
            Fault::RestartApiServer => f.write_str("API server restarted"),
            Fault::DrainDuringFullSync => {
                f.write_str("primary's node drained while its replica full-syncs")
            }
            Fault::DeletePasswordSecret => f.write_str("clients' password Secret deleted"),
            Fault::DeleteSentinelPod => f.write_str("a Sentinel's pod deleted"),
            Fault::OperatorHeldDown { seconds, during } => {
                write!(f, "operator held down {seconds}s while: {during}")
            }
        }
    }
}

/// One scenario: a cluster or a replication, an operation, a fault.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub kind: Kind,
    /// The ValkeyCluster's or ValkeyReplication's spec (YAML flow mapping).
    pub spec: String,
    pub operation: Operation,
    pub fault: Fault,
    /// The fault strikes at a random moment in `0..=window` after the operation starts.
    pub window: Duration,
    /// Writers running side by side (1: the usual client; more: clients writing at full speed).
    pub writers: usize,
}

impl Scenario {
    /// The same scenario on Valkey 8.0: its name ends in `.on-8.0`, its spec names the 8.0 image,
    /// and an image change rolls to another 8.0 tag.
    pub fn on_valkey_8(&self) -> Scenario {
        let operation = match &self.operation {
            Operation::Image(_) => Operation::Image("valkey/valkey:8.0.1"),
            other => other.clone(),
        };
        Scenario {
            name: format!("{}.on-8.0", self.name),
            kind: self.kind,
            spec: self.spec.replacen('{', "{image: 'valkey/valkey:8.0', ", 1),
            operation,
            fault: self.fault.clone(),
            window: self.window,
            writers: self.writers,
        }
    }

    fn persistence(&self) -> bool {
        !self
            .spec
            .replace(' ', "")
            .contains("persistence:{enabled:false")
    }
}

/// What a scenario measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    /// When the fault struck, after the operation started.
    pub struck_after: Duration,
    pub plain_acked: usize,
    pub plain_lost: usize,
    pub replicated_acked: usize,
    pub replicated_lost: usize,
    pub refused: u64,
    pub longest_gap: Duration,
    /// Gaps between acknowledged writes of at least [`writer::NOTED_GAP`], in order: when each
    /// ended, in seconds after the fault struck (negative before), and how long it was.
    pub gaps: Vec<(f64, Duration)>,
    /// Planned failovers the operator made to spread primaries apart (its `SpreadingPrimaries`
    /// Events) from just before the fault to the end of the writes.
    pub spread_failovers: usize,
    /// From the fault's end to a Ready cluster or replication.
    pub ready_after: Duration,
    /// The kind's consistency check passed (`valkey-cli --cluster check`; one primary and every
    /// other member its replica).
    pub check_ok: bool,
    /// Plain losses are allowed (Valkey alone may lose writes under this fault).
    pub plain_loss_allowed: bool,
    /// What went wrong, if the bar was not met or the scenario could not finish.
    pub failure: Option<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The pauses writes made from the fault on (gaps of at least [`writer::PAUSE`] that ended
    /// after it struck): their lengths, in order.
    pub fn pauses(&self) -> Vec<Duration> {
        self.gaps
            .iter()
            .filter(|(after, gap)| *after > 0.0 && *gap >= writer::PAUSE)
            .map(|(_, gap)| *gap)
            .collect()
    }

    /// The table's header.
    pub fn header() -> String {
        "| scenario | seed | fault at | plain acked | plain lost | WAIT acked | WAIT lost | refused | longest gap | Ready after fault | consistency check | result |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
            .to_owned()
    }

    /// One row of the table.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {:.1}s | {} | {}{} | {} | {} | {} | {:.1}s | {:.1}s | {} | {} |",
            self.scenario,
            self.seed,
            self.struck_after.as_secs_f64(),
            self.plain_acked,
            self.plain_lost,
            if self.plain_loss_allowed {
                " (allowed)"
            } else {
                ""
            },
            self.replicated_acked,
            self.replicated_lost,
            self.refused,
            self.longest_gap.as_secs_f64(),
            self.ready_after.as_secs_f64(),
            if self.check_ok { "ok" } else { "FAILED" },
            match &self.failure {
                None => "pass".to_owned(),
                Some(why) => format!("FAIL: {}", why.replace('|', "/")),
            }
        )
    }
}

/// The seed for this run: `CHAOS_SEED`, else a random one (printed by the caller).
pub fn seed_from_env() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

/// Runs one scenario with `seed`. Errors only when the harness itself cannot go on; a scenario
/// that misses the bar returns a report with its failure.
pub async fn run(scenario: &Scenario, seed: u64) -> Result<Report> {
    let mut rng = StdRng::seed_from_u64(seed);
    let window_ms = u64::try_from(scenario.window.as_millis()).unwrap_or(u64::MAX);
    let struck_after = Duration::from_millis(rng.random_range(0..=window_ms));
    let prefix = namespace_prefix(&scenario.name);
    let mut c = Fixture::start(scenario.kind, &prefix, &scenario.spec).await?;
    c.wait_ready(Duration::from_secs(240)).await?;
    let before = c.write_keys("pre", 1000).await?;
    let writer = c.start_writer("w").await?;
    wait_acks(&writer, 50).await?;
    let mut more = Vec::new();
    for i in 1..scenario.writers {
        more.push(c.start_writer(&format!("w{i}")).await?);
    }
    let sentinel_client = c.start_sentinel_client().await?;

    let spreads_before = spreads(&c).await;
    let started = Instant::now();
    c.apply(&scenario.operation).await?;
    tokio::time::sleep(struck_after).await;
    let struck = Instant::now();
    strike(&mut c, &scenario.fault).await?;
    let fault_ended = Instant::now();

    let mut failure = None;
    let ready = c.wait_done(Duration::from_secs(600)).await;
    let ready_after = fault_ended.elapsed();
    if let Err(e) = ready {
        failure = Some(format!("not Ready after the fault: {e}"));
    }
    // Writes again for a moment once the object is back, so the writer proves it serves.
    if failure.is_none()
        && let Err(e) = wait_acks(&writer, 50).await
    {
        failure = Some(format!("no writes after the recovery: {e}"));
    }
    let spread_failovers = spreads(&c).await.saturating_sub(spreads_before);
    let sentinel_client_failed = match sentinel_client {
        Some(py) => c.finish_sentinel_client(py, &scenario.name).await,
        None => None,
    };
    let mut acks = writer.stop().await;
    for other in more {
        acks.merge(other.stop().await);
    }
    let plain_loss_allowed = scenario
        .fault
        .valkey_alone_may_lose_writes(scenario.persistence());
    let lost = losses(&c, &before, &acks).await?;
    let (plain_lost, replicated_lost) = (lost.plain.len(), lost.replicated.len());
    let check_failed = c.check().await;
    let check_ok = check_failed.is_none();
    if failure.is_none() {
        failure = bar(&lost, plain_loss_allowed, check_failed, &acks);
    }
    if failure.is_none() {
        failure = lost_after(&lost, &acks, &scenario.fault, struck);
    }
    if failure.is_none() {
        failure = sentinel_client_failed;
    }
    eprintln!(
        "chaos {}: operation {} started {:?} ago",
        scenario.name,
        scenario.operation,
        started.elapsed()
    );
    Ok(Report {
        scenario: format!(
            "{} ({}; {})",
            scenario.name, scenario.operation, scenario.fault
        ),
        seed,
        struck_after,
        plain_acked: acks.plain.len() + before.len(),
        plain_lost,
        replicated_acked: acks.replicated.len(),
        replicated_lost,
        refused: acks.refused,
        longest_gap: acks.longest_gap,
        gaps: acks
            .gaps
            .iter()
            .map(|(ended, gap)| (since(struck, *ended), *gap))
            .collect(),
        spread_failovers,
        ready_after,
        check_ok,
        plain_loss_allowed,
        failure,
    })
}

/// The operator's `SpreadingPrimaries` moves in the test namespace so far, by their Events: a
/// repeated Event is one series, counted by its `series.count` (0 when they cannot be read: the
/// figure is informative, not a verdict).
async fn spreads(c: &Fixture) -> usize {
    let listed = c
        .ns()
        .kubectl(&[
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.reason} {.series.count}{\"\\n\"}{end}",
        ])
        .await;
    listed.map_or(0, |events| spread_count(&events))
}

/// `reason [series count]` lines → the `SpreadingPrimaries` occurrences.
fn spread_count(events: &str) -> usize {
    events
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("SpreadingPrimaries"))
                .then(|| words.next().and_then(|n| n.parse().ok()).unwrap_or(1))
        })
        .sum()
}

/// Seconds from `from` to `to`, negative when `to` came first.
fn since(from: Instant, to: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(after) => after.as_secs_f64(),
        None => -from.duration_since(to).as_secs_f64(),
    }
}

/// The test namespace's prefix: the scenario's name as a DNS label. `replication.` is shortened:
/// a namespace's name (`e2e-<prefix>-<6 letters>`) has at most 63 characters.
fn namespace_prefix(scenario: &str) -> String {
    let name = scenario.replacen("replication.", "repl.", 1);
    format!("chaos-{}", name.replace('.', "-"))
}

/// The verdict on the losses and on the consistency check (why it failed, if it did); `None`
/// when the bar is met.
fn bar(
    lost: &Losses,
    plain_loss_allowed: bool,
    check_failed: Option<String>,
    acks: &Acks,
) -> Option<String> {
    if !lost.replicated.is_empty() {
        return Some(format!(
            "{} of {} WAIT-acknowledged writes lost ({})",
            lost.replicated.len(),
            acks.replicated.len(),
            Losses::named(&lost.replicated)
        ));
    }
    if !lost.plain.is_empty() && !plain_loss_allowed {
        return Some(format!(
            "{} of {} acknowledged writes lost where Valkey alone loses none ({})",
            lost.plain.len(),
            acks.plain.len(),
            Losses::named(&lost.plain)
        ));
    }
    check_failed
}

/// Writes a restarted server acknowledged after it came back are not Valkey's own asynchronous
/// replication's to lose (it loses only what was acknowledged and not yet sent before the
/// crash): losing them is the operator's doing. Said for the faults that restart a server in
/// place; a margin of a second covers acknowledgements in flight when it was killed.
fn lost_after(lost: &Losses, acks: &Acks, fault: &Fault, struck: Instant) -> Option<String> {
    let restarts = match fault {
        Fault::RestartPrimaryInPlace => true,
        Fault::OperatorHeldDown { during, .. } => **during == Fault::RestartPrimaryInPlace,
        _ => false,
    };
    if !restarts {
        return None;
    }
    let after: Vec<String> = lost
        .plain
        .iter()
        .filter(|key| {
            acks.acked_at
                .get(*key)
                .is_some_and(|at| *at > struck + Duration::from_secs(1))
        })
        .cloned()
        .collect();
    (!after.is_empty()).then(|| {
        format!(
            "{} writes acknowledged after the primary was restarted were lost ({})",
            after.len(),
            Losses::named(&after)
        )
    })
}

async fn wait_acks(writer: &Writer, n: usize) -> Result<()> {
    crate::cluster::wait_writes(writer, n, Duration::from_secs(60)).await
}

/// The member that is a primary now, its pod, and the Kubernetes node and zone it runs on.
struct Target {
    pod: String,
    node: String,
    zone: String,
    /// Pods of the primary's replicas, and their zones.
    replicas: Vec<String>,
    replica_zones: Vec<String>,
    shard: Option<String>,
}

async fn primary_target(c: &ClusterFixture) -> Result<Target> {
    let primary = c.member_with_role(Role::Primary).await?;
    target_of(c, &primary).await
}

async fn target_of(c: &ClusterFixture, primary: &ValkeyNode) -> Result<Target> {
    let status = primary.status.clone().unwrap_or_default();
    let pod = status.pod_name.clone().unwrap_or_default();
    let node = status.node_name.clone().unwrap_or_default();
    let zones = c.zones().await?;
    let zone = zones
        .get(&primary.metadata.name.clone().unwrap_or_default())
        .cloned()
        .unwrap_or_default();
    let shard = shard_of(primary);
    let mates: Vec<ValkeyNode> = c
        .nodes()
        .await?
        .into_iter()
        .filter(|n| shard_of(n) == shard && n.metadata.name != primary.metadata.name)
        .collect();
    let replica_zones = mates
        .iter()
        .filter_map(|n| zones.get(n.metadata.name.as_deref()?).cloned())
        .collect();
    let replicas = mates
        .into_iter()
        .filter_map(|n| n.status?.pod_name)
        .collect();
    Ok(Target {
        pod,
        node,
        zone,
        replicas,
        replica_zones,
        shard,
    })
}

fn shard_of(node: &ValkeyNode) -> Option<String> {
    node.metadata
        .labels
        .as_ref()?
        .get("valkey.io/shard")
        .cloned()
}

/// Injects the fault, holds it for its duration and undoes it; returns when it is over.
async fn strike(c: &mut Fixture, fault: &Fault) -> Result<()> {
    let ns = c.ns().name.clone();
    match fault {
        Fault::None => Ok(()),
        Fault::KillClusterController => c.restart_cluster_controller().await,
        // Over once the pod is gone: until then the status may still say Ready, and the
        // recovery wait could end before the fault has shown.
        Fault::DeletePrimaryPod => {
            let pod = c.primary_pod().await?;
            c.ns()
                .kubectl(&["delete", "pod", &pod, "--timeout=180s"])
                .await
                .map(|_| ())
        }
        Fault::IsolatePrimary { seconds } => {
            let primary = Endpoint::pod(&ns, &c.primary_pod().await?);
            let cut = faults::partition(std::slice::from_ref(&primary), &[Endpoint::Rest]).await?;
            let host = faults::partition(&[primary], &[Endpoint::Host]).await?;
            hold(*seconds).await;
            cut.undo().await?;
            host.undo().await
        }
        Fault::PausePrimary { seconds } => {
            let paused = faults::pause(&ns, &c.primary_pod().await?).await?;
            hold(*seconds).await;
            paused.undo().await
        }
        Fault::RestartPrimaryInPlace => {
            faults::kill(&ns, &c.primary_pod().await?, Some("valkey")).await
        }
        Fault::RestartApiServer => faults::restart_apiserver(false).await,
        Fault::DeletePasswordSecret => delete_password_secret(c).await,
        Fault::DeleteSentinelPod => {
            let pods = c
                .ns()
                .kubectl(&["get", "pods", "-l", "valkey.io/sentinel", "-o", "name"])
                .await?;
            let pod = pods
                .lines()
                .next()
                .map(|l| l.trim_start_matches("pod/").to_owned())
                .ok_or_else(|| E2eError::Check("no Sentinel pod".to_owned()))?;
            c.ns()
                .kubectl(&["delete", "pod", &pod, "--timeout=180s"])
                .await
                .map(|_| ())
        }
        Fault::OperatorHeldDown { seconds, during } => {
            let held = c.hold_cluster_controller()?;
            let started = Instant::now();
            Box::pin(strike(c, during)).await?;
            hold(seconds.saturating_sub(started.elapsed().as_secs())).await;
            drop(held);
            Ok(())
        }
        Fault::PartialPartition { .. }
        | Fault::PartitionZone { .. }
        | Fault::PartialZonePartition { .. }
        | Fault::StaleReplicaThenPausedPrimary { .. }
        | Fault::MemberOutWhileAnotherPrimaryRestarts { .. }
        | Fault::StopNode { .. }
        | Fault::DrainDuringFullSync => strike_cluster(c.cluster()?, fault).await,
    }
}

async fn hold(seconds: u64) {
    tokio::time::sleep(Duration::from_secs(seconds)).await;
}

/// [`strike`] for the faults only a cluster has (see [`Fault::applies_to`]).
async fn strike_cluster(c: &ClusterFixture, fault: &Fault) -> Result<()> {
    let ns = c.ns.name.clone();
    match fault {
        Fault::PartialPartition { seconds } => {
            let t = primary_target(c).await?;
            let replica =
                t.replicas.first().cloned().ok_or_else(|| {
                    E2eError::Check("a partial partition needs a replica".to_owned())
                })?;
            let primary = Endpoint::pod(&ns, &t.pod);
            let cut = faults::partition(
                std::slice::from_ref(&primary),
                &[Endpoint::Host, Endpoint::pod(&ns, &replica)],
            )
            .await?;
            hold(*seconds).await;
            cut.undo().await
        }
        Fault::PartitionZone { seconds } => {
            let t = primary_target(c).await?;
            let zone = Endpoint::Zone(t.zone.clone());
            let cut = faults::partition(std::slice::from_ref(&zone), &[Endpoint::Rest]).await?;
            let host = faults::partition(&[zone], &[Endpoint::Host]).await?;
            hold(*seconds).await;
            cut.undo().await?;
            host.undo().await
        }
        Fault::StopNode { how, seconds } => {
            let t = primary_target(c).await?;
            let stopped = faults::stop_node(&t.node, *how).await?;
            hold(*seconds).await;
            stopped.undo().await
        }
        Fault::PartialZonePartition { seconds } => {
            let t = primary_target(c).await?;
            let replica_zone = t
                .replica_zones
                .iter()
                .find(|z| **z != t.zone)
                .cloned()
                .ok_or_else(|| {
                    E2eError::Check("the primary's replica shares its zone".to_owned())
                })?;
            let cut = faults::partition(
                &[Endpoint::Zone(t.zone.clone())],
                &[Endpoint::Zone(replica_zone), Endpoint::Host],
            )
            .await?;
            hold(*seconds).await;
            cut.undo().await
        }
        Fault::StaleReplicaThenPausedPrimary {
            stale_seconds,
            paused_seconds,
        } => {
            let t = primary_target(c).await?;
            let replica = t
                .replicas
                .first()
                .cloned()
                .ok_or_else(|| E2eError::Check("a stale replica needs a replica".to_owned()))?;
            let cut = faults::partition(
                &[Endpoint::pod(&ns, &replica)],
                &[Endpoint::pod(&ns, &t.pod)],
            )
            .await?;
            hold(*stale_seconds).await;
            let paused = faults::pause(&ns, &t.pod).await?;
            hold(*paused_seconds).await;
            paused.undo().await?;
            cut.undo().await
        }
        Fault::MemberOutWhileAnotherPrimaryRestarts { seconds } => {
            member_out_while_another_primary_restarts(c, *seconds).await
        }
        Fault::DrainDuringFullSync => drain_during_full_sync(c).await,
        other => Err(E2eError::Check(format!("{other} is a fault of both kinds"))),
    }
}

/// A replica of one shard is cut from everyone; meanwhile another shard's primary restarts in
/// place, and that shard must be whole again (its replica in sync with it) before the cut ends.
async fn member_out_while_another_primary_restarts(c: &ClusterFixture, seconds: u64) -> Result<()> {
    let ns = c.ns.name.clone();
    let started = std::time::Instant::now();
    let out_shard = primary_target(c).await?;
    let out =
        out_shard.replicas.first().cloned().ok_or_else(|| {
            E2eError::Check("the member to cut off needs a replica to be".to_owned())
        })?;
    let cut = faults::partition(
        &[Endpoint::pod(&ns, &out)],
        &[Endpoint::Rest, Endpoint::Host],
    )
    .await?;
    // Another shard's primary, by Valkey's own word.
    let mut other = None;
    for node in c.nodes().await? {
        if shard_of(&node) == out_shard.shard {
            continue;
        }
        let Some(ip) = crate::cluster::ready_pod_ip(&node) else {
            continue;
        };
        let info = c.command_on(&ip, &["INFO", "replication"]).await?;
        if info.lines().any(|l| l.trim() == "role:master") {
            other = Some(node);
            break;
        }
    }
    let other = other.ok_or_else(|| E2eError::Check("no primary in another shard".to_owned()))?;
    let target = target_of(c, &other).await?;
    faults::kill(&ns, &target.pod, Some("valkey")).await?;
    let replica = target
        .replicas
        .first()
        .cloned()
        .ok_or_else(|| E2eError::Check("the restarted shard has no replica".to_owned()))?;
    let deadline = Duration::from_secs(seconds).saturating_sub(started.elapsed());
    let repaired = wait_until(
        deadline,
        &format!("{replica} in sync again while {out} is cut off"),
        || async {
            let pod = c.ns.pod(&replica).await?;
            let Some(ip) = crate::pod_ip(&pod) else {
                return Ok(Poll::NotYet("no pod IP".into()));
            };
            let info = c
                .command_on(&ip, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            Ok(if info.contains("master_link_status:up") {
                Poll::Ready(())
            } else {
                Poll::NotYet(info.lines().take(6).collect::<Vec<_>>().join(" "))
            })
        },
    )
    .await;
    let left = Duration::from_secs(seconds).saturating_sub(started.elapsed());
    tokio::time::sleep(left).await;
    cut.undo().await?;
    repaired
}

/// The primary's replica restarts and full-syncs from it, slowed to about 15 s
/// (`rdb-key-save-delay` on the primary), and `kubectl drain` empties the primary's node
/// meanwhile. The primary's pod must still be there, not terminating, for as long as its replica
/// is syncing: evicting it then would leave the shard's data only in a half-loaded replica (or
/// nowhere, without persistence). Once the replica is in sync the drain must finish.
async fn drain_during_full_sync(c: &ClusterFixture) -> Result<()> {
    let ns = c.ns.name.clone();
    let t = primary_target(c).await?;
    let replica = t
        .replicas
        .first()
        .cloned()
        .ok_or_else(|| E2eError::Check("a full sync needs a replica".to_owned()))?;
    let ip_of = |pod: String| async move {
        let pod = c.ns.pod(&pod).await?;
        crate::pod_ip(&pod).ok_or_else(|| E2eError::Check("a pod without an IP".to_owned()))
    };
    let primary_ip = ip_of(t.pod.clone()).await?;
    let keys: u64 = c
        .admin_command_on(&primary_ip, &["DBSIZE"])
        .await?
        .trim()
        .parse()
        .unwrap_or(1);
    let delay_us = (15_000_000 / keys.max(1)).clamp(100, 1_000_000);
    c.admin_command_on(
        &primary_ip,
        &["CONFIG", "SET", "rdb-key-save-delay", &delay_us.to_string()],
    )
    .await?;
    faults::kill(&ns, &replica, Some("valkey")).await?;
    let replica_ip = ip_of(replica.clone()).await?;
    let syncing = || async {
        let info = c
            .admin_command_on(&replica_ip, &["INFO", "replication"])
            .await
            .unwrap_or_default();
        !info.contains("master_link_status:up") || info.contains("master_sync_in_progress:1")
    };
    wait_until(
        Duration::from_secs(60),
        &format!("{replica} in a full sync from {}", t.pod),
        || async {
            let info = c
                .admin_command_on(&replica_ip, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            Ok(if info.contains("master_sync_in_progress:1") {
                Poll::Ready(())
            } else {
                Poll::NotYet(info.lines().take(8).collect::<Vec<_>>().join(" "))
            })
        },
    )
    .await?;
    let uid = c.ns.pod(&t.pod).await?.metadata.uid;
    let node = t.node.clone();
    let _uncordon = Uncordon(node.clone());
    let drain = tokio::spawn(async move {
        crate::kubectl(&[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=240s",
        ])
        .await
    });
    let watched = Instant::now();
    while syncing().await {
        let pod =
            c.ns.api::<k8s_openapi::api::core::v1::Pod>()
                .get_opt(&t.pod)
                .await?;
        let evicted =
            pod.is_none_or(|p| p.metadata.uid != uid || p.metadata.deletion_timestamp.is_some());
        if evicted {
            drain.abort();
            return Err(E2eError::Check(format!(
                "{} was evicted {:.1?} into the drain while its replica {replica} was still in                  its full sync",
                t.pod,
                watched.elapsed()
            )));
        }
        if watched.elapsed() > Duration::from_secs(180) {
            drain.abort();
            return Err(E2eError::Check(format!(
                "{replica} was still syncing after 180 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "drain: {replica} in sync {:.1?} into the drain; {} was kept until then",
        watched.elapsed(),
        t.pod
    );
    drain
        .await
        .map_err(|e| E2eError::Check(format!("the drain task: {e}")))?
        .map(|_| ())
}

/// Uncordons a node when dropped: a drained node takes pods again after the scenario.
struct Uncordon(String);

impl Drop for Uncordon {
    fn drop(&mut self) {
        let _ = std::process::Command::new(crate::kubectl_program())
            .args(["uncordon", &self.0])
            .env("KUBECONFIG", crate::kubeconfig_path().unwrap_or_default())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Deletes the Secret of the clients' password and waits until it is back: with the same
/// password, or the scenario fails (every client holding the old one would be refused).
async fn delete_password_secret(c: &Fixture) -> Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let name = c.password_secret().await?;
    let api = c.ns().api::<Secret>();
    let password = |secret: Option<Secret>| {
        secret
            .and_then(|s| s.data)
            .and_then(|d| d.get("password").cloned())
            .map(|b| b.0)
    };
    let before = password(api.get_opt(&name).await?);
    api.delete(&name, &kube::api::DeleteParams::default())
        .await?;
    let back = wait_until(
        Duration::from_secs(60),
        &format!("Secret {name} created again"),
        || async {
            Ok(match api.get_opt(&name).await? {
                Some(secret) => Poll::Ready(password(Some(secret))),
                None => Poll::NotYet("not yet".into()),
            })
        },
    )
    .await?;
    crate::check(
        back == before,
        format!("Secret {name} came back with another password: every client would be refused"),
    )
}

/// What reading every acknowledged write back found missing.
struct Losses {
    /// Every acknowledged key missing or changed (plain and WAIT-acknowledged).
    plain: Vec<String>,
    /// Those of them WAIT had confirmed.
    replicated: Vec<String>,
}

impl Losses {
    /// The first few of `keys`, for a report a person can follow up on (`GET` them, find their
    /// slot, read the servers' logs around their write).
    fn named(keys: &[String]) -> String {
        const SHOWN: usize = 5;
        let shown = keys
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if keys.len() > SHOWN {
            format!("{shown}, …")
        } else {
            shown
        }
    }
}

/// Reads every acknowledged write back.
async fn losses(c: &Fixture, before: &BTreeMap<String, String>, acks: &Acks) -> Result<Losses> {
    let missing = c.missing(before.iter().chain(acks.plain.iter())).await?;
    let replicated = missing
        .iter()
        .filter(|k| acks.replicated.contains_key(*k))
        .cloned()
        .collect();
    Ok(Losses {
        plain: missing,
        replicated,
    })
}

/// Runs scenarios, as many at once as the heavy-test pool allows (global ones alone), and returns
/// their reports; `recorder` keeps each one as it finishes (see [`results`]).
pub async fn run_all(
    scenarios: &[Scenario],
    seed: u64,
    recorder: Option<&results::Recorder>,
) -> Vec<Report> {
    let keep = |name: &str, report: &Report| {
        eprintln!("chaos: {}", report.row());
        if let Some(recorder) = recorder {
            recorder.record(name, report);
        }
    };
    let mut reports = Vec::new();
    let (global, local): (Vec<&Scenario>, Vec<&Scenario>) =
        scenarios.iter().partition(|s| s.fault.is_global());
    let mut set = tokio::task::JoinSet::new();
    for (i, scenario) in local.into_iter().enumerate() {
        let scenario = scenario.clone();
        let seed = seed.wrapping_add(i as u64);
        set.spawn(async move { (scenario.clone(), run(&scenario, seed).await, seed) });
    }
    while let Some(joined) = set.join_next().await {
        if let Ok((scenario, result, seed)) = joined {
            let report = report_or_error(&scenario, result, seed);
            keep(&scenario.name, &report);
            reports.push(report);
        }
    }
    for (i, scenario) in global.into_iter().enumerate() {
        let seed = seed.wrapping_add(1000 + i as u64);
        let result = run(scenario, seed).await;
        let report = report_or_error(scenario, result, seed);
        keep(&scenario.name, &report);
        reports.push(report);
    }
    reports
}

fn report_or_error(scenario: &Scenario, result: Result<Report>, seed: u64) -> Report {
    result.unwrap_or_else(|e| Report {
        scenario: format!(
            "{} ({}; {})",
            scenario.name, scenario.operation, scenario.fault
        ),
        seed,
        struck_after: Duration::ZERO,
        plain_acked: 0,
        plain_lost: 0,
        replicated_acked: 0,
        replicated_lost: 0,
        refused: 0,
        longest_gap: Duration::ZERO,
        gaps: Vec::new(),
        spread_failovers: 0,
        ready_after: Duration::ZERO,
        check_ok: false,
        plain_loss_allowed: false,
        failure: Some(format!("the scenario could not run: {e}")),
    })
}

/// Prints the table and fails when any scenario missed the bar.
pub fn verdict(reports: &[Report]) -> Result<()> {
    let mut table = Report::header();
    for r in reports {
        table.push('\n');
        table.push_str(&r.row());
    }
    eprintln!("\n{table}\n");
    let dir = crate::repo_root().join("target/chaos");
    let _ = std::fs::create_dir_all(&dir);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = std::fs::write(dir.join(format!("{stamp}.md")), &table);
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.scenario.as_str())
        .collect();
    check(
        failed.is_empty(),
        format!("{} scenario(s) missed the bar: {failed:?}", failed.len()),
    )
}

/// Whether scenario `name` is kept by `CHAOS_FILTER`: it contains one of the filter's
/// comma-separated parts (`idle.,roll.` keeps both operations), every part written with a
/// leading `+` and none written with a leading `-` (`scale-out.,-on-8.0` keeps the scale-out on
/// Valkey 9.1 only, `scale-out.,+on-8.0` on 8.0 only). Without plain parts, every name that
/// passes the `+` and `-` parts is kept.
pub fn matches_filter(name: &str, filter: &str) -> bool {
    let parts: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let marked = |mark: char| -> Vec<&str> {
        parts
            .iter()
            .filter_map(|part| part.strip_prefix(mark))
            .collect()
    };
    let wanted: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|part| !part.starts_with(['+', '-']))
        .collect();
    (wanted.is_empty() || wanted.iter().any(|part| name.contains(part)))
        && marked('+').iter().all(|part| name.contains(part))
        && !marked('-').iter().any(|part| name.contains(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_count_each_event_and_each_repeat_of_a_series() {
        let events = "Forming \nSpreadingPrimaries \nSpreadingPrimaries 3\nClusterReady \n";
        assert_eq!(spread_count(events), 4);
        assert_eq!(spread_count(""), 0);
    }

    #[test]
    fn a_filter_keeps_names_containing_any_of_its_parts() {
        assert!(matches_filter("roll.delete-primary", ""));
        assert!(matches_filter("roll.delete-primary", "idle., roll."));
        assert!(matches_filter("idle.none.on-8.0", "idle.,roll."));
        assert!(!matches_filter("scale-out.none", "idle.,roll."));
        assert!(matches_filter("scale-out.none", "scale-out.,-on-8.0"));
        assert!(!matches_filter(
            "scale-out.none.on-8.0",
            "scale-out.,-on-8.0"
        ));
        assert!(!matches_filter("idle.none.on-8.0", "-on-8.0"));
        assert!(matches_filter("idle.none", "-on-8.0"));
        assert!(matches_filter(
            "scale-in.none.on-8.0",
            "scale-out.,scale-in.,+on-8.0"
        ));
        assert!(!matches_filter(
            "scale-in.none",
            "scale-out.,scale-in.,+on-8.0"
        ));
        assert!(!matches_filter(
            "roll.none.on-8.0",
            "scale-out.,scale-in.,+on-8.0"
        ));
    }
}
