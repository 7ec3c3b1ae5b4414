//! Reading every member of a replication in one round of concurrent commands: INFO, DBSIZE and,
//! when the replication user is fenced, whether it may log in. What cannot be read is kept as an
//! error, never dropped: the decision must know a member is silent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::client::ValkeyClient;
use crate::engine::Member;
use crate::engine::{read_admitted, read_every};
use crate::valkey::commands::{self, InfoSection};
use crate::valkey::{info, value};

use super::server::ServerState;

/// Whether a member could be read, and what its server said.
pub type Reach = crate::engine::Reach<ServerState>;

/// One pass's reading of every member, by member name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub members: BTreeMap<String, Reach>,
    /// With Sentinel on: every Sentinel's answer, by node name.
    pub sentinels: super::sentinel::Sentinels,
}

impl Observation {
    pub fn state(&self, member: &str) -> Option<&ServerState> {
        self.members.get(member).and_then(Reach::state)
    }
}

/// Reads every member concurrently, each command bounded by `timeout`; with `fence_user`, also
/// whether that user may log in.
pub async fn observe(
    client: &impl ValkeyClient,
    members: &[Member],
    timeout: Duration,
    fence_user: Option<&str>,
) -> Observation {
    Observation {
        members: read_every(members, |address| {
            read(client, address, timeout, fence_user)
        })
        .await,
        sentinels: Default::default(),
    }
}

async fn read(
    client: &impl ValkeyClient,
    address: SocketAddr,
    timeout: Duration,
    fence_user: Option<&str>,
) -> Result<ServerState, String> {
    let say = |e: &dyn std::fmt::Display| e.to_string();
    let info_cmd = commands::info(&[
        InfoSection::Server,
        InfoSection::Replication,
        InfoSection::Persistence,
    ]);
    let dbsize = commands::dbsize();
    let (info, keys) = futures::join!(
        client.command(address, &info_cmd, timeout),
        client.command(address, &dbsize, timeout),
    );
    let info = info.map_err(|e| say(&e))?;
    let text =
        value::text(&info).ok_or_else(|| format!("INFO: not text: {}", value::describe(&info)))?;
    let info = info::parse(&text).map_err(|e| say(&e))?;
    let keys = keys.map_err(|e| say(&e))?;
    let keys = value::int(&keys)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("DBSIZE: not a count: {}", value::describe(&keys)))?;
    let mut state = ServerState::from_info(address, &info, keys).map_err(|e| say(&e))?;
    if let Some(user) = fence_user {
        state.replication_admitted = Some(read_admitted(client, address, timeout, user).await?);
    }
    Ok(state)
}
