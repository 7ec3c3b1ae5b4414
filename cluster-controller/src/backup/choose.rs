//! Which member each shard is captured from, whether a backup may start at all, and the names
//! its objects take. Pure: it reads what [`super::observe`] found on the servers.

use std::net::SocketAddr;
use valkey_api::v1alpha1::StatusReason;

use crate::parent::conditions::Problem;
use crate::valkey::slots::SlotSet;

/// What one member's server said, as far as a backup cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The ValkeyNode.
    pub member: String,
    /// The member's shard (0 for a ValkeyReplication).
    pub shard: u32,
    pub address: SocketAddr,
    /// The ValkeyNode is Ready.
    pub ready: bool,
    pub primary: bool,
    /// A replica's primary, as it names it (`master_host`).
    pub primary_host: Option<String>,
    /// A replica's link to its primary is up, it is neither loading nor full-syncing.
    pub in_step: bool,
    /// A primary's `master_repl_offset`; a replica's `slave_repl_offset`.
    pub offset: i64,
    /// The replication histories its offset counts in: `master_replid` (a replica shares its
    /// primary's) and, after a failover, `master_replid2`, the history it continues.
    pub history: Vec<String>,
    pub keys: u64,
    pub version: String,
    /// In cluster mode: its node ID and the slots it serves (a primary's).
    pub node_id: Option<String>,
    pub slots: SlotSet,
    /// In cluster mode: a slot it migrates or imports, or a slot migration job still running.
    pub slots_moving: bool,
}

/// The member a shard is captured from, and what the shard was when the backup began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    pub shard: u32,
    pub member: String,
    pub address: SocketAddr,
    pub from_primary: bool,
    pub node_id: Option<String>,
    pub primary_member: String,
    pub primary_address: SocketAddr,
    pub primary_node_id: Option<String>,
    /// The primary's offset when the backup began: the capture waits until its member has
    /// reached it, so that every write acknowledged before then is in the snapshot.
    pub primary_offset: i64,
    /// The history that offset counts in (the primary's `master_replid` then).
    pub primary_history: Option<String>,
    pub slots: SlotSet,
}

/// Whether a backup can start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Start(Vec<ShardPlan>),
    /// Not now (slots moving, a shard without a primary or an in-step replica yet): look again.
    Wait(Problem),
    /// Never, as the spec stands.
    Fail(Problem),
}

/// The plan for `servers` (every member that answered; `unanswered` names the others) of a source
/// with `shards` shards. `allow_primary`: the spec's `allowPrimary`.
pub fn plan(servers: &[Server], unanswered: &[String], shards: u32, allow_primary: bool) -> Plan {
    if let Some(moving) = servers.iter().find(|s| s.slots_moving) {
        return Plan::Wait(Problem {
            reason: StatusReason::SlotsMoving,
            message: format!(
                "Slots are moving between shards ({} takes part): the backup starts once they have moved.",
                moving.member
            ),
        });
    }
    let mut plans = Vec::new();
    for shard in 0..shards {
        match shard_plan(servers, unanswered, shard, allow_primary) {
            Plan::Start(mut one) => plans.append(&mut one),
            other => return other,
        }
    }
    Plan::Start(plans)
}

/// The plan of shard `shard` alone (slots moving are [`plan`]'s to check): `Start` with one
/// entry, or why not.
pub fn shard_plan(
    servers: &[Server],
    unanswered: &[String],
    shard: u32,
    allow_primary: bool,
) -> Plan {
    let members: Vec<&Server> = servers.iter().filter(|s| s.shard == shard).collect();
    let primaries: Vec<&&Server> = members.iter().filter(|s| s.primary).collect();
    let [primary] = primaries.as_slice() else {
        let waiting: Vec<&str> = unanswered
            .iter()
            .map(String::as_str)
            .filter(|m| shard_of(m) == Some(shard))
            .collect();
        return Plan::Wait(Problem {
            reason: StatusReason::NoPrimary,
            message: format!(
                "Shard {shard} has {} primaries among the members that answered{}: the backup starts once it has one.",
                primaries.len(),
                if waiting.is_empty() {
                    String::new()
                } else {
                    format!(" ({} did not answer)", waiting.join(", "))
                }
            ),
        });
    };
    let primary_ip = primary.address.ip().to_string();
    let best = members
        .iter()
        .filter(|s| {
            !s.primary
                && s.ready
                && s.in_step
                && s.primary_host.as_deref() == Some(primary_ip.as_str())
        })
        // The most of its primary's writes; ties by name, so that a retry picks the same.
        .max_by(|a, b| a.offset.cmp(&b.offset).then(b.member.cmp(&a.member)));
    let chosen = match best {
        Some(replica) => replica,
        None if allow_primary => primary,
        None if members.iter().any(|s| !s.primary) || shard_has_unanswered(unanswered, shard) => {
            return Plan::Wait(Problem {
                reason: StatusReason::NoInSyncReplica,
                message: format!(
                    "Shard {shard} has no replica that is ready and in step with its primary {} yet: the backup starts once one is (or set allowPrimary: true to capture from the primary).",
                    primary.member
                ),
            });
        }
        None => {
            return Plan::Fail(Problem {
                reason: StatusReason::NoReplica,
                message: format!(
                    "Shard {shard} has no replica to capture from, and allowPrimary is false: give the source replicas, or create a ValkeyBackup with allowPrimary: true (the primary then forks to write its snapshot)."
                ),
            });
        }
    };
    Plan::Start(vec![ShardPlan {
        shard,
        member: chosen.member.clone(),
        address: chosen.address,
        from_primary: chosen.primary,
        node_id: chosen.node_id.clone(),
        primary_member: primary.member.clone(),
        primary_address: primary.address,
        primary_node_id: primary.node_id.clone(),
        primary_offset: primary.offset,
        primary_history: primary.history.first().cloned(),
        slots: primary.slots.clone(),
    }])
}

