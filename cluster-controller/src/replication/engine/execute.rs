//! Carrying out a decided action: one command each. Kubernetes actions are the caller's.

use std::net::SocketAddr;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::client::ValkeyClient;
use crate::engine::{ActionOutcome, EngineError};
use crate::valkey::{commands, value};

use super::decision::{Action, Target};

/// Runs `action`'s command, each bounded by `timeout`.
pub async fn execute(
    client: &impl ValkeyClient,
    action: &Action,
    timeout: Duration,
) -> Result<ActionOutcome, EngineError> {
    let run = |on: &Target, cmd: Cmd, label: &'static str| {
        let address = on.address;
        async move { ok(&client.command(address, &cmd, timeout).await?, label) }
    };
    match action {
        Action::Promote { on } => run(on, commands::replicaof_no_one(), "REPLICAOF NO ONE").await,
        Action::Follow { on, primary } => {
            run(on, commands::replicaof(primary.address), "REPLICAOF").await
        }
        Action::Switchover {
            on,
            to,
            timeout: pause,
        } => run(on, commands::failover_to(to.address, *pause), "FAILOVER").await,
        Action::Admit { on, user } => crate::engine::admit(client, on.address, user, timeout).await,
        Action::SentinelWatch {
            on,
            primary,
            watch,
            monitor,
        } => {
            super::sentinel::configure(
                client,
                on.address,
                primary.address,
                watch,
                *monitor,
                timeout,
            )
            .await
        }
        Action::SentinelFailover {
            on,
            master_name,
            handover,
        } => {
            let others: Vec<SocketAddr> = handover.others.iter().map(|o| o.address).collect();
            let switch = super::sentinel::Switchover {
                sentinel: on.address,
                master_name,
                from: handover.from.address,
                to: handover.to.address,
                others: &others,
            };
            super::sentinel::switchover(client, &switch, timeout).await
        }
        Action::SentinelReset { on, master_name } => {
            super::sentinel::reset(client, on.address, master_name, timeout).await
        }
        Action::AllowRestart { .. } | Action::DeleteMember { .. } => Ok(ActionOutcome::Delegated),
    }
}

/// `OK`, or `OK` with a note (`REPLICAOF` answers "OK Already connected to specified master").
fn ok(reply: &Value, command: &str) -> Result<ActionOutcome, EngineError> {
    match value::text(reply) {
        Some(text) if text == "OK" || text.starts_with("OK ") => Ok(ActionOutcome::Done),
        _ => Err(EngineError::UnexpectedReply {
            command: command.to_owned(),
            reply: value::describe(reply),
        }),
    }
}
