//! The limit: the slot moves sent straight to the servers by the least code that does them, with
//! no observation, planning or status between the commands. On Valkey 9 each source gets one
//! `CLUSTER MIGRATESLOTS` naming all its moves, every source at once; before 9, each (source,
//! target) pair moves its slots in rounds of pipelined commands: every slot of the round marked
//! importing and migrating, then one MIGRATE per slot with every key it holds, then the
//! hand-over on the target, the source and the other primaries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::Value;

use super::data::bulk_connection;
use super::view;
use crate::{E2eError, Result};

/// Slots per pipelined round of the pre-9 driver.
const ROUND: usize = 128;
/// Keys asked of GETKEYSINSLOT at a time (more than a slot holds at the default size).
const KEYS_PER_MIGRATE: usize = 2000;
/// MIGRATE's own timeout, milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "60000";

/// A shard of the cluster being resharded: its address and node id.
#[derive(Debug, Clone)]
pub struct Shard {
    pub ip: String,
    pub id: String,
}

/// The shards (in shard order) with their node ids, read from the first one's CLUSTER NODES.
pub async fn shards(ips: &[String]) -> Result<Vec<Shard>> {
    let first = ips
        .first()
        .ok_or_else(|| E2eError::Check("no shard".into()))?;
    let view = view::read(first).await?;
    ips.iter()
        .map(|ip| {
            let id = view
                .by_ip(ip)
                .map(|n| n.id.clone())
                .ok_or_else(|| E2eError::Check(format!("{first} does not know {ip}")))?;
            Ok(Shard { ip: ip.clone(), id })
        })
        .collect()
}

async fn command(ip: &str, args: &[String]) -> Result<Value> {
    let mut conn = bulk_connection(ip).await?;
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg);
    }
    cmd.query_async(&mut conn)
        .await
        .map_err(|source| E2eError::Valkey {
            addr: ip.to_owned(),
            source,
        })
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Okay => "OK".into(),
        other => format!("{other:?}"),
    }
}

/// One job of `CLUSTER GETSLOTMIGRATIONS`, as field → text (RESP2 lists it flat).
fn jobs(reply: &Value) -> Vec<BTreeMap<String, String>> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|entry| match entry {
            Value::Array(flat) => flat
                .chunks(2)
                .filter_map(|kv| Some((text(kv.first()?), text(kv.get(1)?))))
                .collect(),
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), text(v))).collect(),
            _ => BTreeMap::new(),
        })
        .collect()
}

fn finished(state: &str) -> bool {
    matches!(state, "success" | "failed" | "cancelled" | "canceled")
}

/// What the Valkey 9 driver went through: jobs started, and those that did not succeed (and were
/// started again for the slots they left).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtomicReport {
    pub jobs: u32,
    pub unsuccessful: Vec<String>,
}

/// Moves `moves` ((from, to) shard → slots) with `CLUSTER MIGRATESLOTS`: one command per source
/// naming every target, all sources at once; returns when each source has no job of its own
/// running and serves none of the slots it was to give away.
pub async fn migrate_atomic(
    shards: &[Shard],
    moves: &BTreeMap<(usize, usize), Vec<u16>>,
) -> Result<AtomicReport> {
    let sources: BTreeSet<usize> = moves.keys().map(|(from, _)| *from).collect();
    let runs = sources
        .into_iter()
        .map(|source| migrate_from(shards, source, moves));
    let mut total = AtomicReport::default();
    for report in futures::future::try_join_all(runs).await? {
        total.jobs += report.jobs;
        total.unsuccessful.extend(report.unsuccessful);
    }
    Ok(total)
}

/// How many times a source's slots are sent again after a job that did not succeed (or a
/// MIGRATESLOTS the source refused).
const ATTEMPTS: usize = 5;

async fn job_list(ip: &str) -> Result<Vec<BTreeMap<String, String>>> {
    Ok(jobs(
        &command(ip, &["CLUSTER".into(), "GETSLOTMIGRATIONS".into()]).await?,
    ))
}

