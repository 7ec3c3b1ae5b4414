//! Prometheus metrics every controller exposes, in one clonable handle.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `reconciles_total` | counter | `controller` |
//! | `reconcile_errors_total` | counter | `controller`, `kind` |
//! | `reconcile_duration_seconds` | histogram | `controller` |
//! | `leader` | gauge (1 while this replica leads, else 0) | none |
//! | `actions_total` | counter: steps a controller took on an object | `controller`, `namespace`, `name`, `action` |
//! | `work_left` | gauge: what a long operation on an object has left (slots to move) | `controller`, `namespace`, `name`, `work` |
//! | `kube_api_requests_total` | counter: requests sent to the Kubernetes API ([`crate::api_requests`]) | `verb`, `resource` |
//! | `backup_last_success_timestamp_seconds` | gauge: when the source's newest Completed backup finished | `namespace`, `source` |
//! | `backup_last_size_bytes` | gauge: that backup's bytes in the store | `namespace`, `source` |
//! | `backup_last_duration_seconds` | gauge: that backup's start to finish | `namespace`, `source` |
//! | `backup_failures_total` | counter: backups of the source that ended Failed | `namespace`, `source` |
//!
//! The backup series are the cluster-controller's (another binary serves them empty). Their
//! gauges are set from the ValkeyBackups themselves, each time one that Completed is looked at,
//! so a restarted controller serves them again at once; `source` is `<Kind>/<name>`.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api_requests::ApiRequestLabels;

/// The content type of the text exposition format [`Metrics::encode`] produces.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    controller: String,
    namespace: String,
    name: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkLabels {
    controller: String,
    namespace: String,
    name: String,
    work: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackupLabels {
    namespace: String,
    source: String,
}

/// What the backups of each source have done.
#[derive(Clone, Default)]
struct BackupSeries {
    last_success: Family<BackupLabels, Gauge>,
    last_bytes: Family<BackupLabels, Gauge>,
    last_duration: Family<BackupLabels, Gauge>,
    failures: Family<BackupLabels, Counter>,
}

/// One Completed backup, as [`Metrics::backup_completed`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedBackup<'a> {
    pub namespace: &'a str,
    /// `<Kind>/<name>` of the backed-up object.
    pub source: &'a str,
    /// When it finished, in seconds since the Unix epoch.
    pub finished: i64,
    pub bytes: i64,
    pub duration_seconds: i64,
}

/// The shared metrics. Cloning is cheap; all clones update the same series.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: HistogramFamily,
    leader: Gauge,
    actions: Family<ActionLabels, Counter>,
    work_left: Family<WorkLabels, Gauge>,
    api_requests: Family<ApiRequestLabels, Counter>,
    backups: BackupSeries,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::with_registry(Registry::default())
    }
}

