//! Item 9: a node that is not ready says what Valkey answered, in its Ready condition.

use e2e::node::{NodeFixture, READY, condition_parts};
use e2e::{Result, check};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_valkey_refuses_quotes_valkeys_words() -> Result<()> {
    let nc = NodeFixture::start("d2-refused").await?;
    // As a person would write it: no password and protected mode as the image ships it, so the
    // server refuses every client that is not on its own loopback, the node-controller included.
    nc.create_exactly("protected", json!({"image": "valkey/valkey:9.1"}))
        .await?;
    // A password the server does not know: the node-controller's AUTH is refused.
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wrong"},
        "stringData": {"password": "not-the-password"},
    });
    nc.ns.apply(&secret.to_string()).await?;
    nc.create_exactly(
        "wrongpass",
        json!({"image": "valkey/valkey:9.1", "config": {"requirepass": "the-password"},
               "credentials": {"secretName": "wrong"}}),
    )
    .await?;

    for (name, reason, words) in [
        ("protected", "ValkeyProtectedMode", "DENIED"),
        ("wrongpass", "ValkeyAuthenticationFailed", "WRONGPASS"),
    ] {
        let node = nc
            .wait(name, READY, reason, |n| {
                condition_parts(n, "Ready").is_some_and(|(_, r, _)| r == reason)
            })
            .await?;
        let (status, _, message) = condition_parts(&node, "Ready").unwrap_or_default();
        check(
            status == "False" && message.contains(words),
            format!("{name}: Ready={status}: {message}"),
        )?;
        check(
            !message.contains("not-the-password") && !message.contains("the-password"),
            format!("{name}: a password in the condition: {message}"),
        )?;
    }
    Ok(())
}