/// Waits until `src` serves none of the slots of `moves`.
async fn wait_given_up(src: &Shard, moves: &[(usize, &Vec<u16>)]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let owners = view::read(&src.ip).await?.owners();
        let kept = moves
            .iter()
            .flat_map(|(_, slots)| slots.iter())
            .filter(|s| owners[usize::from(**s)].as_deref() == Some(src.id.as_str()))
            .count();
        if kept == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(E2eError::Check(format!(
                "{} still serves {kept} slots its jobs moved",
                src.ip
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One source's part of [`migrate_atomic`]: what it still serves of its moves, in one command,
/// followed until its new jobs have finished; again for what a failed job left.
async fn migrate_from(
    shards: &[Shard],
    source: usize,
    moves: &BTreeMap<(usize, usize), Vec<u16>>,
) -> Result<AtomicReport> {
    let src = &shards[source];
    let mine: Vec<(usize, &Vec<u16>)> = moves
        .iter()
        .filter(|((from, _), _)| *from == source)
        .map(|((_, to), slots)| (*to, slots))
        .collect();
    let mut report = AtomicReport::default();
    let mut seen: BTreeSet<String> = job_list(&src.ip)
        .await?
        .into_iter()
        .filter_map(|j| j.get("name").cloned())
        .collect();
    for _ in 0..ATTEMPTS {
        let owners = view::read(&src.ip).await?.owners();
        let mut args: Vec<String> = vec!["CLUSTER".into(), "MIGRATESLOTS".into()];
        for (to, slots) in &mine {
            let left: Vec<u16> = slots
                .iter()
                .copied()
                .filter(|s| owners[usize::from(*s)].as_deref() == Some(src.id.as_str()))
                .collect();
            if left.is_empty() {
                continue;
            }
            args.push("SLOTSRANGE".into());
            for (a, b) in view::ranges(&left) {
                args.extend([a.to_string(), b.to_string()]);
            }
            args.extend(["NODE".into(), shards[*to].id.clone()]);
        }
        if args.len() == 2 {
            return Ok(report);
        }
        if let Err(refused) = command(&src.ip, &args).await {
            report.unsuccessful.push(format!("refused: {refused}"));
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        // Follow this source's new jobs until each has finished.
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let listed = job_list(&src.ip).await?;
            let new: Vec<&BTreeMap<String, String>> = listed
                .iter()
                .filter(|j| j.get("name").is_some_and(|n| !seen.contains(n)))
                .collect();
            let done = |j: &&BTreeMap<String, String>| j.get("state").is_some_and(|s| finished(s));
            if new.is_empty() || !new.iter().all(done) {
                continue;
            }
            let all_succeeded = new
                .iter()
                .all(|j| j.get("state").map(String::as_str) == Some("success"));
            for job in new {
                report.jobs += 1;
                if job.get("state").map(String::as_str) != Some("success") {
                    report.unsuccessful.push(format!(
                        "{}: {}",
                        job.get("state").cloned().unwrap_or_default(),
                        job.get("message").cloned().unwrap_or_default()
                    ));
                }
                if let Some(name) = job.get("name") {
                    seen.insert(name.clone());
                }
            }
            if all_succeeded {
                // The source gives the slots up once the target's claim reaches it.
                wait_given_up(src, &mine).await?;
                return Ok(report);
            }
            break;
        }
    }
    Err(E2eError::Check(format!(
        "{}: slots still on the source after {ATTEMPTS} attempts: {:?}",
        src.ip, report.unsuccessful
    )))
}

/// Moves `moves` the pre-9 way: every (source, target) pair at once, each in rounds of
/// [`ROUND`] slots, each step of a round one pipeline.
pub async fn migrate_keys(
    shards: &[Shard],
    moves: &BTreeMap<(usize, usize), Vec<u16>>,
) -> Result<()> {
    let pairs = moves.iter().map(|((from, to), slots)| async move {
        let (src, dst) = (&shards[*from], &shards[*to]);
        let others: Vec<&Shard> = shards
            .iter()
            .enumerate()
            .filter(|(i, _)| i != from && i != to)
            .map(|(_, s)| s)
            .collect();
        let mut src_conn = bulk_connection(&src.ip).await?;
        let mut dst_conn = bulk_connection(&dst.ip).await?;
        for round in slots.chunks(ROUND) {
            let setslot = |action: &str, id: &str| {
                let mut pipe = redis::pipe();
                for slot in round {
                    pipe.cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(*slot)
                        .arg(action)
                        .arg(id)
                        .ignore();
                }
                pipe
            };
            let valkey = |ip: &str| {
                let addr = ip.to_owned();
                move |source| E2eError::Valkey { addr, source }
            };
            setslot("IMPORTING", &src.id)
                .query_async::<()>(&mut dst_conn)
                .await
                .map_err(valkey(&dst.ip))?;
            setslot("MIGRATING", &dst.id)
                .query_async::<()>(&mut src_conn)
                .await
                .map_err(valkey(&src.ip))?;
            let mut active: Vec<u16> = round.to_vec();
            while !active.is_empty() {
                let mut pipe = redis::pipe();
                for slot in &active {
                    pipe.cmd("CLUSTER")
                        .arg("GETKEYSINSLOT")
                        .arg(*slot)
                        .arg(KEYS_PER_MIGRATE);
                }
                let keys: Vec<Vec<Vec<u8>>> = pipe
                    .query_async(&mut src_conn)
                    .await
                    .map_err(valkey(&src.ip))?;
                let mut migrate = redis::pipe();
                let mut next = Vec::new();
                for (slot, keys) in active.iter().zip(keys) {
                    if keys.is_empty() {
                        continue;
                    }
                    if keys.len() == KEYS_PER_MIGRATE {
                        next.push(*slot);
                    }
                    migrate
                        .cmd("MIGRATE")
                        .arg(&dst.ip)
                        .arg(6379)
                        .arg("")
                        .arg(0)
                        .arg(MIGRATE_TIMEOUT_MS)
                        .arg("REPLACE")
                        .arg("KEYS")
                        .arg(keys)
                        .ignore();
                }
                migrate
                    .query_async::<()>(&mut src_conn)
                    .await
                    .map_err(valkey(&src.ip))?;
                active = next;
            }
            // The hand-over: the target claims the slots first, then the source and the rest
            // learn it (the order valkey-cli uses).
            setslot("NODE", &dst.id)
                .query_async::<()>(&mut dst_conn)
                .await
                .map_err(valkey(&dst.ip))?;
            setslot("NODE", &dst.id)
                .query_async::<()>(&mut src_conn)
                .await
                .map_err(valkey(&src.ip))?;
            for other in &others {
                let mut conn = bulk_connection(&other.ip).await?;
                setslot("NODE", &dst.id)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(valkey(&other.ip))?;
            }
        }
        Ok::<_, E2eError>(())
    });
    futures::future::try_join_all(pairs).await.map(|_| ())
}
