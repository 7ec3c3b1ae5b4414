//! Observations built out of the captured replies in `fixtures/`, for the pure decision's tests.
//!
//! A capture holds one node's CLUSTER NODES; the view of another node of the same cluster at
//! the same moment is the same lines with the `myself` flag on that node's line, which is how
//! the other members' views are made here. Where a situation was not captured (a fresh node,
//! a primary suspected failing while its replica is alive) the capture is changed in the one
//! field that differs, and the test says so.

use std::net::SocketAddr;

use cluster_controller::engine::{
    Decision, Desired, Member, NodeState, Observation, Reach, Scope, decide, judge_in,
};
use cluster_controller::valkey::{cluster_info, cluster_nodes, info};

pub const PORT: u16 = 7100;

pub fn addr(ip: &str) -> SocketAddr {
    format!("{ip}:{PORT}").parse().expect("address")
}

/// The capture's lines with `myself` moved to the line of `ip`, without the lines of `drop`.
pub fn view_of(capture: &str, ip: &str, drop: &[&str]) -> String {
    capture
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !drop.iter().any(|d| l.contains(&format!(" {d}:"))))
        .map(|line| {
            let mut fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
            let mut flags: Vec<&str> = fields[2].split(',').filter(|f| *f != "myself").collect();
            if fields[1].starts_with(&format!("{ip}:")) {
                flags.insert(0, "myself");
            }
            fields[2] = flags.join(",");
            fields.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One member's observed state: its view of `capture`, and INFO of a primary or a replica
/// from the same capture run.
pub fn node(version: &str, capture: &str, ip: &str, drop: &[&str]) -> NodeState {
    let nodes = cluster_nodes::parse(&view_of(capture, ip, drop)).expect("view");
    let role = if nodes.myself().expect("myself").is_replica() {
        "replica"
    } else {
        "primary"
    };
    let info = info::parse(&super::text(&format!("{version}/info_{role}"))).expect("info");
    let cluster_info =
        cluster_info::parse(&super::text(&format!("{version}/cluster_info_ok"))).expect("info");
    NodeState::new(addr(ip), nodes, info, cluster_info, 100, Vec::new()).expect("state")
}

pub fn member(shard: u32, index: u32, ip: &str) -> Member {
    let mut m = Member::new(shard, index, format!("c-{shard}-{index}"));
    m.address = Some(addr(ip));
    m.ready = true;
    for revision in [
        &mut m.current_revision,
        &mut m.desired_revision,
        &mut m.allowed_revision,
    ] {
        *revision = Some("r1".into());
    }
    m
}

pub struct World {
    pub members: Vec<Member>,
    pub observed: Observation,
}

impl World {
    /// Every member sees `capture` (minus `drop`).
    pub fn new(version: &str, capture: &str, members: Vec<Member>, drop: &[&str]) -> Self {
        let observed = Observation {
            fence_user: None,
            members: members
                .iter()
                .map(|m| {
                    let ip = m.address.expect("address").ip().to_string();
                    let state = node(version, capture, &ip, drop);
                    (m.name.clone(), Reach::Up(Box::new(state)))
                })
                .collect(),
        };
        Self { members, observed }
    }

    pub fn down(&mut self, name: &str) {
        let m = self
            .members
            .iter_mut()
            .find(|m| m.name == name)
            .expect("member");
        m.ready = false;
        m.address = None;
        self.observed
            .members
            .insert(name.to_owned(), Reach::NoAddress);
    }

    pub fn decide(&self, desired: Desired) -> Decision {
        decide(&desired, &self.members, &self.observed)
    }

    /// The decision of a pass that may apply only the rules of `scope`.
    pub fn decide_in(&self, scope: Scope, desired: Desired) -> Decision {
        judge_in(scope, &desired, &self.members, &self.observed).decision
    }
}

/// The v9 capture: primaries .61 .62 .63 with replicas .64 .65 .66, and .67 met but empty.
pub fn v9_members() -> Vec<Member> {
    vec![
        member(0, 0, "127.0.0.61"),
        member(0, 1, "127.0.0.64"),
        member(1, 0, "127.0.0.62"),
        member(1, 1, "127.0.0.65"),
        member(2, 0, "127.0.0.63"),
        member(2, 1, "127.0.0.66"),
    ]
}

pub const THREE_BY_ONE: Desired = Desired::new(3, 1);

pub fn v9_primary() -> String {
    super::text("v9/cluster_nodes_primary")
}
