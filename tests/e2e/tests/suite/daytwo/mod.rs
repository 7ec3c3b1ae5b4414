//! Day-2 operations (issue 16): what a platform team runs into in its first weeks. One file per
//! area; the helpers every area shares are here.

mod live_config;
mod memory;
mod metrics;
mod progress;
mod quick_start;
mod readiness;
mod scaling;
mod spread;
mod upgrade;
mod volumes;

use std::time::Duration;

use e2e::operator::{ControllerProcess, install_crds};
use e2e::{E2eError, Result, TestNamespace};
use kube::api::PostParams;
use serde_json::{Value, json};
use valkey_api::v1alpha1::ValkeyNode;

/// A pod that needs no volume: scheduling, process start, the first probes, one status pass.
pub const READY: Duration = Duration::from_secs(90);

/// The node-controller alone, in a namespace of its own.
pub async fn node_controller(prefix: &str) -> Result<(TestNamespace, ControllerProcess)> {
    install_crds().await?;
    let ns = TestNamespace::create(prefix).await?;
    let controller = ControllerProcess::start("node-controller", &ns, &[]).await?;
    Ok((ns, controller))
}

/// Creates the ValkeyNode `name` with `spec` exactly as given.
pub async fn create_node(ns: &TestNamespace, name: &str, spec: Value) -> Result<ValkeyNode> {
    let object = json!({
        "apiVersion": "valkey.io/v1alpha1",
        "kind": "ValkeyNode",
        "metadata": {"name": name},
        "spec": spec,
    });
    let node: ValkeyNode =
        serde_json::from_value(object).map_err(|e| E2eError::Check(format!("{name}: {e}")))?;
    Ok(ns
        .api::<ValkeyNode>()
        .create(&PostParams::default(), &node)
        .await?)
}

/// The node's Ready condition as (status, reason, message).
pub fn ready_condition(node: &ValkeyNode) -> Option<(String, String, String)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `CONFIG GET key` of the Valkey at `ip` (default user, no password).
pub async fn config_get(ip: &str, key: &str) -> Result<String> {
    let mut conn = e2e::valkey(ip, 6379).await?;
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", key])
        .query_async(&mut conn)
        .await
        .map_err(|source| E2eError::Valkey {
            addr: ip.to_owned(),
            source,
        })?;
    match reply.as_slice() {
        [k, value] if k == key => Ok(value.clone()),
        _ => Err(E2eError::Check(format!("CONFIG GET {key} = {reply:?}"))),
    }
}
