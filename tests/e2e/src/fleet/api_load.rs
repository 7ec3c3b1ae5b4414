//! The controllers' requests to the Kubernetes API, from their `kube_api_requests_total`
//! counters (`verb`, `resource` labels; see `plumbing::api_requests`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::Result;
use crate::operator::ControllerProcess;

const METRIC: &str = "kube_api_requests_total{";
/// Kubernetes' verbs that only read; every other verb writes.
const READS: [&str; 3] = ["GET", "LIST", "WATCH"];

/// The counters of one process at one moment, by (verb, resource).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts(BTreeMap<(String, String), f64>);

impl Counts {
    /// Reads the process's `/metrics`.
    pub async fn of(process: &ControllerProcess) -> Result<Self> {
        Ok(Self::parse(&process.metrics().await?))
    }

    /// The `kube_api_requests_total` lines of a metrics text.
    pub fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(METRIC) else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let label = |name: &str| {
                labels.split(',').find_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
                })
            };
            if let (Some(verb), Some(resource)) = (label("verb"), label("resource")) {
                *counts.entry((verb, resource)).or_insert(0.0) += value;
            }
        }
        Self(counts)
    }

    /// What was counted since `before` (the counters only grow).
    pub fn since(&self, before: &Counts) -> Counts {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    pub fn reads(&self) -> f64 {
        self.sum(|verb, _| READS.contains(&verb))
    }

    pub fn writes(&self) -> f64 {
        self.sum(|verb, _| !READS.contains(&verb))
    }

    /// The writes but the Leases': each controller's leader election and the cluster-controller's
    /// heartbeat (one per namespace) renew theirs by design, a cost per process, not per object.
    pub fn writes_but_leases(&self) -> f64 {
        self.sum(|verb, resource| !READS.contains(&verb) && resource != "leases")
    }

    fn sum(&self, which: impl Fn(&str, &str) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|((verb, resource), _)| which(verb, resource))
            .map(|(_, v)| v)
            // A fold from 0.0: an empty f64 sum is -0.0, which prints as such.
            .fold(0.0, |a, b| a + b)
    }

    /// `VERB resource` → count, every line that moved.
    pub fn lines(&self) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .map(|((verb, resource), v)| (format!("{verb} {resource}"), *v))
            .collect()
    }
}

/// Requests over a window, as figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Requests {
    pub reads: f64,
    pub writes: f64,
    /// `VERB resource` → requests.
    pub by_verb_and_resource: BTreeMap<String, f64>,
}

impl Requests {
    pub fn of(counts: &Counts) -> Self {
        Self {
            reads: counts.reads(),
            writes: counts.writes(),
            by_verb_and_resource: counts.lines(),
        }
    }

    /// The same, per minute of `elapsed`.
    pub fn per_minute(counts: &Counts, elapsed: Duration) -> Self {
        let minutes = elapsed.as_secs_f64() / 60.0;
        let scale = |v: f64| if minutes > 0.0 { v / minutes } else { 0.0 };
        Self {
            reads: scale(counts.reads()),
            writes: scale(counts.writes()),
            by_verb_and_resource: counts
                .lines()
                .into_iter()
                .map(|(k, v)| (k, scale(v)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP kube_api_requests Requests\n\
        # TYPE kube_api_requests counter\n\
        kube_api_requests_total{verb=\"LIST\",resource=\"pods\"} 2\n\
        kube_api_requests_total{verb=\"PATCH\",resource=\"valkeynodes/status\"} 5\n\
        reconciles_total{controller=\"x\"} 9\n# EOF\n";
    const AFTER: &str = "kube_api_requests_total{verb=\"LIST\",resource=\"pods\"} 2\n\
        kube_api_requests_total{verb=\"WATCH\",resource=\"pods\"} 3\n\
        kube_api_requests_total{verb=\"GET\",resource=\"secrets\"} 60\n\
        kube_api_requests_total{verb=\"PATCH\",resource=\"valkeynodes/status\"} 7\n";

    #[test]
    fn counts_reads_and_writes_between_two_readings() {
        let (before, after) = (Counts::parse(BEFORE), Counts::parse(AFTER));
        assert_eq!(before.reads(), 2.0);
        assert_eq!(format!("{}", Counts::default().writes()), "0");
        assert_eq!(before.writes(), 5.0);
        let moved = after.since(&before);
        assert_eq!(moved.reads(), 63.0);
        assert_eq!(moved.writes(), 2.0);
        assert_eq!(
            moved.lines().keys().cloned().collect::<Vec<_>>(),
            ["GET secrets", "PATCH valkeynodes/status", "WATCH pods"]
        );
        let per_minute = Requests::per_minute(&moved, Duration::from_secs(120));
        assert_eq!(per_minute.reads, 31.5);
        assert_eq!(per_minute.writes, 1.0);
        assert_eq!(per_minute.by_verb_and_resource["GET secrets"], 30.0);
    }

    #[test]
    fn lease_renewals_are_writes_that_the_quiet_test_leaves_out() {
        let counts = Counts::parse(
            "kube_api_requests_total{verb=\"PUT\",resource=\"leases\"} 4\n\
             kube_api_requests_total{verb=\"GET\",resource=\"leases\"} 1\n\
             kube_api_requests_total{verb=\"PATCH\",resource=\"valkeynodes/status\"} 2\n",
        );
        assert_eq!(counts.writes(), 6.0);
        assert_eq!(counts.writes_but_leases(), 2.0);
        let renewals_only =
            Counts::parse("kube_api_requests_total{verb=\"PUT\",resource=\"leases\"} 4\n");
        assert_eq!(renewals_only.writes_but_leases(), 0.0);
    }
}