impl Metrics {
    /// Registers the shared metrics into `registry`, which may already hold a binary's own metrics
    /// (register them before calling this: the registry is frozen afterwards).
    pub fn with_registry(mut registry: Registry) -> Self {
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations: HistogramFamily = Family::new_with_constructor(reconcile_histogram);
        let leader = Gauge::default();
        let actions = Family::<ActionLabels, Counter>::default();
        let work_left = Family::<WorkLabels, Gauge>::default();
        let api_requests = Family::<ApiRequestLabels, Counter>::default();
        registry.register(
            "kube_api_requests",
            "Requests this process sent to the Kubernetes API, by verb (GET, LIST, WATCH, POST, PUT, PATCH, DELETE) and resource",
            api_requests.clone(),
        );
        registry.register(
            "actions",
            "Steps a controller took on an object, by kind of step (a failover is one)",
            actions.clone(),
        );
        registry.register(
            "work_left",
            "What a long operation on an object has left to do (for example slots to move)",
            work_left.clone(),
        );
        let backups = BackupSeries::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the source's newest Completed ValkeyBackup finished (Unix seconds)",
            backups.last_success.clone(),
        );
        registry.register(
            "backup_last_size_bytes",
            "The bytes in the object store of the source's newest Completed ValkeyBackup",
            backups.last_bytes.clone(),
        );
        registry.register(
            "backup_last_duration_seconds",
            "How long the source's newest Completed ValkeyBackup took, start to finish",
            backups.last_duration.clone(),
        );
        registry.register(
            "backup_failures",
            "ValkeyBackups of the source that ended Failed (since this process started)",
            backups.failures.clone(),
        );
        registry.register("reconciles", "Reconcile passes started", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconcile passes that ended in an error, by error kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconcile passes in seconds",
            durations.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without leader election), else 0",
            leader.clone(),
        );
        Self {
            registry: Arc::new(registry),
            reconciles,
            errors,
            durations,
            leader,
            actions,
            work_left,
            api_requests,
            backups,
        }
    }

    /// Records a Completed backup as its source's last success, unless a newer one is recorded
    /// (the backups are looked at in no particular order).
    pub fn backup_completed(&self, backup: &CompletedBackup<'_>) {
        let labels = BackupLabels {
            namespace: backup.namespace.to_owned(),
            source: backup.source.to_owned(),
        };
        let last = self.backups.last_success.get_or_create(&labels);
        if last.get() > backup.finished {
            return;
        }
        last.set(backup.finished);
        self.backups
            .last_bytes
            .get_or_create(&labels)
            .set(backup.bytes);
        self.backups
            .last_duration
            .get_or_create(&labels)
            .set(backup.duration_seconds);
    }

    /// Counts a backup of `source` (`<Kind>/<name>`) in `namespace` that ended Failed.
    pub fn backup_failed(&self, namespace: &str, source: &str) {
        self.backups
            .failures
            .get_or_create(&BackupLabels {
                namespace: namespace.to_owned(),
                source: source.to_owned(),
            })
            .inc();
    }

    /// The counters of requests sent to the Kubernetes API, for the client's counting layer
    /// ([`crate::api_requests::counted_client`]).
    pub fn api_requests(&self) -> Family<ApiRequestLabels, Counter> {
        self.api_requests.clone()
    }

    /// Counts a reconcile pass and returns a guard that records its duration when dropped.
    #[must_use = "the duration is recorded when the guard is dropped"]
    pub fn reconcile_started(&self, controller: &str) -> ReconcileTimer {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            histogram: self.durations.get_or_create(&labels).clone(),
            started: Instant::now(),
        }
    }

    /// Counts a failed reconcile. `kind` is a short, bounded label chosen by the caller (for
    /// example an error enum's variant name); never put object names or messages in it.
    pub fn reconcile_failed(&self, controller: &str, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one `action` that `controller` took on the object `namespace/name`.
    pub fn action_taken(&self, controller: &str, namespace: &str, name: &str, action: &str) {
        self.actions
            .get_or_create(&ActionLabels {
                controller: controller.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                action: action.to_owned(),
            })
            .inc();
    }

    /// What the `work` of the object `namespace/name` has left (0 once done).
    pub fn set_work_left(
        &self,
        controller: &str,
        namespace: &str,
        name: &str,
        work: &str,
        left: i64,
    ) {
        self.work_left
            .get_or_create(&WorkLabels {
                controller: controller.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                work: work.to_owned(),
            })
            .set(left);
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

// The constructor is a plain fn pointer so the family type can be named in the struct.
type HistogramFamily = Family<ControllerLabels, Histogram, fn() -> Histogram>;

/// 5 ms .. ~41 s: a reconcile is an API round trip or two; a slow one waits on Valkey.
fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Records the time since its creation into `reconcile_duration_seconds` when dropped, so early
/// returns and `?` are measured too.
pub struct ReconcileTimer {
    histogram: Histogram,
    started: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_value(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn counts_reconciles_errors_and_durations() -> Result<(), std::fmt::Error> {
        let metrics = Metrics::default();
        for _ in 0..3 {
            let _timer = metrics.reconcile_started("valkeynode");
        }
        metrics.reconcile_failed("valkeynode", "Kube");
        metrics.reconcile_failed("valkeynode", "Kube");
        metrics.reconcile_failed("valkeynode", "InvalidSpec");
        let text = metrics.encode()?;
        assert_eq!(
            line_value(&text, "reconciles_total{controller=\"valkeynode\"}"),
            Some(3.0)
        );
        assert_eq!(
            line_value(
                &text,
                "reconcile_errors_total{controller=\"valkeynode\",kind=\"Kube\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            line_value(
                &text,
                "reconcile_errors_total{controller=\"valkeynode\",kind=\"InvalidSpec\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            line_value(
                &text,
                "reconcile_duration_seconds_count{controller=\"valkeynode\"}"
            ),
            Some(3.0)
        );
        assert!(text.ends_with("# EOF\n"));
        Ok(())
    }

    #[test]
    fn leader_gauge_follows_state() -> Result<(), std::fmt::Error> {
        let metrics = Metrics::default();
        assert_eq!(line_value(&metrics.encode()?, "leader "), Some(0.0));
        metrics.set_leader(true);
        assert_eq!(line_value(&metrics.encode()?, "leader "), Some(1.0));
        metrics.clone().set_leader(false);
        assert_eq!(line_value(&metrics.encode()?, "leader "), Some(0.0));
        Ok(())
    }

    #[test]
    fn actions_and_work_left_per_object() -> Result<(), std::fmt::Error> {
        let metrics = Metrics::default();
        metrics.action_taken("c", "prod", "cache", "Failover");
        metrics.action_taken("c", "prod", "cache", "Failover");
        metrics.set_work_left("c", "prod", "cache", "slots_to_move", 4096);
        let text = metrics.encode()?;
        assert_eq!(
            line_value(
                &text,
                "actions_total{controller=\"c\",namespace=\"prod\",name=\"cache\",action=\"Failover\"} "
            ),
            Some(2.0)
        );
        assert_eq!(
            line_value(
                &text,
                "work_left{controller=\"c\",namespace=\"prod\",name=\"cache\",work=\"slots_to_move\"} "
            ),
            Some(4096.0)
        );
        Ok(())
    }

    #[test]
    fn keeps_a_binarys_own_metrics() -> Result<(), std::fmt::Error> {
        let mut registry = Registry::default();
        let own = Counter::<u64>::default();
        registry.register("valkey_commands", "Valkey commands sent", own.clone());
        let metrics = Metrics::with_registry(registry);
        own.inc();
        assert_eq!(
            line_value(&metrics.encode()?, "valkey_commands_total "),
            Some(1.0)
        );
        Ok(())
    }

    /// The newest Completed backup wins whatever the order they are looked at in; failures count.
    #[test]
    fn backups_keep_the_newest_success_and_count_failures() -> Result<(), std::fmt::Error> {
        let metrics = Metrics::default();
        let backup = |finished, bytes, duration_seconds| CompletedBackup {
            namespace: "prod",
            source: "ValkeyCluster/cache",
            finished,
            bytes,
            duration_seconds,
        };
        metrics.backup_completed(&backup(2_000, 900, 30));
        metrics.backup_completed(&backup(1_000, 100, 10));
        metrics.backup_failed("prod", "ValkeyCluster/cache");
        metrics.backup_failed("prod", "ValkeyCluster/cache");
        let text = metrics.encode()?;
        let labels = "{namespace=\"prod\",source=\"ValkeyCluster/cache\"}";
        let value = |name: &str| line_value(&text, &format!("{name}{labels}"));
        assert_eq!(
            value("backup_last_success_timestamp_seconds"),
            Some(2_000.0)
        );
        assert_eq!(value("backup_last_size_bytes"), Some(900.0));
        assert_eq!(value("backup_last_duration_seconds"), Some(30.0));
        assert_eq!(value("backup_failures_total"), Some(2.0));
        Ok(())
    }
}
