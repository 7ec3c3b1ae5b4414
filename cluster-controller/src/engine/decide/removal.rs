//! Members that leave (their shard is gone, or they are surplus replicas): once they serve no
//! slot, every staying node forgets them (all within Valkey's 60 s ban on re-learning a
//! forgotten node), then their ValkeyNodes are deleted.

use crate::engine::decision::{Action, Decision, Reason};
use crate::engine::member::Place;

use super::topology::Topology;

pub(super) fn remove_leaving(t: &Topology) -> Option<Decision> {
    let leaving_live = t.live.iter().filter(|l| l.place != Place::Staying);
    for member in leaving_live.clone() {
        let mut serving = member.slots().clone();
        for e in t.staying().filter_map(|l| l.entry(member.id())) {
            serving.union_with(&e.slots);
        }
        if !serving.is_empty() {
            return Some(Decision::wait(
                Reason::Draining,
                format!("{} still serves slots {serving}", member.name()),
            ));
        }
    }
    for member in leaving_live {
        let Some(on) = t.staying().find(|s| s.entry(member.id()).is_some()) else {
            continue;
        };
        if on.primary_id() == Some(member.id()) {
            return Some(Decision::wait(
                Reason::AttachingReplicas,
                format!(
                    "{} still replicates {}, which is leaving",
                    on.name(),
                    member.name()
                ),
            ));
        }
        return Some(Decision::act(
            Action::Forget {
                on: on.node_ref(),
                node_id: member.id().clone(),
            },
            Reason::RemovingNodes,
            format!("{} forgets {}, which is leaving", on.name(), member.name()),
        ));
    }
    let leaving = t
        .members
        .iter()
        .find(|m| t.desired.place(m) != Place::Staying)?;
    Some(Decision::act(
        Action::DeleteMember {
            member: leaving.name.clone(),
        },
        Reason::RemovingNodes,
        format!("{} is drained and forgotten", leaving.name),
    ))
}
