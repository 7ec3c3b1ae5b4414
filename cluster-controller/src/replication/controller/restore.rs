//! A ValkeyReplication's `spec.restoreFrom`, in its pass (docs/design/backup.md, "Restore"): the
//! shared restore ([`crate::parent::restoring`]) with what only a replication knows: one shard,
//! whose first member (index 0) loads the snapshot and is the member the engine must make the
//! primary ([`crate::replication::engine::Spec::restored`]); the restore is served once that
//! member is the recorded primary and says so.

use std::sync::Arc;

use kube::ResourceExt;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use super::context::Context;
use super::desired::member_name;
use crate::client::ValkeyClient;
use crate::parent::context::ParentMemory;
use crate::parent::restore::ShardRestore;
use crate::parent::restoring::{self, Restoring};
use crate::replication::engine::observe::Observation;

/// What the shared restore needs of a ValkeyReplication.
pub fn restoring(replication: &ValkeyReplication) -> Restoring<'_, ValkeyReplication> {
    Restoring {
        object: replication,
        kind: "ValkeyReplication",
        from: replication.spec.restore_from.as_ref(),
        replicas: u32::try_from(replication.spec.replicas.max(0)).unwrap_or(0),
        persistent: replication.spec.persistence.enabled,
    }
}

/// The member that loads the snapshot: the first.
fn first_member(replication: &ValkeyReplication) -> String {
    member_name(&replication.name_any(), 0)
}

/// The member the engine must make the first primary while the restore runs (a plan in hand):
/// the one that loads the backup.
pub fn restored_member(
    replication: &ValkeyReplication,
    plan: Option<&[ShardRestore]>,
) -> Option<String> {
    plan.map(|_| first_member(replication))
}

/// Whether this pass sees the restore served: the restored member is the recorded primary,
/// answers as primary and has its data loaded.
pub fn served_now(first: &str, recorded: Option<&str>, observed: &Observation) -> bool {
    recorded == Some(first)
        && observed
            .state(first)
            .is_some_and(|s| s.is_primary() && !s.loading)
}

/// After the engine's pass: the restore's end recorded once served, the first member's
/// append-only file noted, and turned on live where persistence is wanted.
pub async fn after_pass<C: ValkeyClient>(
    ctx: &Context,
    replication: &ValkeyReplication,
    memory: &ParentMemory,
    client: &C,
    recorded: Option<&str>,
    observed: &Observation,
    existing: &[Arc<ValkeyNode>],
) {
    let parent = restoring(replication);
    if parent.from.is_none() {
        return;
    }
    let first = first_member(replication);
    let served = served_now(&first, recorded, observed);
    let seen = observed.state(&first).map(|s| (s.address, s.aof));
    restoring::after_pass(
        &ctx.client,
        &parent,
        memory,
        client,
        served,
        existing,
        [(first, seen)],
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::engine::observe::Reach;
    use crate::replication::engine::server::ServerState;
    use crate::valkey::info;

    fn state(text: &str) -> ServerState {
        let info = info::parse(text).unwrap_or_else(|e| panic!("{e}"));
        ServerState::from_info(
            "10.213.1.10:6379".parse().unwrap_or_else(|e| panic!("{e}")),
            &info,
            3000,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    const PRIMARY: &str = "# Server\r\nvalkey_version:9.1.2\r\n# Persistence\r\nloading:0\r\naof_enabled:0\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\nmaster_replid:ab76ec6fcd08ac846c4cbbe79c044274f69c56b6\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\n";

    fn observed(text: &str) -> Observation {
        let mut o = Observation::default();
        o.members
            .insert("rr-0".into(), Reach::Up(Box::new(state(text))));
        o
    }

    #[test]
    fn the_restore_is_served_once_the_restored_member_is_the_recorded_primary_with_its_data() {
        let primary = observed(PRIMARY);
        assert!(served_now("rr-0", Some("rr-0"), &primary));
        assert!(
            !served_now("rr-0", None, &primary),
            "promoted, not yet recorded"
        );
        assert!(
            !served_now("rr-0", Some("rr-1"), &primary),
            "another primary"
        );
        assert!(
            !served_now("rr-0", Some("rr-0"), &Observation::default()),
            "silent"
        );
        let loading = observed(&PRIMARY.replace("loading:0", "loading:1"));
        assert!(!served_now("rr-0", Some("rr-0"), &loading));
        let parked = PRIMARY.replace(
            "role:master",
            "role:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:0\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:1\r\nmaster_link_down_since_seconds:-1",
        );
        assert!(!served_now("rr-0", Some("rr-0"), &observed(&parked)));
    }

    #[test]
    fn the_replications_servers_say_what_their_append_only_file_is() {
        use crate::parent::restore::Aof;
        assert_eq!(state(PRIMARY).aof, Some(Aof::Off));
        let written = PRIMARY.replace(
            "aof_enabled:0",
            "aof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\naof_last_bgrewrite_status:ok",
        );
        assert_eq!(state(&written).aof, Some(Aof::Written));
        assert_eq!(state(&PRIMARY.replace("aof_enabled:0\r\n", "")).aof, None);
    }
}
