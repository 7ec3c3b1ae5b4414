//! Resharding, side by side: the same keys in three identical 3-shard clusters, moved to 4 shards
//! and back to 3 three ways: (a) the operator (`spec.shards`), (b) `valkey-cli --cluster
//! add-node` + `rebalance` (and `rebalance` + `del-node` back) on a cluster no operator acts on,
//! (c) the same slot moves the operator made, sent straight to the servers ([`direct`]), the
//! limit. Every way is timed from the request to the moment every server agrees on the new
//! layout, then every key is read back and compared with its value (untimed).
//!
//! The benchmark (`tests/bench.rs`) runs it at full size and writes `bench/results/` and
//! `docs/benchmarks.md` ([`report`]); a tiny profile runs in the suite for correctness only.

pub mod bare;
pub mod cli;
pub mod data;
pub mod direct;
pub mod report;
pub mod view;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use serde::Serialize;
use valkey_api::v1alpha1::{ClusterState, ValkeyNode};

use self::bare::{BareCluster, Member};
use self::data::Dataset;
use crate::bench::env_or;
use crate::cluster::ClusterFixture;
use crate::{E2eError, Poll, Result, check, valkey_cmd, wait_until};

/// The operator's cluster name: its members are `reshard-<shard>-0`.
const NAME: &str = "reshard";
/// Longest any one way may take to reshard (the default size on Valkey 8 included).
const RESHARD: Duration = Duration::from_secs(1800);
/// How often the clocks look.
const TICK: Duration = Duration::from_millis(50);

/// What to run: the data set, the Valkey versions, and which extra runs.
#[derive(Debug, Clone)]
pub struct Profile {
    pub keys: u64,
    pub value_bytes: u64,
    pub seed: u64,
    pub images: Vec<String>,
    /// Also back from 4 shards to 3.
    pub both_directions: bool,
    /// valkey-cli's default, key by key (on Valkey 8 the only way it has, so always run there).
    pub cli_legacy: bool,
    /// On Valkey 9, `valkey-cli rebalance --cluster-use-atomic-slot-migration` (after the
    /// default when both run).
    pub cli_atomic: bool,
    /// How many times the operator and the direct reference each run every direction; each
    /// figure is the median run's. A move of a second or two varies by a third from one run to
    /// the next on a shared 2-core machine, more than the goals' margins. valkey-cli runs once
    /// (its goal is a ratio of several times).
    pub rounds: usize,
}

impl Profile {
    /// The benchmark's sizes: `BENCH_KEYS` keys (default 1 Mi) of `BENCH_VALUE_BYTES` on average
    /// (default 1 KiB, so 1 GiB of values), `BENCH_SEED`, `BENCH_VERSIONS` (default `9.1,8.0`).
    pub fn from_env() -> Self {
        let versions = std::env::var("BENCH_VERSIONS").unwrap_or_else(|_| "9.1,8.0".into());
        Self {
            keys: env_or("BENCH_KEYS", 1 << 20),
            value_bytes: env_or("BENCH_VALUE_BYTES", 1024),
            seed: env_or("BENCH_SEED", 1),
            images: versions
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| format!("valkey/valkey:{v}"))
                .collect(),
            both_directions: true,
            cli_legacy: true,
            cli_atomic: true,
            rounds: env_or("BENCH_ROUNDS", 3usize).max(1),
        }
    }

    /// A few thousand keys on Valkey 9.1, for the suite: it proves the harness still works.
    /// valkey-cli moves slots atomically here: key by key it takes over a minute per direction
    /// whatever the size (it saves the cluster configuration a few times for each of the 4096
    /// slots it moves one at a time).
    pub fn tiny() -> Self {
        Self {
            keys: 3000,
            value_bytes: 512,
            seed: 1,
            images: vec!["valkey/valkey:9.1".into()],
            both_directions: true,
            cli_legacy: false,
            cli_atomic: true,
            rounds: 1,
        }
    }

    pub fn dataset(&self) -> Dataset {
        Dataset::new(self.keys, self.value_bytes, self.seed)
    }
}

