//! Item 5: without a `maxmemory` of its own a server stops well below its memory limit.

use e2e::node::{NodeFixture, READY, config_get};
use e2e::{E2eError, Result, check};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn maxmemory_comes_from_the_memory_limit_when_absent() -> Result<()> {
    let nc = NodeFixture::start("d2-memory").await?;
    let open = json!({"protected-mode": "no"});
    nc.create_exactly(
        "derived",
        json!({"image": "valkey/valkey:9.1", "config": open,
               "resources": {"limits": {"memory": "256Mi"}}}),
    )
    .await?;
    nc.create_exactly(
        "given",
        json!({"image": "valkey/valkey:9.1", "config": {"protected-mode": "no", "maxmemory": "100mb"},
               "resources": {"limits": {"memory": "256Mi"}}}),
    )
    .await?;
    for (name, expected) in [("derived", "161061273"), ("given", "104857600")] {
        let node = nc
            .wait(name, READY, "ready", |n| {
                n.status.as_ref().is_some_and(|s| s.ready)
            })
            .await?;
        let ip = node
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| E2eError::Check(format!("{name} has no pod IP")))?;
        let reply = config_get(&ip, "maxmemory").await?;
        check(
            reply == expected,
            format!(
                "{name}: CONFIG GET maxmemory = {reply:?}, expected {expected} (60% of 256Mi, or the given value)"
            ),
        )?;
    }
    Ok(())
}