/// Where a chosen member stands against the primary's offset of the backup's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// It has every write acknowledged before the start (or it is the primary).
    Reached,
    /// Not yet: look again.
    Behind,
    /// Its offset counts in another history than the start's (its primary restarted without
    /// its history, or two failovers since): no offset of it can show it has those writes, and
    /// waiting would only run out the clock.
    OtherHistory,
}

/// Whether `server`, chosen by `plan`, has caught up with the backup's start.
pub fn catch_up(plan: &ShardPlan, server: &Server) -> CatchUp {
    if plan.from_primary {
        return CatchUp::Reached;
    }
    if let Some(start) = &plan.primary_history
        && !server.history.iter().any(|id| id == start)
    {
        return CatchUp::OtherHistory;
    }
    if server.offset >= plan.primary_offset {
        CatchUp::Reached
    } else {
        CatchUp::Behind
    }
}

fn shard_has_unanswered(unanswered: &[String], shard: u32) -> bool {
    unanswered.iter().any(|m| shard_of(m) == Some(shard))
}

/// The shard of a member named `<parent>-<shard>-<index>` (a cluster's); a replication's
/// members (`<parent>-<index>`) read as their index, which only ever names shard 0's waiting.
fn shard_of(member: &str) -> Option<u32> {
    let mut parts = member.rsplit('-');
    parts.next()?;
    parts.next()?.parse().ok()
}

/// The folder of a backup's objects under the store's prefix.
pub fn location(namespace: &str, source: &str, backup: &str, uid: &str) -> String {
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("{namespace}/{source}/{backup}-{short}")
}

/// A shard's object name, relative to the backup's location.
pub fn shard_object(shard: u32) -> String {
    format!("shard-{shard}.rdb")
}