/// One way of resharding, measured and checked.
#[derive(Debug, Clone, Serialize)]
pub struct WayResult {
    /// `operator`, `valkey-cli`, `valkey-cli-atomic` or `direct`.
    pub way: String,
    /// What was run, in words.
    pub how: String,
    /// From the request to every server agreeing on the new layout.
    pub seconds: f64,
    /// From the request to the new node's pod ready (scaling out only).
    pub new_node_ready_seconds: Option<f64>,
    /// `seconds` less the new node's start: the resharding itself.
    pub moving_seconds: f64,
    pub moved_slots: usize,
    pub moved_keys: u64,
    /// Key and value bytes of the moved keys.
    pub moved_bytes: u64,
    /// `moved_bytes` (in 10^6 bytes) per `moving_seconds`.
    pub mb_per_s: f64,
    pub keys_before: u64,
    pub keys_after: u64,
    /// Keys read back with their value after the move, and those that were not.
    pub keys_intact: u64,
    pub keys_lost: u64,
    /// Primaries serving slots after the move.
    pub shards_serving: usize,
    /// Anything worth knowing about the run (retried jobs, for example).
    pub notes: Vec<String>,
    /// `seconds` of every run of this way, in the order they ran, when it ran more than once
    /// (the figures above are the median run's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_seconds: Vec<f64>,
}

impl WayResult {
    /// The run with the median `seconds` (the lower middle of an even count), with every run's
    /// seconds; `None` for no run.
    pub fn median(mut runs: Vec<WayResult>) -> Option<WayResult> {
        let all: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
        runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let mut median = runs.into_iter().nth(all.len().saturating_sub(1) / 2)?;
        if all.len() > 1 {
            median.runs_seconds = all;
        }
        Some(median)
    }
}

/// One direction (3 → 4 or 4 → 3) on one version, every way.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    pub from: usize,
    pub to: usize,
    pub ways: Vec<WayResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionResult {
    pub image: String,
    pub valkey_version: String,
    pub steps: Vec<StepResult>,
}

/// The keys every cluster holds, and how many keys and bytes fall in each slot.
#[derive(Clone, Copy)]
struct Keys<'a> {
    data: &'a Dataset,
    per_slot: &'a [(u64, u64)],
}

/// What the clock saw of one way.
struct Measured {
    seconds: Duration,
    new_node_ready: Option<Duration>,
    notes: Vec<String>,
}

/// DBSIZE summed over `ips`.
async fn key_count(ips: &[String]) -> Result<u64> {
    let mut total = 0;
    for ip in ips {
        let mut conn = data::bulk_connection(ip).await?;
        total += valkey_cmd(&mut conn, &["DBSIZE"])
            .await?
            .parse::<u64>()
            .map_err(|e| E2eError::Check(format!("DBSIZE of {ip}: {e}")))?;
    }
    Ok(total)
}

