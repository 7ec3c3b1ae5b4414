//! The members as the Kubernetes side sees them (one ValkeyNode each) and what the spec wants.

use std::net::SocketAddr;

/// One ValkeyNode, as the Kubernetes side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `<cluster>-<shard>-<index>`.
    pub name: String,
    pub shard: u32,
    pub index: u32,
    /// `status.podIP:6379` when known.
    pub address: Option<SocketAddr>,
    /// `status.ready`: the pod is Ready and answered PING.
    pub ready: bool,
    /// The pod template revision the member runs.
    pub current_revision: Option<String>,
    /// The pod template revision the member should run.
    pub desired_revision: Option<String>,
    /// What the parent currently allows (`spec.allowedRevision`).
    pub allowed_revision: Option<String>,
}

impl Member {
    /// A member with no revisions, for callers that do not roll.
    pub fn new(shard: u32, index: u32, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            shard,
            index,
            address: None,
            ready: false,
            current_revision: None,
            desired_revision: None,
            allowed_revision: None,
        }
    }

    /// Runs an older revision than wanted and has not been released to restart yet.
    pub fn needs_restart(&self) -> bool {
        self.is_outdated() && self.allowed_revision != self.desired_revision
    }

    /// Released to restart (`allowed == desired`) but not yet running the desired revision.
    pub fn is_restarting(&self) -> bool {
        self.is_outdated() && self.allowed_revision == self.desired_revision
    }

    fn is_outdated(&self) -> bool {
        matches!((&self.current_revision, &self.desired_revision),
            (Some(current), Some(desired)) if current != desired)
    }
}

/// The topology the spec asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desired {
    pub shards: u32,
    /// Replicas per shard: each shard has members with index `0..=replicas`.
    pub replicas: u32,
}

/// Where a member stands relative to [`Desired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Part of the wanted topology.
    Staying,
    /// Its shard is `>= shards`: drain, forget, delete.
    LeavingShard,
    /// Its index is `> replicas` in a staying shard: forget, delete (after a failover if it
    /// is the primary).
    Surplus,
}

impl Desired {
    pub fn place(&self, member: &Member) -> Place {
        if member.shard >= self.shards {
            Place::LeavingShard
        } else if member.index > self.replicas {
            Place::Surplus
        } else {
            Place::Staying
        }
    }

    /// The `(shard, index)` pairs the spec asks for.
    pub fn slots_of_members(&self) -> impl Iterator<Item = (u32, u32)> + use<> {
        let replicas = self.replicas;
        (0..self.shards).flat_map(move |shard| (0..=replicas).map(move |index| (shard, index)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places() {
        let desired = Desired {
            shards: 2,
            replicas: 1,
        };
        assert_eq!(desired.place(&Member::new(1, 1, "c-1-1")), Place::Staying);
        assert_eq!(desired.place(&Member::new(1, 2, "c-1-2")), Place::Surplus);
        assert_eq!(
            desired.place(&Member::new(2, 0, "c-2-0")),
            Place::LeavingShard
        );
        assert_eq!(desired.slots_of_members().count(), 4);
    }

    #[test]
    fn revisions() {
        let mut m = Member::new(0, 0, "c-0-0");
        assert!(!m.needs_restart() && !m.is_restarting());
        m.current_revision = Some("a".into());
        m.desired_revision = Some("b".into());
        m.allowed_revision = Some("a".into());
        assert!(m.needs_restart());
        m.allowed_revision = Some("b".into());
        assert!(m.is_restarting() && !m.needs_restart());
        m.current_revision = Some("b".into());
        assert!(!m.is_restarting() && !m.needs_restart());
    }
}
