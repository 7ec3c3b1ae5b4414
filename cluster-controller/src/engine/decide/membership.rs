//! Everyone knows everyone, at the right address: CLUSTER MEET to introduce new members and
//! to re-introduce members whose address changed, waiting for handshakes and gossip instead
//! of repeating commands.
//!
//! One member, the seed, is met with every other member directly; the rest learn of each
//! other by gossip. A stale address (the member restarted elsewhere) is fixed by a MEET from
//! whoever holds it, since gossip only corrects addresses of nodes it already considers down.

use std::net::IpAddr;

use crate::engine::decision::{Action, Decision, Reason};
use crate::valkey::cluster_nodes::ClusterNode;

use super::topology::{Live, Topology, at};

pub(super) fn meet(t: &Topology) -> Option<Decision> {
    let staying: Vec<&Live> = t.staying().collect();
    let seed = seed(&staying)?;
    // Leaving members take part only while the staying ones still know them (they may still
    // hold slots to drain); once forgotten they are never introduced again.
    let group: Vec<&Live> = t
        .live
        .iter()
        .filter(|l| l.staying() || staying.iter().any(|s| s.entry(l.id()).is_some()))
        .collect();
    let forming = t.assigned_anywhere().is_empty();
    let mut pending = None;

    for b in group.iter().filter(|b| b.id() != seed.id()) {
        if let Some(decision) = link(seed, b, b.staying(), forming, &mut pending) {
            return Some(decision);
        }
        // The other direction only once the seed's own MEET had its chance: a node learns
        // of whoever met it.
        if seed.entry(b.id()).is_some()
            && let Some(decision) = link(b, seed, true, forming, &mut pending)
        {
            return Some(decision);
        }
    }
    for a in &group {
        for b in group.iter().filter(|b| b.id() != a.id()) {
            // Looked up once: members² pairs, each in a view of as many lines.
            let entry = a.entry(b.id());
            if let Some(decision) = link_known(a, b, entry, false, forming, &mut pending) {
                return Some(decision);
            }
            if entry.is_none() && a.staying() && b.staying() && pending.is_none() {
                pending = Some(Decision::wait(
                    Reason::Joining,
                    format!(
                        "waiting for gossip to introduce {} to {}",
                        b.name(),
                        a.name()
                    ),
                ));
            }
        }
    }
    for b in &group {
        if knows_own_address(b) {
            continue;
        }
        // A node learns its own address from a MEET it receives (Valkey takes it from the
        // socket the MEET arrives on); pick someone who already reaches it. With nobody (a
        // primary left alone by a scale-in, restarted elsewhere), it meets itself: the
        // handshake ends as soon as its own reply names it, and it announces the new address
        // rather than send every client to the old one for ever.
        let introducer = group
            .iter()
            .filter(|a| a.id() != b.id())
            .find(|a| a.entry(b.id()).is_some_and(|e| at(e, b.address())))
            .unwrap_or(b);
        if introducer.handshaking_with(b.address()) {
            pending.get_or_insert_with(|| meeting(introducer, b));
            continue;
        }
        return Some(Decision::act(
            Action::Meet {
                on: introducer.node_ref(),
                peer: b.address(),
                bus_port: bus_port(b),
            },
            Reason::NodeAddressChanged,
            format!(
                "{} announces an old address for itself; a MEET from {} tells it {}",
                b.name(),
                introducer.name(),
                b.address()
            ),
        ));
    }
    pending
}

/// The member the others are introduced to: the one whose view holds the most of the
/// cluster (slots, then nodes), so a fresh member never becomes the centre of a running
/// cluster.
fn seed<'t, 'a>(staying: &[&'t Live<'a>]) -> Option<&'t Live<'a>> {
    staying.iter().copied().min_by_key(|l| {
        let view = l.view();
        let known = view.nodes().iter().filter(|n| !n.flags.handshake).count();
        (
            std::cmp::Reverse(view.assigned_slots().count()),
            std::cmp::Reverse(known),
            l.member.shard,
            l.member.index,
        )
    })
}

/// Makes sure `from` knows `to` at `to`'s address: a MEET when it holds a stale address, or
/// (when `introduce`) when it does not know `to` at all; a wait while a handshake runs.
fn link(
    from: &Live,
    to: &Live,
    introduce: bool,
    forming: bool,
    pending: &mut Option<Decision>,
) -> Option<Decision> {
    link_known(from, to, from.entry(to.id()), introduce, forming, pending)
}

/// [`link`], with `from`'s entry for `to` already looked up.
fn link_known(
    from: &Live,
    to: &Live,
    entry: Option<&ClusterNode>,
    introduce: bool,
    forming: bool,
    pending: &mut Option<Decision>,
) -> Option<Decision> {
    let (reason, message) = match entry {
        Some(entry) if at(entry, to.address()) => return None,
        Some(_) => (
            Reason::NodeAddressChanged,
            format!(
                "{} knows {} at an old address; meeting it at {}",
                from.name(),
                to.name(),
                to.address()
            ),
        ),
        None if !introduce => return None,
        None => (
            if forming {
                Reason::Forming
            } else {
                Reason::Joining
            },
            format!("introducing {} to {}", to.name(), from.name()),
        ),
    };
    if from.handshaking_with(to.address()) {
        pending.get_or_insert_with(|| meeting(from, to));
        return None;
    }
    Some(Decision::act(
        Action::Meet {
            on: from.node_ref(),
            peer: to.address(),
            bus_port: bus_port(to),
        },
        reason,
        message,
    ))
}

fn meeting(from: &Live, to: &Live) -> Decision {
    Decision::wait(
        Reason::Joining,
        format!("{} is in a handshake with {}", from.name(), to.name()),
    )
}

/// The bus port `node` announces for itself: each cluster's is its own (`cluster-port`), so a
/// MEET names it rather than letting Valkey assume the client port + 10000.
fn bus_port(node: &Live) -> u16 {
    match node.me().bus_port {
        0 => node.address().port().saturating_add(10000),
        port => port,
    }
}

/// True when the node's own line shows the address it is reached at. A node that was never
/// met shows no address at all; that is the seed's MEET to fix, not this check's.
fn knows_own_address(node: &Live) -> bool {
    match node.me().ip.as_deref() {
        None => true,
        Some(ip) => ip.parse::<IpAddr>().ok() == Some(node.address().ip()),
    }
}
