//! `consistency: PausedWrites`: every shard's capture begun at one instant of the whole source.
//!
//! Writes are paused on every shard's primary (`CLIENT PAUSE <ms> WRITE`: reads go on, and a
//! paused primary sends its replicas nothing, not even its pings, so its replication offset
//! stands still). Each primary's offset is read once paused; each chosen member catches up to
//! it; every capture is begun (its snapshot is fixed when the server answers `+FULLRESYNC`, see
//! [`backup::Begun`]), and each must have begun exactly at its primary's paused offset, or the
//! snapshots would not be one instant. Then writes resume, and the snapshots stream while they
//! do. The pause is handed to Valkey with its own limit (`maxWritePauseSeconds`), so a
//! controller that dies mid-way never leaves writes paused longer than that; this side gives
//! up a little before the limit and resumes writes itself.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::choose::ShardPlan;
use super::observe;
use crate::client::{RedisClient, ValkeyClient};
use crate::engine::Member;
use crate::valkey::commands;

/// How long before the pause's own limit this side stops waiting: the time to tell every
/// primary to resume.
const MARGIN: Duration = Duration::from_millis(500);
/// How often a member catching up to its paused primary is looked at.
const CATCH_UP_POLL: Duration = Duration::from_millis(20);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// One shard's capture, begun during the pause.
pub struct Begun {
    pub plan: ShardPlan,
    pub capture: backup::Begun,
    /// The keys its member held when it had caught up.
    pub keys: u64,
}

/// Every plan's capture begun at one instant, and how long writes were paused; or why not
/// (writes resumed either way).
pub async fn begin_all(
    client: &RedisClient,
    plans: &[ShardPlan],
    source_of: &(dyn Fn(&ShardPlan) -> backup::Source + Sync),
    window: Duration,
    options: &backup::CaptureOptions,
) -> Result<(Vec<Begun>, Duration), String> {
    let primaries: BTreeSet<SocketAddr> = plans.iter().map(|p| p.primary_address).collect();
    let started = Instant::now();
    let begun = tokio::time::timeout(window.saturating_sub(MARGIN), async {
        for primary in &primaries {
            pause(client, *primary, window).await?;
        }
        futures::future::try_join_all(
            plans
                .iter()
                .map(|plan| one(client, plan, source_of, options)),
        )
        .await
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "not every shard's capture began within the {}s write pause (maxWritePauseSeconds)",
            window.as_secs()
        ))
    });
    // Always, whatever happened: a primary that was not paused takes it as a no-op.
    for primary in &primaries {
        let unpause = commands::client_unpause();
        if let Err(error) = client.command(*primary, &unpause, COMMAND_TIMEOUT).await {
            tracing::warn!(%primary, %error, "CLIENT UNPAUSE failed; the pause ends at its own limit");
        }
    }
    let held = started.elapsed();
    begun.map(|begun| (begun, held))
}

async fn pause(client: &RedisClient, primary: SocketAddr, window: Duration) -> Result<(), String> {
    client
        .command(
            primary,
            &commands::client_pause_writes(window),
            COMMAND_TIMEOUT,
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("CLIENT PAUSE WRITE on the primary at {primary}: {e}"))
}

/// One shard: its primary's offset now that it is paused, its member caught up to it, its
/// capture begun at exactly that offset.
async fn one(
    client: &RedisClient,
    plan: &ShardPlan,
    source_of: &(dyn Fn(&ShardPlan) -> backup::Source + Sync),
    options: &backup::CaptureOptions,
) -> Result<Begun, String> {
    let at = |name: &str, address: SocketAddr| {
        let mut member = Member::new(plan.shard, 0, name.to_owned());
        member.address = Some(address);
        member.ready = true;
        member
    };
    let primary = at(&plan.primary_member, plan.primary_address);
    let target = observe::server(client, &primary, false).await?.offset;
    let member = at(&plan.member, plan.address);
    let keys = loop {
        let server = observe::server(client, &member, false).await?;
        if plan.from_primary || server.offset >= target {
            break server.keys;
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    };
    let capture = backup::begin(&source_of(plan), options)
        .await
        .map_err(|e| e.to_string())?;
    if i64::try_from(capture.offset).ok() != Some(target) {
        return Err(format!(
            "shard {}'s snapshot on {} began at offset {}, not at its primary's paused offset \
             {target} (a snapshot already under way was joined)",
            plan.shard, plan.member, capture.offset
        ));
    }
    Ok(Begun {
        plan: plan.clone(),
        capture,
        keys,
    })
}