/// Bytes in binary units, as the SIZE column shows them.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Slot ranges as the status writes them: `0-5460` or `0-99,200-299`.
pub fn slot_text(slots: &SlotSet) -> String {
    slots
        .ranges()
        .iter()
        .map(|r| format!("{}-{}", r.start(), r.end()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Slot ranges as the manifest writes them.
pub fn slot_pairs(slots: &SlotSet) -> Vec<[u16; 2]> {
    slots
        .ranges()
        .iter()
        .map(|r| [r.start(), r.end()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::valkey::slots::SlotRange;

    fn server(member: &str, shard: u32, ip: u8, primary: bool, offset: i64) -> Server {
        Server {
            history: vec![HISTORY.to_owned()],
            member: member.into(),
            shard,
            address: SocketAddr::from(([10, 0, 0, ip], 6379)),
            ready: true,
            primary,
            primary_host: (!primary).then(|| format!("10.0.0.{}", ip - ip % 10)),
            in_step: true,
            offset,
            keys: 0,
            version: "9.1.0".into(),
            node_id: None,
            slots: if primary {
                SlotSet::from_range(SlotRange::new(0, 99).expect("range"))
            } else {
                SlotSet::new()
            },
            slots_moving: false,
        }
    }

    const HISTORY: &str = "8d1c4f0e2b3a49d6a7e5c1b0f9e8d7c6b5a49382";

    /// A replica on the start's history waits for the offset, one that continues it after a
    /// failover (`master_replid2`) too; one on another history (its primary back without its
    /// history) cannot show it has the start's writes: the capture gives up on it at once
    /// instead of waiting out its minute.
    #[test]
    fn the_catch_up_compares_offsets_only_within_the_starts_history() {
        let servers = [
            server("c-0-0", 0, 10, true, 500),
            server("c-0-1", 0, 11, false, 500),
        ];
        let plan = start(plan(&servers, &[], 1, false)).remove(0);
        assert_eq!(plan.primary_history.as_deref(), Some(HISTORY));
        let mut member = server("c-0-1", 0, 11, false, 400);
        assert_eq!(catch_up(&plan, &member), CatchUp::Behind);
        member.offset = 500;
        assert_eq!(catch_up(&plan, &member), CatchUp::Reached);
        member.history = vec!["f".repeat(40), HISTORY.to_owned()];
        member.offset = 620;
        assert_eq!(
            catch_up(&plan, &member),
            CatchUp::Reached,
            "after a failover"
        );
        member.history = vec!["e".repeat(40)];
        member.offset = 9000;
        assert_eq!(
            catch_up(&plan, &member),
            CatchUp::OtherHistory,
            "a larger offset of another history proves nothing"
        );
    }

    fn start(plan: Plan) -> Vec<ShardPlan> {
        match plan {
            Plan::Start(plans) => plans,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_in_step_replica_with_the_highest_offset_is_chosen_and_the_primary_offset_kept() {
        let mut after_failover = server("c-1-0", 1, 20, false, 70);
        after_failover.primary_host = Some("10.0.0.21".into());
        let servers = [
            server("c-0-0", 0, 10, true, 500),
            server("c-0-1", 0, 11, false, 480),
            server("c-0-2", 0, 12, false, 490),
            after_failover,
            server("c-1-1", 1, 21, true, 90),
        ];
        let plans = start(plan(&servers, &[], 2, false));
        assert_eq!(plans[0].member, "c-0-2");
        assert_eq!(plans[0].primary_offset, 500);
        assert!(!plans[0].from_primary);
        // Shard 1's primary is its second member (after a failover): still found by role.
        assert_eq!(plans[1].member, "c-1-0");
        assert_eq!(plans[1].primary_member, "c-1-1");
        assert_eq!(slot_text(&plans[1].slots), "0-99");
    }

    #[test]
    fn a_replica_out_of_step_or_not_ready_or_of_another_primary_is_never_chosen() {
        let mut behind_link = server("c-0-1", 0, 11, false, 900);
        behind_link.in_step = false;
        let mut not_ready = server("c-0-2", 0, 12, false, 900);
        not_ready.ready = false;
        let mut elsewhere = server("c-0-3", 0, 13, false, 900);
        elsewhere.primary_host = Some("10.0.0.99".into());
        let servers = [
            server("c-0-0", 0, 10, true, 500),
            behind_link,
            not_ready,
            elsewhere,
        ];
        assert!(matches!(
            plan(&servers, &[], 1, false),
            Plan::Wait(Problem { ref reason, .. }) if reason.as_str() == "NoInSyncReplica"
        ));
        let plans = start(plan(&servers, &[], 1, true));
        assert!(plans[0].from_primary && plans[0].member == "c-0-0");
    }

    #[test]
    fn a_shard_without_replicas_fails_unless_the_primary_is_allowed() {
        let servers = [server("c-0-0", 0, 10, true, 5)];
        let Plan::Fail(problem) = plan(&servers, &[], 1, false) else {
            panic!("expected a failure")
        };
        assert_eq!(problem.reason.as_str(), "NoReplica");
        assert!(problem.message.contains("allowPrimary"));
        assert!(start(plan(&servers, &[], 1, true))[0].from_primary);
    }

    #[test]
    fn moving_slots_or_a_missing_primary_wait() {
        let mut moving = server("c-1-0", 1, 20, true, 5);
        moving.slots_moving = true;
        let servers = [server("c-0-0", 0, 10, true, 5), moving];
        assert!(matches!(
            plan(&servers, &[], 2, true),
            Plan::Wait(Problem { ref reason, .. }) if reason.as_str() == "SlotsMoving"
        ));
        let servers = [server("c-0-1", 0, 11, false, 5)];
        let Plan::Wait(problem) = plan(&servers, &["c-0-0".into()], 1, true) else {
            panic!("expected a wait")
        };
        assert!(
            problem.message.contains("c-0-0 did not answer"),
            "{problem:?}"
        );
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(
            location(
                "prod",
                "orders",
                "nightly",
                "1a2b3c4d-5e6f-0000-0000-000000000000"
            ),
            "prod/orders/nightly-1a2b3c4d"
        );
        assert_eq!(shard_object(2), "shard-2.rdb");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(522_400_000), "498.2 MiB");
        let slots = SlotSet::from_ranges([
            SlotRange::new(0, 99).expect("range"),
            SlotRange::new(200, 299).expect("range"),
        ]);
        assert_eq!(slot_text(&slots), "0-99,200-299");
        assert_eq!(slot_pairs(&slots), vec![[0, 99], [200, 299]]);
    }
}
