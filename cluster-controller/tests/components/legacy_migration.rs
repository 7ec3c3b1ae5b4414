//! The pre-9 slot migration machine: against the views Valkey 8.0 really showed at each
//! command, as a table over every state, and in a model that interleaves client writes,
//! gossip and aborts with the machine's steps.

use crate::common;

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use cluster_controller::plan::migration::command::SetSlot;
use cluster_controller::plan::migration::legacy::{Blocked, Intent, Observed, Step, next_step};
use cluster_controller::valkey::cluster_nodes::{self, NodeId, SlotView};

/// A node id spelled from a letter (its byte in hex, repeated), so tests read 's', 't', 'x'.
fn id(c: char) -> NodeId {
    NodeId::parse(&format!("{:02x}", c as u8).repeat(20)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// From the fixtures: the step the machine picks at each captured stage is the command that was
// really sent next.

fn observed_at(stage: &str, intent: Intent) -> Observed {
    let slot: u16 = common::text("v8/setslot_slot").trim().parse().unwrap();
    let view = |role: &str| {
        cluster_nodes::parse(&common::text(&format!("v8/setslot_{stage}_{role}"))).unwrap()
    };
    let (source, target, other) = (view("source"), view("target"), view("other"));
    let me = |nodes: &cluster_nodes::ClusterNodes| nodes.myself().unwrap().id.clone();
    Observed {
        slot,
        source: me(&source),
        target: me(&target),
        source_view: source.slot_view(slot),
        target_view: target.slot_view(slot),
        keys_in_source: common::int(&format!("v8/setslot_{stage}_source_keys.resp2")),
        keys_in_target: common::int(&format!("v8/setslot_{stage}_target_keys.resp2")),
        others: vec![(me(&other), other.slot_view(slot).owner)],
        intent,
    }
}

#[test]
fn follows_the_real_migration_step_by_step() {
    let o = observed_at("0_stable", Intent::Complete);
    let (s, t) = (o.source.clone(), o.target.clone());
    let set = |node: &NodeId, action| Step::SetSlot {
        node: node.clone(),
        action,
    };
    let migrate = Step::MigrateKeys {
        from: s.clone(),
        to: t.clone(),
    };
    assert_eq!(
        next_step(&o),
        Step::Open {
            source: s.clone(),
            target: t.clone()
        }
    );
    assert_eq!(
        Step::Open {
            source: s.clone(),
            target: t.clone()
        }
        .set_slots(),
        vec![
            vec![(t.clone(), SetSlot::Importing(s.clone()))],
            vec![(s.clone(), SetSlot::Migrating(t.clone()))]
        ],
        "the target imports before the source sends clients on to it"
    );
    // Stopped between the two: the source is opened next.
    assert_eq!(
        next_step(&observed_at("1_importing", Intent::Complete)),
        set(&s, SetSlot::Migrating(t.clone()))
    );
    assert_eq!(
        next_step(&observed_at("2_migrating", Intent::Complete)),
        migrate
    );
    assert_eq!(
        next_step(&observed_at("3_half_moved", Intent::Complete)),
        migrate
    );
    // The keys are across: the target claims the slot, then the source and the other learn it.
    let o4 = observed_at("4_keys_moved", Intent::Complete);
    let other = o4.others[0].0.clone();
    let hand_off = next_step(&o4);
    assert_eq!(
        hand_off,
        Step::HandOff {
            target: t.clone(),
            claim: true,
            tell: vec![s.clone(), other.clone()]
        }
    );
    assert_eq!(
        hand_off.set_slots(),
        vec![
            vec![(t.clone(), SetSlot::Node(t.clone()))],
            vec![
                (s.clone(), SetSlot::Node(t.clone())),
                (other.clone(), SetSlot::Node(t.clone()))
            ]
        ]
    );
    // Stopped after the claim: whoever has not heard of it by gossip yet is told.
    for stage in ["5_target_owns", "6_source_released", "7_done"] {
        let o = observed_at(stage, Intent::Complete);
        let source_told =
            o.source_view.owner.as_ref() == Some(&t) && o.source_view.migrating_to.is_none();
        let other_told = o.others[0].1.as_ref() == Some(&t);
        let tell: Vec<NodeId> = [
            (!source_told).then(|| s.clone()),
            (!other_told).then(|| other.clone()),
        ]
        .into_iter()
        .flatten()
        .collect();
        let expected = if tell.is_empty() {
            Step::Done
        } else {
            Step::HandOff {
                target: t.clone(),
                claim: false,
                tell,
            }
        };
        assert_eq!(next_step(&o), expected, "{stage}");
    }
    assert_eq!(
        next_step(&observed_at("7_done", Intent::Complete)),
        Step::Done
    );
}

#[test]
fn rolls_back_from_each_real_stage_before_the_hand_off() {
    let o = observed_at("0_stable", Intent::Abort);
    let (s, t) = (o.source.clone(), o.target.clone());
    assert_eq!(next_step(&o), Step::RolledBack);
    assert_eq!(
        next_step(&observed_at("1_importing", Intent::Abort)),
        Step::SetSlot {
            node: t.clone(),
            action: SetSlot::Stable
        }
    );
    assert_eq!(
        next_step(&observed_at("2_migrating", Intent::Abort)),
        Step::SetSlot {
            node: s.clone(),
            action: SetSlot::Stable
        }
    );
    let back = Step::MigrateKeys {
        from: t.clone(),
        to: s.clone(),
    };
    assert_eq!(next_step(&observed_at("3_half_moved", Intent::Abort)), back);
    assert_eq!(next_step(&observed_at("4_keys_moved", Intent::Abort)), back);
    // Past the hand-off an abort finishes the move instead.
    assert_eq!(
        next_step(&observed_at("5_target_owns", Intent::Abort)),
        next_step(&observed_at("5_target_owns", Intent::Complete))
    );
}

// ---------------------------------------------------------------------------------------------
// The table: every combination of what source and target can report, and the step for each.

struct Row {
    name: &'static str,
    s_owner: Option<char>,
    s_migrating: Option<char>,
    t_owner: Option<char>,
    t_importing: Option<char>,
    keys_s: u64,
    keys_t: u64,
    intent: Intent,
    expect: Expect,
}

#[derive(Debug)]
enum Expect {
    Set(char, SetSlot),
    Open,
    /// Whether the target claims first, and who is told then.
    HandOff(bool, &'static [char]),
    Migrate(char, char),
    Done,
    RolledBack,
    Stuck(Blocked),
}

fn expect_step(e: &Expect) -> Step {
    match e {
        Expect::Set(node, action) => Step::SetSlot {
            node: id(*node),
            action: action.clone(),
        },
        Expect::Open => Step::Open {
            source: id('s'),
            target: id('t'),
        },
        Expect::HandOff(claim, tell) => Step::HandOff {
            target: id('t'),
            claim: *claim,
            tell: tell.iter().copied().map(id).collect(),
        },
        Expect::Migrate(from, to) => Step::MigrateKeys {
            from: id(*from),
            to: id(*to),
        },
        Expect::Done => Step::Done,
        Expect::RolledBack => Step::RolledBack,
        Expect::Stuck(b) => Step::Blocked(b.clone()),
    }
}

#[test]
fn table_of_states() {
    use Expect::*;
    use Intent::{Abort, Complete};
    // Source 's', target 't', a third primary 'x'.
    let (s, t) = ('s', 't');
    let node = |c: char| SetSlot::Node(id(c));
    #[rustfmt::skip]
    let rows = [
        Row { name: "fresh", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 0, intent: Complete, expect: Open },
        Row { name: "fresh, target view lags (unassigned)", s_owner: Some(s), s_migrating: None, t_owner: None, t_importing: None, keys_s: 5, keys_t: 0, intent: Complete, expect: Open },
        Row { name: "fresh, empty slot", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: None, keys_s: 0, keys_t: 0, intent: Complete, expect: Open },
        Row { name: "fresh, left-over keys on target", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 2, intent: Complete, expect: Stuck(Blocked::OrphanedKeys { node: id(t), keys: 2 }) },
        Row { name: "importing", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: Some(s), keys_s: 5, keys_t: 0, intent: Complete, expect: Set(s, SetSlot::Migrating(id(t))) },
        Row { name: "importing, source lost its marker after keys moved", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: Some(s), keys_s: 3, keys_t: 2, intent: Complete, expect: Set(s, SetSlot::Migrating(id(t))) },
        Row { name: "open, keys left", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: Some(s), keys_s: 5, keys_t: 0, intent: Complete, expect: Migrate(s, t) },
        Row { name: "open, half moved", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: Some(s), keys_s: 2, keys_t: 3, intent: Complete, expect: Migrate(s, t) },
        Row { name: "open, all moved", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: Some(s), keys_s: 0, keys_t: 5, intent: Complete, expect: HandOff(true, &['s']) },
        Row { name: "migrating, target lost its marker", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: None, keys_s: 2, keys_t: 3, intent: Complete, expect: Set(t, SetSlot::Importing(id(s))) },
        Row { name: "handed off, source not told", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(t), t_importing: None, keys_s: 0, keys_t: 5, intent: Complete, expect: HandOff(false, &['s']) },
        Row { name: "handed off, source heard by gossip", s_owner: Some(t), s_migrating: None, t_owner: Some(t), t_importing: None, keys_s: 0, keys_t: 5, intent: Complete, expect: Done },
        Row { name: "handed off, keys reappeared on migrating source", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(t), t_importing: None, keys_s: 1, keys_t: 5, intent: Complete, expect: Migrate(s, t) },
        Row { name: "handed off, source serving without marker", s_owner: Some(s), s_migrating: None, t_owner: Some(t), t_importing: None, keys_s: 1, keys_t: 5, intent: Complete, expect: Set(s, SetSlot::Migrating(id(t))) },
        Row { name: "handed off, keys on a source that no longer serves", s_owner: Some(t), s_migrating: None, t_owner: Some(t), t_importing: None, keys_s: 1, keys_t: 5, intent: Complete, expect: Stuck(Blocked::OrphanedKeys { node: id(s), keys: 1 }) },
        Row { name: "owner with a stale import marker", s_owner: Some(t), s_migrating: None, t_owner: Some(t), t_importing: Some(s), keys_s: 0, keys_t: 5, intent: Complete, expect: Set(t, node(t)) },
        Row { name: "unassigned", s_owner: None, s_migrating: None, t_owner: None, t_importing: None, keys_s: 0, keys_t: 0, intent: Complete, expect: Stuck(Blocked::Unassigned) },
        Row { name: "owned by a third node", s_owner: Some('x'), s_migrating: None, t_owner: Some('x'), t_importing: None, keys_s: 0, keys_t: 0, intent: Complete, expect: Stuck(Blocked::OwnedElsewhere { seen_by: id(s), owner: id('x') }) },
        Row { name: "target sees a third owner", s_owner: Some(s), s_migrating: None, t_owner: Some('x'), t_importing: None, keys_s: 0, keys_t: 0, intent: Complete, expect: Stuck(Blocked::OwnedElsewhere { seen_by: id(t), owner: id('x') }) },
        Row { name: "source migrating elsewhere", s_owner: Some(s), s_migrating: Some('x'), t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 0, intent: Complete, expect: Stuck(Blocked::ForeignMigration { node: id(s), peer: id('x') }) },
        Row { name: "target importing from elsewhere", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: Some('x'), keys_s: 5, keys_t: 0, intent: Complete, expect: Stuck(Blocked::ForeignMigration { node: id(t), peer: id('x') }) },
        Row { name: "abort: nothing open", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 0, intent: Abort, expect: RolledBack },
        Row { name: "abort: importing only", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: Some(s), keys_s: 5, keys_t: 0, intent: Abort, expect: Set(t, SetSlot::Stable) },
        Row { name: "abort: open, nothing moved", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: Some(s), keys_s: 5, keys_t: 0, intent: Abort, expect: Set(s, SetSlot::Stable) },
        Row { name: "abort: open, keys moved", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: Some(s), keys_s: 2, keys_t: 3, intent: Abort, expect: Migrate(t, s) },
        Row { name: "abort: source closed, a late ASK write on target", s_owner: Some(s), s_migrating: None, t_owner: Some(s), t_importing: Some(s), keys_s: 5, keys_t: 1, intent: Abort, expect: Migrate(t, s) },
        Row { name: "abort: migrating only", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 0, intent: Abort, expect: Set(s, SetSlot::Stable) },
        Row { name: "abort: keys on a target not importing", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 2, intent: Abort, expect: Stuck(Blocked::OrphanedKeys { node: id(t), keys: 2 }) },
        Row { name: "abort after hand-off finishes", s_owner: Some(s), s_migrating: Some(t), t_owner: Some(t), t_importing: None, keys_s: 0, keys_t: 5, intent: Abort, expect: HandOff(false, &['s']) },
        Row { name: "abort of a foreign migration", s_owner: Some(s), s_migrating: Some('x'), t_owner: Some(s), t_importing: None, keys_s: 5, keys_t: 0, intent: Abort, expect: Stuck(Blocked::ForeignMigration { node: id(s), peer: id('x') }) },
    ];
    for row in &rows {
        let o = Observed {
            slot: 42,
            source: id(s),
            target: id(t),
            source_view: SlotView {
                owner: row.s_owner.map(id),
                migrating_to: row.s_migrating.map(id),
                importing_from: None,
            },
            target_view: SlotView {
                owner: row.t_owner.map(id),
                migrating_to: None,
                importing_from: row.t_importing.map(id),
            },
            keys_in_source: row.keys_s,
            keys_in_target: row.keys_t,
            others: vec![],
            intent: row.intent,
        };
        assert_eq!(next_step(&o), expect_step(&row.expect), "{}", row.name);
    }
}

#[test]
fn only_the_primaries_that_lag_are_told() {
    let o = Observed {
        slot: 1,
        source: id('s'),
        target: id('t'),
        source_view: SlotView {
            owner: Some(id('t')),
            ..SlotView::default()
        },
        target_view: SlotView {
            owner: Some(id('t')),
            ..SlotView::default()
        },
        keys_in_source: 0,
        keys_in_target: 3,
        others: vec![(id('x'), Some(id('t'))), (id('y'), Some(id('s')))],
        intent: Intent::Complete,
    };
    assert_eq!(
        next_step(&o),
        Step::HandOff {
            target: id('t'),
            claim: false,
            tell: vec![id('y')]
        }
    );
}

// ---------------------------------------------------------------------------------------------
// The model: two nodes as Valkey behaves, clients writing, gossip arriving late, the controller
// restarting between any two commands (each step is decided from a fresh observation; a step of
// several commands may stop after any of them), and sometimes an abort. Every run must end Done or RolledBack with every written key present once.

#[derive(Debug, Clone)]
struct Model {
    s_owner: char,
    s_migrating: bool,
    t_owner: char,
    t_importing: bool,
    other_owner: char,
    keys_s: BTreeSet<u32>,
    keys_t: BTreeSet<u32>,
    written: BTreeSet<u32>,
}

impl Model {
    fn observe(&self, intent: Intent) -> Observed {
        Observed {
            slot: 7,
            source: id('s'),
            target: id('t'),
            source_view: SlotView {
                owner: Some(id(self.s_owner)),
                migrating_to: self.s_migrating.then(|| id('t')),
                importing_from: None,
            },
            target_view: SlotView {
                owner: Some(id(self.t_owner)),
                migrating_to: None,
                importing_from: self.t_importing.then(|| id('s')),
            },
            keys_in_source: self.keys_s.len() as u64,
            keys_in_target: self.keys_t.len() as u64,
            others: vec![(id('o'), Some(id(self.other_owner)))],
            intent,
        }
    }

    /// Runs a step as Valkey would, refusing what Valkey refuses: its SETSLOT commands phase by
    /// phase, `between` called before every phase but the first (clients and gossip acting
    /// meanwhile; `false` stops the step there, as a controller killed half-way would).
    fn apply(&mut self, step: &Step, mut between: impl FnMut(&mut Model) -> bool) {
        if let Step::MigrateKeys { from, to } = step {
            self.migrate(from, to);
            return;
        }
        let phases = step.set_slots();
        assert!(!phases.is_empty(), "not a command: {step:?}");
        for (i, phase) in phases.iter().enumerate() {
            if i > 0 && !between(self) {
                return;
            }
            let mut answered_ok = true;
            for (node, action) in phase {
                answered_ok &= self.set_slot(node, action);
            }
            if !answered_ok {
                return;
            }
        }
    }

    /// One SETSLOT; false when Valkey refuses it.
    fn set_slot(&mut self, node: &NodeId, action: &SetSlot) -> bool {
        let (s, t, o) = (id('s'), id('t'), id('o'));
        let step = (node, action);
        match action {
            SetSlot::Importing(from) => {
                assert!(*node == t && *from == s && self.t_owner != 't', "{step:?}");
                self.t_importing = true;
            }
            SetSlot::Migrating(to) => {
                assert!(*node == s && *to == t && self.s_owner == 's', "{step:?}");
                self.s_migrating = true;
            }
            SetSlot::Node(owner) => {
                assert_eq!(*owner, t);
                if *node == t {
                    self.t_owner = 't';
                    self.t_importing = false;
                } else if *node == s {
                    // Valkey refuses to give away a slot it still holds keys of.
                    if self.s_owner == 's' && !self.keys_s.is_empty() {
                        return false;
                    }
                    self.s_owner = 't';
                    self.s_migrating = false;
                } else {
                    assert_eq!(*node, o);
                    self.other_owner = 't';
                }
            }
            SetSlot::Stable => {
                if *node == s {
                    self.s_migrating = false;
                } else {
                    assert_eq!(*node, t);
                    self.t_importing = false;
                }
            }
        }
        true
    }

    /// One MIGRATE batch (two keys).
    fn migrate(&mut self, from: &NodeId, to: &NodeId) {
        let s = id('s');
        // MIGRATE runs where the slot is served or open.
        let (src, dst) = if *from == s {
            assert!(self.s_owner == 's' || self.s_migrating, "{self:?}");
            (&mut self.keys_s, &mut self.keys_t)
        } else {
            assert!(self.t_owner == 't' || self.t_importing, "{self:?}");
            assert_eq!(*to, s);
            (&mut self.keys_t, &mut self.keys_s)
        };
        let batch: Vec<u32> = src.iter().take(2).copied().collect();
        for key in batch {
            src.remove(&key);
            dst.insert(key);
        }
    }

    /// A client writes a new key, routed as a cluster client would be.
    fn client_write(&mut self, key: u32) {
        let to_target = if self.s_owner == 's' {
            // The source serves the slot; a key it lacks goes to the target by ASK while open.
            self.s_migrating
        } else {
            true
        };
        if to_target {
            if self.t_importing || self.t_owner == 't' {
                self.keys_t.insert(key);
                self.written.insert(key);
            }
            // Otherwise the target answers MOVED and the write fails: nothing stored.
        } else {
            self.keys_s.insert(key);
            self.written.insert(key);
        }
    }

    /// The target's claim reaches the others. A source that learns it lost a slot drops the
    /// keys it still has there: the loss the machine must never cause.
    fn gossip(&mut self) {
        if self.t_owner == 't' {
            if self.s_owner == 's' {
                self.keys_s.clear();
                self.s_owner = 't';
                self.s_migrating = false;
            }
            self.other_owner = 't';
        }
    }

    fn check_keys(&self) {
        assert!(self.keys_s.is_disjoint(&self.keys_t), "{self:?}");
        let held: BTreeSet<u32> = self.keys_s.union(&self.keys_t).copied().collect();
        assert_eq!(held, self.written, "a key was lost: {self:?}");
    }
}

/// Each look (a read of both ends, and of the other primaries once the keys are across) costs
/// a round trip for every slot under way, so a slot that needs fewer looks moves sooner: the
/// ends are opened together (target first), and once the keys are across the target claims the
/// slot and the source and every other primary are told in the same step.
#[test]
fn an_undisturbed_slot_moves_in_four_looks() {
    let fresh = || Model {
        s_owner: 's',
        s_migrating: false,
        t_owner: 's',
        t_importing: false,
        other_owner: 's',
        keys_s: (0..2).collect(),
        keys_t: BTreeSet::new(),
        written: (0..2).collect(),
    };
    let mut m = fresh();
    let mut looks = 0;
    loop {
        looks += 1;
        assert!(looks <= 20, "no end: {m:?}");
        match next_step(&m.observe(Intent::Complete)) {
            Step::Done => break,
            step => m.apply(&step, |_| true),
        }
    }
    assert_eq!(looks, 4, "open, move the keys, hand off and tell, done");
    assert_eq!((m.s_owner, m.t_owner, m.other_owner), ('t', 't', 't'));
    m.check_keys();
}

/// Clients and gossip acting between two commands, a bounded number of times: a client writes a
/// new key (keys 100 to 109), and the target's claim reaches the others.
fn meanwhile(m: &mut Model, rng: &mut StdRng, next_key: &mut u32) {
    if *next_key < 110 && rng.random_bool(0.3) {
        m.client_write(*next_key);
        *next_key += 1;
    }
    if rng.random_bool(0.3) {
        m.gossip();
    }
    m.check_keys();
}

#[test]
fn model_never_loses_a_key_and_always_finishes() {
    let mut rng = StdRng::seed_from_u64(7);
    for run in 0..2000 {
        let initial: BTreeSet<u32> = (0..rng.random_range(0..6)).collect();
        let mut m = Model {
            s_owner: 's',
            s_migrating: false,
            t_owner: 's',
            t_importing: false,
            other_owner: 's',
            keys_s: initial.clone(),
            keys_t: BTreeSet::new(),
            written: initial,
        };
        let abort_at = rng.random_bool(0.5).then(|| rng.random_range(0..12));
        let mut next_key = 100;
        let mut outcome = None;
        for round in 0..400 {
            let intent = match abort_at {
                Some(at) if round >= at => Intent::Abort,
                _ => Intent::Complete,
            };
            meanwhile(&mut m, &mut rng, &mut next_key);
            match next_step(&m.observe(intent)) {
                Step::Done => {
                    outcome = Some(Step::Done);
                    break;
                }
                Step::RolledBack => {
                    outcome = Some(Step::RolledBack);
                    break;
                }
                Step::Blocked(b) => panic!("run {run}: blocked {b:?} in {m:?}"),
                step => m.apply(&step, |m| {
                    // Between two commands of one step, as between two steps; and sometimes
                    // the controller stops there.
                    meanwhile(m, &mut rng, &mut next_key);
                    rng.random_bool(0.8)
                }),
            }
            m.check_keys();
        }
        match outcome {
            Some(Step::Done) => {
                assert_eq!((m.s_owner, m.t_owner, m.other_owner), ('t', 't', 't'));
                assert!(m.keys_s.is_empty());
            }
            Some(Step::RolledBack) => {
                assert_eq!((m.s_owner, m.t_owner), ('s', 's'));
                assert!(m.keys_t.is_empty());
            }
            _ => panic!("run {run} did not finish: {m:?}"),
        }
        assert!(
            !m.s_migrating && !m.t_importing,
            "run {run}: slot left open"
        );
        m.check_keys();
    }
}
