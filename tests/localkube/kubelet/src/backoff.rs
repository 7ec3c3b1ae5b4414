//! Restart back-off as a kubelet does it: the first restart is immediate, later ones wait
//! 10 s doubling up to a cap (5 min), and a container that ran 10 minutes starts afresh.

use std::time::Duration;

pub const INITIAL: Duration = Duration::from_secs(10);
const RESET_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    cap: Duration,
    /// The delay the next restart waits; `None` until the first restart.
    current: Option<Duration>,
}

impl Backoff {
    pub fn new(cap: Duration) -> Self {
        Self { cap, current: None }
    }

    /// The delay before restarting a container that ran for `ran_for` and exited.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= RESET_AFTER {
            self.current = None;
        }
        let delay = match self.current {
            None => Duration::ZERO,
            Some(d) => d,
        };
        self.current = Some(match self.current {
            None => INITIAL.min(self.cap),
            Some(d) => (d * 2).min(self.cap),
        });
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset_after_a_long_run() {
        let mut b = Backoff::new(Duration::from_secs(40));
        let short = Duration::from_secs(1);
        let delays: Vec<u64> = (0..5).map(|_| b.next_delay(short).as_secs()).collect();
        assert_eq!(delays, vec![0, 10, 20, 40, 40]);
        assert_eq!(b.next_delay(Duration::from_secs(601)), Duration::ZERO);
        assert_eq!(b.next_delay(short), Duration::from_secs(10));
    }

    #[test]
    fn a_cap_below_the_initial_delay_is_honoured() {
        let mut b = Backoff::new(Duration::from_secs(2));
        b.next_delay(Duration::ZERO);
        assert_eq!(b.next_delay(Duration::ZERO), Duration::from_secs(2));
    }
}
