//! Benchmarks (`make bench`), not tests: they measure and print, and fail only when the operation
//! itself fails. Run on an otherwise idle machine for figures worth comparing:
//! `cargo test -p e2e --test bench -- --ignored --nocapture --test-threads=1`.

use std::time::{Duration, Instant};

use e2e::Result;
use e2e::cluster::ClusterFixture;

async fn scale_out(image: &str, keys: u64) -> Result<()> {
    let start = Instant::now();
    let c = ClusterFixture::start(
        "bench",
        "bench",
        &format!("{{shards: 3, replicas: 1, image: '{image}'}}"),
    )
    .await?;
    c.wait_ready(Duration::from_secs(300)).await?;
    let formed = start.elapsed();
    let written = c.write_keys("bench", keys).await?;
    let t = Instant::now();
    c.patch_spec(serde_json::json!({"shards": 4})).await?;
    c.wait_ready(Duration::from_secs(900)).await?;
    let scaled = t.elapsed();
    c.verify(&written).await?;
    // A quarter of the slots (and about a quarter of the keys) moved to the new shard.
    let moved = keys / 4;
    println!(
        "{image}: 3x1 Ready in {:.1} s; 3 -> 4 shards with {keys} keys in {:.1} s, the new shard's pods included (~{:.0} moved keys/s, 4096 slots)",
        formed.as_secs_f64(),
        scaled.as_secs_f64(),
        moved as f64 / scaled.as_secs_f64()
    );
    println!(
        "{image}: resident memory after the run: node-controller {} KiB, cluster-controller {} KiB",
        c.node_controller.rss_kib().unwrap_or(0),
        c.cluster_controller.rss_kib().unwrap_or(0)
    );
    println!(
        "{image}: reconciles: node-controller {}, cluster-controller {}",
        c.node_controller
            .metric("reconciles_total")
            .await
            .unwrap_or(0.0),
        c.cluster_controller
            .metric("reconciles_total")
            .await
            .unwrap_or(0.0)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_scale_out_valkey_9_atomic_migration() -> Result<()> {
    scale_out("valkey/valkey:9.1", 20_000).await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: make bench"]
async fn bench_scale_out_valkey_8_key_migration() -> Result<()> {
    scale_out("valkey/valkey:8.0", 20_000).await
}
