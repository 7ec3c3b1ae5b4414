//! Item 5: without a `maxmemory` of its own a server stops well below its memory limit.

use e2e::operator::wait_node;
use e2e::{E2eError, Result, check};
use serde_json::json;

use super::{READY, config_get, create_node, node_controller};

#[tokio::test(flavor = "multi_thread")]
async fn maxmemory_comes_from_the_memory_limit_when_absent() -> Result<()> {
    let (ns, _controller) = node_controller("d2-memory").await?;
    let open = json!({"protected-mode": "no"});
    create_node(
        &ns,
        "derived",
        json!({"image": "valkey/valkey:9.1", "config": open,
               "resources": {"limits": {"memory": "256Mi"}}}),
    )
    .await?;
    create_node(
        &ns,
        "given",
        json!({"image": "valkey/valkey:9.1", "config": {"protected-mode": "no", "maxmemory": "100mb"},
               "resources": {"limits": {"memory": "256Mi"}}}),
    )
    .await?;
    for (name, expected) in [("derived", "161061273"), ("given", "104857600")] {
        let node = wait_node(&ns, name, READY, "ready", |n| {
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
