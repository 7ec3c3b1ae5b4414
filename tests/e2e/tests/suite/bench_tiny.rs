//! The resharding benchmark's tiny profile: the harness of `make bench` (three identical clusters,
//! three ways from 3 shards to 4 and back) on a few thousand keys, so that it keeps working. It
//! asserts what the benchmark checks after every way (no key lost or changed, every shard
//! serving slots, `valkey-cli --cluster check` clean on the bare clusters), never a time.

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
