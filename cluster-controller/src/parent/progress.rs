//! How far a long change has got, for `status.progress` (and the PROGRESS column of `-o wide`):
//! slots moved of the slots a scaling has to move, members restarted of the members a roll has
//! to restart. Both kinds report it. Pure: it needs only what is left now and the previous
//! status, since a pass sees what is left, never what was done.
//!
//! The total of an operation is the most work ever seen left since it began, so the figure only
//! grows while the work shrinks; a change of spec in mid-operation that adds work raises the
//! total rather than restarting the count. A finished operation stays in the status, complete,
//! until the next one begins, so that "done" can be read after the fact and a steady cluster
//! writes nothing.

use valkey_api::v1alpha1::Progress;

/// The work a pass found left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkLeft {
    /// Slots that still have to move for the wanted shards to hold them evenly.
    pub slots_to_move: usize,
    /// Members that run an older revision than their spec asks for (restarting or not yet).
    pub members_to_restart: usize,
    /// Shards that own slots now, and shards the spec wants (a scaling's direction).
    pub shards_now: u32,
    pub shards_wanted: u32,
}

const SLOTS: &str = "slots";
const MEMBERS: &str = "members";

/// The progress to report after a pass that found `work` left; `None` when there is no
/// operation to report (none ever ran since the object was created).
pub fn next(previous: Option<&Progress>, work: WorkLeft) -> Option<Progress> {
    let running = previous.filter(|p| p.done < p.total);
    let Some((operation, unit, left)) = current(work) else {
        // Nothing left: an operation that was running is complete; a complete one stands.
        return previous.map(|p| with(&p.operation, &p.unit, p.total, p.total));
    };
    let left = i32::try_from(left).unwrap_or(i32::MAX);
    match running.filter(|p| p.unit == unit) {
        // The same kind of work goes on: the operation keeps its name (a scale-out whose new
        // shards already own some slots is still a scale-out) and the largest total it saw.
        Some(p) => {
            let total = p.total.max(left);
            Some(with(&p.operation, unit, total - left, total))
        }
        None => Some(with(operation, unit, 0, left)),
    }
}

/// The operation `work` shows, its unit and how much of it is left. Slots come first: a roll
/// waits for a scaling to finish, never the other way round.
fn current(work: WorkLeft) -> Option<(&'static str, &'static str, usize)> {
    if work.slots_to_move > 0 {
        let operation = match work.shards_wanted.cmp(&work.shards_now) {
            std::cmp::Ordering::Greater => "ScalingOut",
            std::cmp::Ordering::Less => "ScalingIn",
            std::cmp::Ordering::Equal => "Rebalancing",
        };
        return Some((operation, SLOTS, work.slots_to_move));
    }
    (work.members_to_restart > 0).then_some(("Rolling", MEMBERS, work.members_to_restart))
}

fn with(operation: &str, unit: &str, done: i32, total: i32) -> Progress {
    let verb = if unit == SLOTS { "moved" } else { "restarted" };
    Progress {
        operation: operation.to_owned(),
        unit: unit.to_owned(),
        done,
        total,
        summary: format!("{done}/{total} {unit} {verb}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(left: usize, now: u32, wanted: u32) -> WorkLeft {
        WorkLeft {
            slots_to_move: left,
            shards_now: now,
            shards_wanted: wanted,
            ..Default::default()
        }
    }

    fn members(left: usize) -> WorkLeft {
        WorkLeft {
            members_to_restart: left,
            shards_now: 3,
            shards_wanted: 3,
            ..Default::default()
        }
    }

    #[test]
    fn a_scale_out_counts_up_to_its_total_and_stays_complete() {
        let start = next(None, slots(6554, 3, 5)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!(
            (start.operation.as_str(), start.done, start.total),
            ("ScalingOut", 0, 6554)
        );
        assert_eq!(start.summary, "0/6554 slots moved");
        // The new shards own slots now: still the same scale-out, not a rebalance.
        let mid = next(Some(&start), slots(4000, 5, 5)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!(
            (mid.operation.as_str(), mid.done, mid.total),
            ("ScalingOut", 2554, 6554)
        );
        let done = next(Some(&mid), WorkLeft::default()).unwrap_or_else(|| panic!("no progress"));
        assert_eq!((done.done, done.total), (6554, 6554));
        assert_eq!(done.summary, "6554/6554 slots moved");
        assert_eq!(
            next(Some(&done), WorkLeft::default()),
            Some(done),
            "a finished operation stands: a steady cluster writes nothing"
        );
    }

    #[test]
    fn more_work_in_mid_operation_raises_the_total_and_never_lowers_done() {
        let start = next(None, slots(1000, 3, 4)).unwrap_or_else(|| panic!("no progress"));
        let mid = next(Some(&start), slots(400, 4, 4)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!((mid.done, mid.total), (600, 1000));
        let more = next(Some(&mid), slots(1500, 4, 6)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!((more.done, more.total), (0, 1500));
    }

    #[test]
    fn a_roll_counts_members_and_a_new_operation_starts_from_zero() {
        let scaled = next(None, slots(10, 2, 3)).and_then(|p| next(Some(&p), WorkLeft::default()));
        let roll = next(scaled.as_ref(), members(6)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!(
            (roll.operation.as_str(), roll.done, roll.total),
            ("Rolling", 0, 6)
        );
        let later = next(Some(&roll), members(2)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!(later.summary, "4/6 members restarted");
        let in_scale_in =
            next(Some(&later), slots(5461, 4, 3)).unwrap_or_else(|| panic!("no progress"));
        assert_eq!(
            (
                in_scale_in.operation.as_str(),
                in_scale_in.done,
                in_scale_in.total
            ),
            ("ScalingIn", 0, 5461),
            "a scaling that interrupts a roll is its own operation"
        );
    }

    #[test]
    fn nothing_ever_ran_reports_nothing() {
        assert_eq!(next(None, WorkLeft::default()), None);
    }
}
