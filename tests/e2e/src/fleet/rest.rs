//! A fleet at rest: first settled (no controller has written to the API for a while), then
//! watched over a window: its memory, its CPU and its API requests.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::api_load::{Counts, Requests};
use super::usage::{Usage, Window};
use crate::operator::ControllerProcess;
use crate::{E2eError, Result};

/// The goals of the issue, reported and never asserted: each controller's resident set at most
/// 30 MiB over 300 ValkeyNodes, the node-controller's at most 150 MiB over 3,000 and 400 MiB
/// over 10,000. A fleet between two sizes is held to the larger size's goal.
pub fn rss_goal_mib(valkey_nodes: usize) -> f64 {
    match valkey_nodes {
        0..=300 => 30.0,
        301..=3000 => 150.0,
        _ => 400.0,
    }
}

/// How the wait for rest ended.
#[derive(Clone, Debug, Serialize)]
pub struct Settled {
    /// From the call (right after the fleet was ready) to the last write, plus the quiet span
    /// that followed it; or the whole wait when it never went quiet.
    pub seconds: f64,
    /// Whether no controller wrote (Leases aside) for the quiet span before the wait's limit.
    pub went_quiet: bool,
}

/// Waits until none of `processes` has written to the API for `quiet`, at most `within`; Lease
/// renewals do not count (a controller's leader election and heartbeat renew theirs every few
/// seconds whatever the fleet does; the rest window counts them by name). A fleet that keeps
/// writing is not an error: the rest window then measures how much.
pub async fn settle(
    processes: &[&ControllerProcess],
    quiet: Duration,
    within: Duration,
) -> Result<Settled> {
    let start = Instant::now();
    let writes = || async {
        let mut total = 0.0;
        for p in processes {
            total += Counts::of(p).await?.writes_but_leases();
        }
        Ok::<_, E2eError>(total)
    };
    let mut last = writes().await?;
    let mut last_change = Instant::now();
    loop {
        if last_change.elapsed() >= quiet {
            return Ok(Settled {
                seconds: start.elapsed().as_secs_f64(),
                went_quiet: true,
            });
        }
        if start.elapsed() >= within {
            return Ok(Settled {
                seconds: start.elapsed().as_secs_f64(),
                went_quiet: false,
            });
        }
        // The counters are read once a second: a write shows within a second of being sent.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = writes().await?;
        if now != last {
            last = now;
            last_change = Instant::now();
        }
    }
}

/// One controller over the rest window.
#[derive(Clone, Debug, Serialize)]
pub struct ControllerAtRest {
    pub controller: String,
    /// VmHWM at the end of the window: the most the process was ever resident.
    pub peak_rss_mib: f64,
    /// The median VmRSS of the window's readings.
    pub steady_rss_mib: f64,
    /// Of it (medians too): anonymous pages (heap, stacks, what the allocator kept) and file
    /// pages (the binary's code: clean, shared, dropped first under memory pressure).
    pub steady_anonymous_mib: f64,
    pub steady_file_mib: f64,
    /// CPU (user + system) per minute of the window.
    pub cpu_seconds_per_minute: f64,
    /// API requests per minute of the window.
    pub requests_per_minute: Requests,
    /// [`rss_goal_mib`] for the fleet's size, whether the peak stayed under it, and the peak less
    /// the goal (negative: that much to spare).
    pub rss_goal_mib: f64,
    pub rss_goal_met: bool,
    pub peak_over_goal_mib: f64,
}

/// Reads every process at the start, every `every`, and at the end of a window of `length`;
/// `goal_mib` is the resident set each should stay under ([`rss_goal_mib`]).
pub async fn measure(
    processes: &[&ControllerProcess],
    length: Duration,
    every: Duration,
    goal_mib: f64,
) -> Result<Vec<ControllerAtRest>> {
    let pid = |p: &ControllerProcess| {
        p.pid()
            .ok_or_else(|| E2eError::Check(format!("{} is not running", p.binary)))
    };
    let mut before = Vec::new();
    let mut windows = Vec::new();
    for p in processes {
        before.push(Counts::of(p).await?);
        windows.push(Window {
            samples: vec![Usage::of(pid(p)?)?],
            elapsed: Duration::ZERO,
        });
    }
    let start = Instant::now();
    while start.elapsed() < length {
        // The window is a span of time being measured, not a wait for a condition.
        tokio::time::sleep(every.min(length.saturating_sub(start.elapsed()))).await;
        for (p, w) in processes.iter().zip(&mut windows) {
            w.samples.push(Usage::of(pid(p)?)?);
        }
    }
    let elapsed = start.elapsed();
    let mut figures = Vec::new();
    for ((p, mut w), before) in processes.iter().zip(windows).zip(before) {
        w.elapsed = elapsed;
        let requests = Counts::of(p).await?.since(&before);
        let peak = w.peak_rss_kib() as f64 / 1024.0;
        figures.push(ControllerAtRest {
            controller: p.binary.clone(),
            peak_rss_mib: peak,
            steady_rss_mib: w.steady_rss_kib() as f64 / 1024.0,
            steady_anonymous_mib: w.steady_anonymous_kib() as f64 / 1024.0,
            steady_file_mib: w.steady_file_kib() as f64 / 1024.0,
            cpu_seconds_per_minute: w.cpu_seconds_per_minute(),
            requests_per_minute: Requests::per_minute(&requests, elapsed),
            rss_goal_mib: goal_mib,
            rss_goal_met: peak < goal_mib,
            peak_over_goal_mib: peak - goal_mib,
        });
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_is_held_to_the_goal_of_the_next_size_up() {
        assert_eq!(rss_goal_mib(30), 30.0);
        assert_eq!(rss_goal_mib(300), 30.0);
        assert_eq!(rss_goal_mib(301), 150.0);
        assert_eq!(rss_goal_mib(3000), 150.0);
        assert_eq!(rss_goal_mib(3001), 400.0);
        assert_eq!(rss_goal_mib(10_000), 400.0);
    }
}
