//! The benchmarks' tiny profiles: the harnesses of `make bench` on small sizes, so that they keep
//! working. They assert what the benchmarks check, never a time.
//!
//! Resharding: three identical clusters, three ways from 3 shards to 4 and back, on a few
//! thousand keys: no key lost or changed, every shard serving slots, `valkey-cli --cluster
//! check` clean on the bare clusters.
//!
//! Fleet: 3 real clusters and 30 simulated ValkeyNodes: every cluster Ready, every simulated pod
//! Running and Ready, the request counters moving, the simulated Node gone at the end.

use e2e::Result;
use e2e::resharding::{Profile, run};

#[tokio::test(flavor = "multi_thread")]
async fn resharding_benchmark_harness_loses_no_key_three_ways() -> Result<()> {
    let profile = Profile::tiny();
    for image in &profile.images {
        let result = run(&profile, image).await?;
        for step in &result.steps {
            let ways: Vec<&str> = step.ways.iter().map(|w| w.way.as_str()).collect();
            e2e::check(
                ways == ["operator", "valkey-cli-atomic", "direct"],
                format!("{} -> {}: ways run {ways:?}", step.from, step.to),
            )?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_benchmark_harness_runs_a_real_and_a_simulated_fleet() -> Result<()> {
    use e2e::check;
    use e2e::fleet::{self, real, simulated};
    use k8s_openapi::api::core::v1::Node;

    let _turn = e2e::pool::heavy().await;
    let profile = fleet::Profile::tiny();
    // Side by side: the tiny profile measures nothing, and each part has its own namespace
    // and controllers.
    let (real, simulated) = tokio::try_join!(real::run(&profile), simulated::run(&profile))?;

    // real::run returns once every cluster was Ready (and the one created at rest).
    check(
        real.valkey_nodes == profile.clusters * 3,
        format!(
            "{} ValkeyNodes for {} clusters",
            real.valkey_nodes, profile.clusters
        ),
    )?;
    // The pods' time is read from their Ready conditions (whole seconds): a cluster is Ready
    // only once its pods are, so the last pod cannot be Ready after the last cluster.
    check(
        real.pods_ready_seconds
            .is_some_and(|pods| pods > 0.0 && pods <= real.ready_seconds + 1.0),
        format!(
            "the last pod Ready {:?} s after the apply, every cluster Ready {:.1} s after it",
            real.pods_ready_seconds, real.ready_seconds
        ),
    )?;
    for r in real.formation_requests.iter().chain(&real.create.requests) {
        check(
            r.requests.reads > 0.0 && r.requests.writes > 0.0,
            format!("{}: requests did not move: {:?}", r.controller, r.requests),
        )?;
    }
    check(
        real.at_rest.len() == 2 && real.at_rest.iter().all(|c| c.peak_rss_mib > 0.0),
        format!("controllers at rest: {:?}", real.at_rest),
    )?;

    // simulated::run returns once every pod ran, and again after the spec change rolled them.
    let node = &simulated.node;
    check(
        node.pods_started >= 2 * profile.simulated as u64
            && node.pods_terminated >= profile.simulated as u64,
        format!("the simulated node: {node:?}"),
    )?;
    check(
        simulated.not_ready.valkey_nodes_ready == 0,
        format!(
            "nothing answers at {}, yet ValkeyNodes are ready: {:?}",
            node.pod_ip, simulated.not_ready
        ),
    )?;
    // Its watches listed before the count began, and these nodes name no Secret to read: what
    // moves is what it wrote for each node.
    let formation = &simulated.formation_requests;
    check(
        formation.writes >= profile.simulated as f64,
        format!("the node-controller's requests for the simulated fleet: {formation:?}"),
    )?;
    let nodes: kube::Api<Node> = kube::Api::all(e2e::client().await?);
    check(
        nodes.get_opt(&node.node).await?.is_none(),
        format!("the simulated Node {} is still there", node.node),
    )
}
