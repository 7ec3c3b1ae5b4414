//! Primaries kept apart. The scheduler spreads a cluster's first primaries, but failovers
//! (Valkey's own, or a roll's) can leave two primaries on one node or in one zone, where one
//! failure takes both shards' writes down together. When the cluster is otherwise steady and a
//! planned failover to an in-sync replica makes the arrangement strictly better, that failover
//! is the next step: one at a time, each only once the cluster is whole again, and never one that
//! makes anything worse, so it cannot go back and forth.
//!
//! A planned failover costs clients a write pause, and the usual cause of crowded primaries is a
//! failover that just cost them one: once the cluster holds data, the move waits until the
//! cluster has been steady for [`crate::engine::Desired::spread_after`]. Meanwhile the cluster is
//! steady (Ready), and its health says what will move and when ([`Health::spread_held`]). A
//! cluster that never held a key (one just formed) costs no one a pause, and spreads at once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::decision::{Action, Decision, Health, Reason};

use super::health;
use super::topology::{Live, Topology};

/// Where a primary's pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place<'a> {
    node: &'a str,
    zone: Option<&'a str>,
}

impl<'a> Place<'a> {
    fn of(l: &Live<'a>) -> Option<Self> {
        Some(Self {
            node: l.member.node_name.as_deref()?,
            zone: l.member.zone.as_deref(),
        })
    }
}

/// How crowded the primaries are: pairs of primaries that share a zone, then pairs that share
/// a node. A zone is the larger failure, so it weighs first (compared in field order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Crowding {
    zone_pairs: usize,
    node_pairs: usize,
}

fn crowding(places: &[Place<'_>]) -> Crowding {
    fn pairs<'a>(keys: impl Iterator<Item = &'a str>) -> usize {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for k in keys {
            *count.entry(k).or_default() += 1;
        }
        count.values().map(|n| n * (n - 1) / 2).sum()
    }
    Crowding {
        zone_pairs: pairs(places.iter().filter_map(|p| p.zone)),
        node_pairs: pairs(places.iter().map(|p| p.node)),
    }
}

/// The planned failover that spreads the primaries most, if one makes them strictly less
/// crowded; until the cluster has been steady for the hold, the steady report that says it
/// waits. Called only when the cluster is whole, every slot served and nothing else to do.
pub(super) fn spread_primaries(t: &Topology) -> Option<Decision> {
    let (action, message) = best_move(t)?;
    let hold = t.desired.spread_after;
    // A cluster that never held a key (a new one) pauses no one's writes: spread at once.
    let holds_data = t.desired.held_keys || t.live.iter().any(|l| l.state.keys() > 0);
    if holds_data && t.desired.steady_for < hold {
        return Some(Decision::Steady(Health {
            spread_held: Some(format!(
                "{message} once the cluster has been steady for {}",
                human(hold)
            )),
            ..health::health(t)
        }));
    }
    Some(Decision::act(action, Reason::SpreadingPrimaries, message))
}

/// `5m`, `90s`, `1m30s`.
fn human(d: Duration) -> String {
    let (m, s) = (d.as_secs() / 60, d.as_secs() % 60);
    match (m, s) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

/// The move that spreads the primaries most, and why, if one makes them strictly less crowded.
fn best_move(t: &Topology) -> Option<(Action, String)> {
    let primaries: Vec<&Live> = t
        .staying()
        .filter(|l| l.is_primary() && !l.slots().is_empty())
        .collect();
    // A primary whose place is unknown cannot be judged, nor can the others against it.
    let places: Vec<Place> = primaries
        .iter()
        .map(|p| Place::of(p))
        .collect::<Option<_>>()?;
    let now = crowding(&places);
    if now
        == (Crowding {
            zone_pairs: 0,
            node_pairs: 0,
        })
    {
        return None;
    }
    let mut best: Option<(Crowding, usize, &Live)> = None;
    for (i, primary) in primaries.iter().enumerate() {
        let candidates = t.live.iter().filter(|l| {
            l.staying()
                && l.primary_id() == Some(primary.id())
                && l.state.replica_in_sync()
                && !l.member.needs_restart()
        });
        for replica in candidates {
            let Some(there) = Place::of(replica) else {
                continue;
            };
            let mut after = places.clone();
            after[i] = there;
            let then = crowding(&after);
            if then < now && best.as_ref().is_none_or(|(b, _, _)| then < *b) {
                best = Some((then, i, replica));
            }
        }
    }
    let (_, i, replica) = best?;
    let (primary, here) = (primaries[i], places[i]);
    let shared = match here.zone {
        Some(zone) if places.iter().filter(|p| p.zone == here.zone).count() > 1 => {
            format!("zone {zone}")
        }
        _ => format!("node {}", here.node),
    };
    Some((
        Action::Failover {
            on_replica: replica.node_ref(),
            primary: primary.node_ref(),
        },
        format!(
            "{} shares {shared} with another primary; its replica {} on node {} takes over \
             with a planned failover",
            primary.name(),
            replica.name(),
            replica.member.node_name.as_deref().unwrap_or("?"),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(node: &'a str, zone: &'a str) -> Place<'a> {
        Place {
            node,
            zone: Some(zone),
        }
    }

    #[test]
    fn holds_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(300)), "5m");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_secs(45)), "45s");
    }

    #[test]
    fn crowding_counts_pairs_zones_first() {
        let spread = [at("a", "z1"), at("b", "z2"), at("c", "z3")];
        assert_eq!(
            crowding(&spread),
            Crowding {
                zone_pairs: 0,
                node_pairs: 0
            }
        );
        let one_node = [at("a", "z1"), at("a", "z1"), at("c", "z3")];
        assert_eq!(
            crowding(&one_node),
            Crowding {
                zone_pairs: 1,
                node_pairs: 1
            }
        );
        // Two nodes of one zone: better than one node, worse than two zones.
        let one_zone = [at("a", "z1"), at("b", "z1"), at("c", "z3")];
        assert!(crowding(&one_zone) < crowding(&one_node));
        assert!(crowding(&spread) < crowding(&one_zone));
        // Without zones only the nodes count.
        let no_zones = [
            Place {
                node: "a",
                zone: None,
            },
            Place {
                node: "a",
                zone: None,
            },
        ];
        assert_eq!(
            crowding(&no_zones),
            Crowding {
                zone_pairs: 0,
                node_pairs: 1
            }
        );
    }
}
