//! Password rotation without a moment where some servers accept only the old password and others
//! only the new one. Valkey users may hold several passwords, so a change goes in three steps:
//! the new password is added beside the old ones everywhere; clients switch to it; once every
//! server has held the new one for a grace period, the old ones are removed.

use std::time::{Duration, Instant};

/// Most passwords a user holds at once (a change made while an earlier one is still retiring
/// adds one; beyond this the oldest goes at once).
pub const MAX_ACCEPTED: usize = 4;

/// The password hashes a client user's servers should accept, oldest first, the current one last.
///
/// `stored` is what was accepted so far (empty for a new user); `current` the hash of the
/// password its Secret holds now; `everywhere_since` when every server was last seen holding
/// exactly `stored` (none: not yet, or not known since the controller started).
pub fn accepted(
    stored: &[String],
    current: &str,
    everywhere_since: Option<Instant>,
    now: Instant,
    grace: Duration,
) -> Vec<String> {
    if !stored.iter().any(|h| h == current) {
        // A new password: added beside the ones clients use today.
        let mut next: Vec<String> = stored.to_vec();
        next.push(current.to_owned());
        let excess = next.len().saturating_sub(MAX_ACCEPTED);
        return next.split_off(excess);
    }
    if stored.len() == 1 {
        return stored.to_vec();
    }
    let settled =
        everywhere_since.is_some_and(|since| now.saturating_duration_since(since) >= grace);
    if settled {
        vec![current.to_owned()]
    } else {
        stored.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    const GRACE: Duration = Duration::from_secs(60);

    #[test]
    fn a_new_user_accepts_its_password() {
        let now = Instant::now();
        assert_eq!(accepted(&[], "a", None, now, GRACE), hashes(&["a"]));
        assert_eq!(
            accepted(&hashes(&["a"]), "a", None, now, GRACE),
            hashes(&["a"])
        );
    }

    #[test]
    fn a_new_password_is_added_and_the_old_one_retires_only_after_every_server_held_both_for_the_grace()
     {
        let start = Instant::now();
        let both = accepted(&hashes(&["old"]), "new", None, start, GRACE);
        assert_eq!(both, hashes(&["old", "new"]));
        // Not every server holds both yet: nothing retires, however long it takes.
        let later = start + Duration::from_secs(3600);
        assert_eq!(accepted(&both, "new", None, later, GRACE), both);
        // Every server holds both, but clients have not had their grace yet.
        let everywhere = start + Duration::from_secs(5);
        assert_eq!(
            accepted(
                &both,
                "new",
                Some(everywhere),
                everywhere + Duration::from_secs(59),
                GRACE
            ),
            both
        );
        assert_eq!(
            accepted(&both, "new", Some(everywhere), everywhere + GRACE, GRACE),
            hashes(&["new"])
        );
    }

    #[test]
    fn changes_in_a_row_keep_every_password_clients_may_still_use_up_to_a_bound() {
        let now = Instant::now();
        let mut stored = hashes(&["p1"]);
        for next in ["p2", "p3", "p4", "p5"] {
            stored = accepted(&stored, next, None, now, GRACE);
        }
        assert_eq!(stored, hashes(&["p2", "p3", "p4", "p5"]));
        // Going back to a password still accepted starts no new rotation, and it is the one kept.
        assert_eq!(
            accepted(&stored, "p3", Some(now), now + GRACE, GRACE),
            hashes(&["p3"])
        );
    }
}
