//! Reading replies while acting: what both the single-command actions and the legacy slot mover
//! expect of a reply, and the one read they share (a node's own CLUSTER NODES view).

use std::time::Duration;

use redis::Value;

use crate::client::ValkeyClient;
use crate::engine::decision::NodeRef;
use crate::engine::error::EngineError;
use crate::valkey::cluster_nodes::{self, ClusterNodes};
use crate::valkey::commands;
use crate::valkey::value;

/// `Ok` for a plain `OK`; the reply, described, otherwise.
pub(super) fn expect_ok(reply: &Value, command: &str) -> Result<(), EngineError> {
    match value::text(reply).as_deref() {
        Some("OK") => Ok(()),
        _ => Err(unexpected(command, reply)),
    }
}

/// A non-negative integer reply.
pub(super) fn count(reply: &Value, command: &str) -> Result<u64, EngineError> {
    value::int(reply)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| unexpected(command, reply))
}

pub(super) fn unexpected(command: &str, reply: &Value) -> EngineError {
    EngineError::UnexpectedReply {
        command: command.to_owned(),
        reply: value::describe(reply),
    }
}

/// The node's CLUSTER NODES, parsed; its `myself` line is checked by the caller.
pub(super) async fn cluster_nodes_of(
    client: &impl ValkeyClient,
    node: &NodeRef,
    timeout: Duration,
) -> Result<ClusterNodes, EngineError> {
    let reply = client
        .command(node.address, &commands::cluster_nodes(), timeout)
        .await?;
    let text = value::text(&reply).ok_or_else(|| unexpected("CLUSTER NODES", &reply))?;
    cluster_nodes::parse(&text).map_err(|source| parse_error(node, source))
}

pub(super) fn parse_error(node: &NodeRef, source: crate::valkey::ParseError) -> EngineError {
    EngineError::Parse {
        context: format!("CLUSTER NODES of {}", node.member),
        source,
    }
}
