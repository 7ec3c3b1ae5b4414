//! The fleet benchmark (`bench_fleet`; its tiny profile runs in the suite): many ValkeyNodes
//! under one node-controller and one cluster-controller process, and what they cost at rest.
//!
//! | part | module |
//! | --- | --- |
//! | a real fleet: ValkeyClusters of 3 members with real servers, both controllers | [`real`] |
//! | a simulated fleet: ValkeyNodes on a simulated node, the node-controller alone | [`simulated`] |
//! | the simulated node (kwok-style, run by the test process) | [`simulated_node`] |
//! | memory and CPU of a process, from /proc | [`usage`] |
//! | the controllers' API requests, from their `kube_api_requests_total` | [`api_load`] |
//! | what is measured at rest, shared by both parts | [`rest`] |
//! | the watch caches the test waits on | [`watched`] |
//! | the figures, as JSON and markdown | [`report`] |
//!
//! Sizes come from the environment (`FLEET_*`, see [`Profile::from_env`]); `bench/README.md`
//! explains every figure.

pub mod api_load;
pub mod changed;
pub mod real;
pub mod report;
pub mod rest;
pub mod simulated;
pub mod simulated_node;
pub mod usage;
pub mod watched;

use std::time::Duration;

use crate::bench::env_or;
use serde::Serialize;

/// What a run does, and how big.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    /// ValkeyClusters of the real fleet (0: no real fleet).
    pub clusters: usize,
    /// The spec of each of them (YAML of the spec mapping): three members.
    pub cluster_spec: String,
    /// The spec of the one cluster created once the real fleet is at rest.
    pub create_spec: String,
    /// ValkeyNodes of the simulated fleet (0: no simulated fleet).
    pub simulated: usize,
    /// The image the simulated ValkeyNodes name (never pulled: no container runs).
    pub simulated_image: String,
    /// Whether the simulated fleet is rolled by a spec change after its rest window (at 3,000
    /// nodes the roll takes longer than everything else: the StatefulSet controller's pace).
    pub spec_change: bool,
    /// After Ready, how long without a write by the controllers counts as settled...
    pub quiet: Duration,
    /// ...and the longest wait for it before the rest window starts anyway.
    pub settle: Duration,
    /// The rest window: memory, CPU and API requests over it.
    pub rest: Duration,
    /// How often memory is read during the rest window.
    pub sample_every: Duration,
    /// The longest wait for any one phase (formation, a roll, a deletion); `None`: by size.
    pub timeout: Option<Duration>,
}

/// `{shards: 3, replicas: 0}`: three primaries, each owning a third of the slots. Of the two
/// three-member shapes it is the one with the most cluster state per member (every member
/// owns slots, so each pass checks three slot owners) and no replication: no initial full
/// sync forks a server, so what the host spends at formation is the operator's and the pods'.
/// No persistence: 300 volumes would measure the storage provisioner.
pub const CLUSTER_SPEC: &str = "{shards: 3, replicas: 0, persistence: {enabled: false}}";
/// The cluster created at rest: the 3×1, otherwise like the fleet's.
pub const CREATE_SPEC: &str = "{shards: 3, replicas: 1, persistence: {enabled: false}}";

impl Profile {
    /// `FLEET_CLUSTERS` (100), `FLEET_SIMULATED` (3000), `FLEET_REST_SECONDS` (120),
    /// `FLEET_QUIET_SECONDS` (15), `FLEET_SETTLE_SECONDS` (180), `FLEET_CLUSTER_SPEC`,
    /// `FLEET_CREATE_SPEC`, `FLEET_SPEC_CHANGE` (1; 0 skips the simulated fleet's roll),
    /// `FLEET_TIMEOUT_SECONDS` (by size when unset).
    pub fn from_env() -> Self {
        Self {
            clusters: env_or("FLEET_CLUSTERS", 100),
            cluster_spec: env_or("FLEET_CLUSTER_SPEC", CLUSTER_SPEC.to_owned()),
            create_spec: env_or("FLEET_CREATE_SPEC", CREATE_SPEC.to_owned()),
            simulated: env_or("FLEET_SIMULATED", 3000),
            simulated_image: "valkey/valkey:9.1".into(),
            spec_change: env_or("FLEET_SPEC_CHANGE", 1u8) != 0,
            quiet: Duration::from_secs(env_or("FLEET_QUIET_SECONDS", 15)),
            settle: Duration::from_secs(env_or("FLEET_SETTLE_SECONDS", 180)),
            rest: Duration::from_secs(env_or("FLEET_REST_SECONDS", 120)),
            sample_every: Duration::from_secs(5),
            timeout: std::env::var("FLEET_TIMEOUT_SECONDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Duration::from_secs),
        }
    }

    /// For the suite: 3 clusters and 30 simulated nodes, a few seconds at rest. It proves the
    /// harness works; its figures mean nothing.
    pub fn tiny() -> Self {
        Self {
            clusters: 3,
            cluster_spec: CLUSTER_SPEC.into(),
            create_spec: "{shards: 1, replicas: 0, persistence: {enabled: false}}".into(),
            simulated: 30,
            simulated_image: "valkey/valkey:9.1".into(),
            spec_change: true,
            quiet: Duration::from_secs(3),
            settle: Duration::from_secs(30),
            rest: Duration::from_secs(5),
            sample_every: Duration::from_secs(1),
            timeout: None,
        }
    }

    /// The longest wait for a phase over `objects` objects: `FLEET_TIMEOUT_SECONDS`, else 5
    /// minutes plus 2 s an object (formation of a real cluster takes 15–20 s, but they form
    /// side by side; thousands of simulated pods wait on the controller manager's request rate).
    pub fn deadline(&self, objects: usize) -> Duration {
        self.timeout
            .unwrap_or(Duration::from_secs(300 + 2 * objects as u64))
    }

    /// The command that runs this profile again (with the controller binaries of this run:
    /// `OPERATOR_BIN_DIR` when it was set).
    pub fn command(&self) -> String {
        let binaries = crate::operator::binaries_in_command();
        let no_roll = if self.spec_change {
            ""
        } else {
            "FLEET_SPEC_CHANGE=0 "
        };
        format!(
            "{binaries}FLEET_CLUSTERS={} FLEET_SIMULATED={} {no_roll}FLEET_REST_SECONDS={} \
             FLEET_QUIET_SECONDS={} FLEET_SETTLE_SECONDS={} cargo test --workspace --test bench \
             -- --ignored --nocapture bench_fleet",
            self.clusters,
            self.simulated,
            self.rest.as_secs(),
            self.quiet.as_secs(),
            self.settle.as_secs()
        )
    }
}

/// Deletes the namespace and waits until it is gone (its pods, on a real or a simulated node,
/// with it), so that the next part of a run starts on a quiet cluster.
pub async fn delete_namespace(ns: &crate::TestNamespace, within: Duration) -> crate::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(ns.client.clone());
    match api.delete(&ns.name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    crate::wait_until(within, &format!("namespace {} gone", ns.name), || {
        let api = api.clone();
        async move {
            Ok(match api.get_opt(&ns.name).await? {
                None => crate::Poll::Ready(()),
                Some(n) => crate::Poll::NotYet(format!("{:?}", n.status)),
            })
        }
    })
    .await
}