/// Waits until the servers at `ips` agree on the slots (on `expected` when given), polling
/// at [`TICK`]: the end of every way's clock.
async fn until_agreed(ips: &[String], expected: Option<&[Option<usize>]>) -> Result<()> {
    let deadline = Instant::now() + RESHARD;
    loop {
        let wanted = match expected {
            Some(e) => Some(e.to_vec()),
            None => bare::layout(ips).await.ok(),
        };
        let last = match &wanted {
            Some(w) => match bare::agreed(ips, w).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(why)) => why,
                Err(e) => e.to_string(),
            },
            None => "a slot served by no shard".into(),
        };
        if Instant::now() > deadline {
            return Err(E2eError::Timeout {
                what: "every server agreeing on the slots".into(),
                after: RESHARD,
                last,
            });
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The operator's cluster and its members' addresses in shard order.
async fn operator_ips(a: &ClusterFixture, shards: usize) -> Result<Vec<String>> {
    let nodes = a.nodes().await?;
    (0..shards)
        .map(|shard| {
            let name = format!("{NAME}-{shard}-0");
            nodes
                .iter()
                .find(|n| n.name_any() == name)
                .and_then(crate::cluster::ready_pod_ip)
                .ok_or_else(|| E2eError::Check(format!("{name} is not ready")))
        })
        .collect()
}

/// (a): `spec.shards`, then Ready for the new generation and every server agreeing.
async fn operator_way(a: &ClusterFixture, from: usize, to: usize) -> Result<Measured> {
    let start = Instant::now();
    a.patch_spec(serde_json::json!({ "shards": to })).await?;
    let new_node = (to > from).then(|| format!("{NAME}-{}-0", to - 1));
    let mut new_node_ready = None;
    let deadline = start + RESHARD;
    loop {
        if let (Some(name), None) = (&new_node, new_node_ready) {
            let node = a.ns.api::<ValkeyNode>().get_opt(name).await?;
            if node.and_then(|n| n.status).is_some_and(|s| s.ready) {
                new_node_ready = Some(start.elapsed());
            }
        }
        let cluster = a.api().get(NAME).await?;
        let ready = cluster.status.as_ref().is_some_and(|s| {
            s.state == Some(ClusterState::Ready)
                && s.observed_generation == cluster.metadata.generation
                && usize::try_from(s.ready_shards).ok() == Some(to)
                && usize::try_from(s.shards).ok() == Some(to)
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            return Err(E2eError::Timeout {
                what: format!("{NAME} Ready with {to} shards"),
                after: RESHARD,
                last: format!("{:?}", cluster.status),
            });
        }
        tokio::time::sleep(TICK).await;
    }
    until_agreed(&operator_ips(a, to).await?, None).await?;
    Ok(Measured {
        seconds: start.elapsed(),
        new_node_ready,
        notes: Vec::new(),
    })
}

/// A new bare node, ready: created, then its pod started.
async fn new_bare_node(b: &mut BareCluster, start: Instant) -> Result<(Member, Duration)> {
    let name = b.create_node().await?;
    let member = b.wait_node(&name).await?;
    Ok((member, start.elapsed()))
}

/// (b) out: a new node, `add-node`, `check` until the cluster agrees (rebalance refuses a cluster
/// that does not), `rebalance --cluster-use-empty-primaries`.
async fn cli_out(b: &mut BareCluster, cli: &std::path::PathBuf, atomic: bool) -> Result<Measured> {
    let start = Instant::now();
    let (member, ready) = new_bare_node(b, start).await?;
    let entry = format!("{}:6379", b.entry()?.ip);
    let new = format!("{}:6379", member.ip);
    cli::run(cli, &["--cluster", "add-node", &new, &entry], RESHARD).await?;
    b.members.push(member);
    // rebalance refuses a cluster whose nodes do not agree yet, and balances only the nodes the
    // entry knows: wait until it knows the new one and the check passes.
    let deadline = Instant::now() + RESHARD;
    loop {
        let known = view::read(&b.entry()?.ip).await?;
        let joined = b
            .ips()
            .iter()
            .all(|ip| known.by_ip(ip).is_some_and(|n| n.primary));
        let checked = match cli::run(cli, &["--cluster", "check", &entry], RESHARD).await {
            Ok(_) if joined => break,
            Ok(_) => E2eError::Check("the entry does not know the new node yet".into()),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(checked);
        }
        tokio::time::sleep(TICK).await;
    }
    // A node that started alone takes a few seconds after joining to call the cluster up, and
    // refuses the keys MIGRATE brings until then (valkey-cli then stops half-way): wait for it.
    bare::wait_serving(&b.ips()).await?;
    let mut args = vec![
        "--cluster",
        "rebalance",
        entry.as_str(),
        "--cluster-use-empty-primaries",
    ];
    if atomic {
        args.push("--cluster-use-atomic-slot-migration");
    }
    cli::run(cli, &args, RESHARD).await?;
    until_agreed(&b.ips(), None).await?;
    Ok(Measured {
        seconds: start.elapsed(),
        new_node_ready: Some(ready),
        notes: Vec::new(),
    })
}

/// (b) in: `rebalance --cluster-weight <last>=0`, `del-node`, and the ValkeyNode deleted.
async fn cli_in(b: &mut BareCluster, cli: &std::path::PathBuf, atomic: bool) -> Result<Measured> {
    let start = Instant::now();
    let entry = format!("{}:6379", b.entry()?.ip);
    let leaving = b
        .members
        .last()
        .cloned()
        .ok_or_else(|| E2eError::Check("no member to remove".into()))?;
    let id = direct::shards(&b.ips())
        .await?
        .last()
        .map(|s| s.id.clone())
        .unwrap_or_default();
    let weight = format!("{id}=0");
    let mut args = vec![
        "--cluster",
        "rebalance",
        entry.as_str(),
        "--cluster-weight",
        weight.as_str(),
    ];
    if atomic {
        args.push("--cluster-use-atomic-slot-migration");
    }
    cli::run(cli, &args, RESHARD).await?;
    cli::run(cli, &["--cluster", "del-node", &entry, &id], RESHARD).await?;
    b.members.pop();
    b.delete_node(&leaving.name).await?;
    until_agreed(&b.ips(), None).await?;
    Ok(Measured {
        seconds: start.elapsed(),
        new_node_ready: None,
        notes: Vec::new(),
    })
}

/// (c): the operator's moves, replayed shard for shard. Out: a new node met by every member
/// first; in: the emptied node forgotten by the others and its ValkeyNode deleted.
async fn direct_way(
    c: &mut BareCluster,
    from: usize,
    to: usize,
    moves: &BTreeMap<(usize, usize), Vec<u16>>,
    expected: &[Option<usize>],
    atomic: bool,
) -> Result<Measured> {
    let start = Instant::now();
    let mut new_node_ready = None;
    if to > from {
        let (member, ready) = new_bare_node(c, start).await?;
        new_node_ready = Some(ready);
        c.meet(&member).await?;
        c.members.push(member);
        // The new node must know every peer (and they it) before slots can be sent its way.
        let ips = c.ips();
        wait_until(RESHARD, "the new node known to all", || {
            let ips = ips.clone();
            async move {
                for ip in &ips {
                    let known = view::read(ip).await?.nodes.len();
                    if known != ips.len() {
                        return Ok(Poll::NotYet(format!("{ip} knows {known}")));
                    }
                }
                Ok(Poll::Ready(()))
            }
        })
        .await?;
        // As for valkey-cli: the new node must call the cluster up before it takes slots.
        bare::wait_serving(&c.ips()).await?;
    }
    let shards = direct::shards(&c.ips()).await?;
    let mut notes = Vec::new();
    if atomic {
        let report = direct::migrate_atomic(&shards, moves).await?;
        notes.push(format!("{} MIGRATESLOTS jobs", report.jobs));
        notes.extend(
            report
                .unsuccessful
                .into_iter()
                .map(|u| format!("job retried: {u}")),
        );
    } else {
        direct::migrate_keys(&shards, moves).await?;
    }
    if to < from {
        // Wait for the emptied node to be seen empty everywhere, then forget it.
        until_agreed(&c.ips(), Some(expected)).await?;
        let leaving = c
            .members
            .pop()
            .ok_or_else(|| E2eError::Check("no member to remove".into()))?;
        let id = shards.last().map(|s| s.id.clone()).unwrap_or_default();
        for member in &c.members {
            let mut conn = data::bulk_connection(&member.ip).await?;
            valkey_cmd(&mut conn, &["CLUSTER", "FORGET", &id]).await?;
        }
        c.delete_node(&leaving.name).await?;
        until_agreed(&c.ips(), Some(expected)).await?;
    } else {
        until_agreed(&c.ips(), Some(expected)).await?;
    }
    Ok(Measured {
        seconds: start.elapsed(),
        new_node_ready,
        notes,
    })
}

/// Reads every key back and counts what the cluster at `ips` holds; fails when a key is lost
/// or a shard serves nothing.
async fn checked(
    way: &str,
    how: String,
    ips: &[String],
    keys: &Keys<'_>,
    moved: &[u16],
    keys_before: u64,
    measured: Measured,
) -> Result<WayResult> {
    let Keys { data, per_slot } = *keys;
    bare::wait_serving(ips).await?;
    let view = view::read(&ips[0]).await?;
    let readback = data::read_back(data, &view).await?;
    let keys_after = key_count(ips).await?;
    let serving = view.serving();
    let (moved_keys, moved_bytes) = moved.iter().fold((0, 0), |(k, b), slot| {
        let (keys, bytes) = per_slot[usize::from(*slot)];
        (k + keys, b + bytes)
    });
    let seconds = measured.seconds.as_secs_f64();
    let moving = seconds - measured.new_node_ready.map_or(0.0, |d| d.as_secs_f64());
    let result = WayResult {
        way: way.to_owned(),
        how,
        seconds,
        new_node_ready_seconds: measured.new_node_ready.map(|d| d.as_secs_f64()),
        moving_seconds: moving,
        moved_slots: moved.len(),
        moved_keys,
        moved_bytes,
        mb_per_s: if moving > 0.0 {
            moved_bytes as f64 / 1e6 / moving
        } else {
            0.0
        },
        keys_before,
        keys_after,
        keys_intact: readback.intact,
        keys_lost: readback.lost,
        shards_serving: serving,
        notes: measured.notes,
        runs_seconds: Vec::new(),
    };
    println!(
        "  {way}: {seconds:.1} s ({moving:.1} s moving), {} slots, {moved_keys} keys, {:.1} MB/s; keys {keys_before} -> {keys_after}, {} intact",
        moved.len(),
        result.mb_per_s,
        readback.intact
    );
    check(
        readback.lost == 0 && keys_after == data.keys,
        format!(
            "{way}: {} of {} keys lost or changed (e.g. {:?}); {keys_after} keys held",
            readback.lost, data.keys, readback.examples
        ),
    )?;
    check(
        serving == ips.len(),
        format!("{way}: {serving} primaries serve slots, not {}", ips.len()),
    )?;
    Ok(result)
}

/// The slots that changed shard between two layouts.
fn moved_slots(before: &[Option<usize>], after: &[Option<usize>]) -> Result<Vec<u16>> {
    let mut slots: Vec<u16> = view::moves(before, after)?
        .into_values()
        .flatten()
        .collect();
    slots.sort_unstable();
    Ok(slots)
}

/// The valkey version the server at `ip` reports.
async fn valkey_version(ip: &str) -> Result<String> {
    let mut conn = data::bulk_connection(ip).await?;
    let info = valkey_cmd(&mut conn, &["INFO", "server"]).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned())
}

/// The major version an image's tag names (`valkey/valkey:9.1` → 9).
pub fn major_version(image: &str) -> Option<u32> {
    image.rsplit(':').next()?.split('.').next()?.parse().ok()
}

/// A bus port for a bare cluster: above the range the operator chooses from (20000-29999).
fn bare_bus_port() -> u16 {
    use rand::Rng;
    rand::rng().random_range(30000..32000)
}

/// Every way, both directions (as the profile says), on `image`.
pub async fn run(profile: &Profile, image: &str) -> Result<VersionResult> {
    let data = profile.dataset();
    let per_slot = data.per_slot();
    let keys = Keys {
        data: &data,
        per_slot: &per_slot,
    };
    // Valkey 9 moves slots atomically (`CLUSTER MIGRATESLOTS`), as the operator does there.
    let atomic = major_version(image).is_some_and(|m| m >= 9);
    let cli = cli::cli_for(image);
    println!(
        "{image}: {} keys, {} bytes per value on average",
        data.keys, data.value_bytes
    );

    // Three identical clusters: the operator's, then two bare ones of the same members' spec.
    let a = ClusterFixture::prepare("reshard-op", NAME).await?;
    a.apply(&format!(
        "{{shards: 3, replicas: 0, image: '{image}', persistence: {{enabled: false}}, auth: {{enabled: false}}}}"
    ))
    .await?;
    let first = format!("{NAME}-0-0");
    let template = wait_until(Duration::from_secs(60), "the first ValkeyNode", || {
        let api = a.ns.api::<ValkeyNode>();
        let first = first.clone();
        async move {
            Ok(match api.get_opt(&first).await? {
                Some(node) => Poll::Ready(node),
                None => Poll::NotYet("not created yet".into()),
            })
        }
    })
    .await?;
    let port_b = bare_bus_port();
    let port_c = if port_b == 31999 { 30000 } else { port_b + 1 };
    let mut b =
        BareCluster::start("reshard-cli", bare::bare_spec(&template, port_b)?, port_b).await?;
    let mut c = BareCluster::start(
        "reshard-direct",
        bare::bare_spec(&template, port_c)?,
        port_c,
    )
    .await?;
    let mut names = (Vec::new(), Vec::new());
    for _ in 0..3 {
        names.0.push(b.create_node().await?);
        names.1.push(c.create_node().await?);
    }
    a.wait_ready(Duration::from_secs(300)).await?;
    let mut a_ips = operator_ips(&a, 3).await?;
    let layout = bare::layout(&a_ips).await?;
    let mut members = (Vec::new(), Vec::new());
    for (nb, nc) in names.0.iter().zip(&names.1) {
        members.0.push(b.wait_node(nb).await?);
        members.1.push(c.wait_node(nc).await?);
    }
    b.form(members.0, &layout).await?;
    c.form(members.1, &layout).await?;
    let version = valkey_version(&a_ips[0]).await?;

    let load_start = Instant::now();
    for ips in [&a_ips, &b.ips(), &c.ips()] {
        data::load(&data, &view::read(&ips[0]).await?).await?;
        let held = key_count(ips).await?;
        check(
            held == data.keys,
            format!("{held} keys held after loading {}", data.keys),
        )?;
    }
    println!(
        "{image} ({version}): three clusters formed and loaded ({:.1} s to load)",
        load_start.elapsed().as_secs_f64()
    );

    let mut directions = vec![(3, 4)];
    if profile.both_directions {
        directions.push((4, 3));
    }
    // Again and again only when the clusters come back to where they started.
    let rounds = if profile.both_directions {
        profile.rounds
    } else {
        1
    };
    let mut steps: Vec<StepResult> = directions
        .iter()
        .map(|&(from, to)| StepResult {
            from,
            to,
            ways: Vec::new(),
        })
        .collect();
    let mut operator_runs: Vec<Vec<WayResult>> = vec![Vec::new(); directions.len()];
    let mut direct_runs: Vec<Vec<WayResult>> = vec![Vec::new(); directions.len()];
    for round in 1..=rounds {
        for (i, (from, to)) in directions.iter().copied().enumerate() {
            let run = if rounds > 1 {
                format!(" (run {round} of {rounds})")
            } else {
                String::new()
            };
            println!("{image}: {from} -> {to} shards{run}");
            let (operator, moves, after) = operator_step(&a, &mut a_ips, from, to, &keys).await?;
            operator_runs[i].push(operator);
            if round == 1 {
                // valkey-cli, as a person would run it.
                let cli_atomic = atomic && !profile.cli_legacy;
                steps[i]
                    .ways
                    .push(cli_way(&mut b, &cli, from, to, cli_atomic, &keys).await?);
            }
            let direct = direct_step(&mut c, &cli, (from, to), &moves, &after, atomic, &keys);
            direct_runs[i].push(direct.await?);
        }
    }
    for ((step, operator), direct) in steps.iter_mut().zip(operator_runs).zip(direct_runs) {
        if let Some(operator) = WayResult::median(operator) {
            step.ways.insert(0, operator);
        }
        step.ways.extend(WayResult::median(direct));
    }

    // On Valkey 9, valkey-cli can move slots atomically too: the same cluster (b) once more.
    if atomic && profile.cli_legacy && profile.cli_atomic {
        for (step, (from, to)) in steps.iter_mut().zip(directions.iter().copied()) {
            println!("{image}: {from} -> {to} shards, valkey-cli with atomic slot migration");
            step.ways
                .push(cli_way(&mut b, &cli, from, to, true, &keys).await?);
        }
    }

    Ok(VersionResult {
        image: image.to_owned(),
        valkey_version: version,
        steps,
    })
}

/// (a) the operator, measured and checked; with the moves it made (shard pairs to slots) and
/// the layout it left, for the direct reference to replay.
async fn operator_step(
    a: &ClusterFixture,
    a_ips: &mut Vec<String>,
    from: usize,
    to: usize,
    keys: &Keys<'_>,
) -> Result<(
    WayResult,
    BTreeMap<(usize, usize), Vec<u16>>,
    Vec<Option<usize>>,
)> {
    let before = bare::layout(a_ips).await?;
    let keys_before = key_count(a_ips).await?;
    let measured = operator_way(a, from, to).await?;
    *a_ips = operator_ips(a, to).await?;
    let after = bare::layout(a_ips).await?;
    let moves = view::moves(&before, &after)?;
    let moved = moved_slots(&before, &after)?;
    let result = checked(
        "operator",
        format!("spec.shards: {from} -> {to}"),
        a_ips,
        keys,
        &moved,
        keys_before,
        measured,
    )
    .await?;
    a.cluster_check().await?;
    Ok((result, moves, after))
}

/// (c) the operator's moves, straight: measured, checked, and left where the operator put them.
async fn direct_step(
    c: &mut BareCluster,
    cli: &std::path::PathBuf,
    (from, to): (usize, usize),
    moves: &BTreeMap<(usize, usize), Vec<u16>>,
    after: &[Option<usize>],
    atomic: bool,
    keys: &Keys<'_>,
) -> Result<WayResult> {
    let before = bare::layout(&c.ips()).await?;
    let keys_before = key_count(&c.ips()).await?;
    let measured = direct_way(c, from, to, moves, after, atomic).await?;
    check(
        bare::layout(&c.ips()).await? == after,
        "the direct driver left the slots where the operator put them",
    )?;
    let moved = moved_slots(&before, after)?;
    let how = if atomic {
        "CLUSTER MIGRATESLOTS per source, all at once"
    } else {
        "pipelined SETSLOT / GETKEYSINSLOT / MIGRATE per (source, target), all at once"
    };
    let result = checked(
        "direct",
        how.into(),
        &c.ips(),
        keys,
        &moved,
        keys_before,
        measured,
    )
    .await?;
    cli::run(
        cli,
        &["--cluster", "check", &format!("{}:6379", c.entry()?.ip)],
        Duration::from_secs(60),
    )
    .await?;
    Ok(result)
}

/// (b), out or in, measured and checked.
async fn cli_way(
    b: &mut BareCluster,
    cli: &std::path::PathBuf,
    from: usize,
    to: usize,
    atomic: bool,
    keys: &Keys<'_>,
) -> Result<WayResult> {
    let before = bare::layout(&b.ips()).await?;
    let keys_before = key_count(&b.ips()).await?;
    let measured = if to > from {
        cli_out(b, cli, atomic).await?
    } else {
        cli_in(b, cli, atomic).await?
    };
    let after = bare::layout(&b.ips()).await?;
    let moved = moved_slots(&before, &after)?;
    let (way, flag) = if atomic {
        ("valkey-cli-atomic", " --cluster-use-atomic-slot-migration")
    } else {
        ("valkey-cli", "")
    };
    let how = if to > from {
        format!("add-node, check, rebalance --cluster-use-empty-primaries{flag}")
    } else {
        format!("rebalance --cluster-weight <leaving>=0{flag}, del-node")
    };
    let result = checked(way, how, &b.ips(), keys, &moved, keys_before, measured).await?;
    cli::run(
        cli,
        &["--cluster", "check", &format!("{}:6379", b.entry()?.ip)],
        Duration::from_secs(60),
    )
    .await?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::WayResult;

    fn run(seconds: f64) -> WayResult {
        WayResult {
            way: "operator".into(),
            how: String::new(),
            seconds,
            new_node_ready_seconds: None,
            moving_seconds: seconds,
            moved_slots: 1,
            moved_keys: 1,
            moved_bytes: 1,
            mb_per_s: 1.0,
            keys_before: 1,
            keys_after: 1,
            keys_intact: 1,
            keys_lost: 0,
            shards_serving: 3,
            notes: Vec::new(),
            runs_seconds: Vec::new(),
        }
    }

    #[test]
    fn the_median_run_carries_every_runs_seconds_in_order() {
        let median = WayResult::median(vec![run(3.0), run(1.0), run(2.0)]).unwrap();
        assert_eq!(median.seconds, 2.0);
        assert_eq!(median.runs_seconds, vec![3.0, 1.0, 2.0]);
        let lower_middle = WayResult::median(vec![run(4.0), run(1.0)]).unwrap();
        assert_eq!(lower_middle.seconds, 1.0);
        let single = WayResult::median(vec![run(5.0)]).unwrap();
        assert!(single.runs_seconds.is_empty(), "one run lists no runs");
        assert!(WayResult::median(Vec::new()).is_none());
    }
}
