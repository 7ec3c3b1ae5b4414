//! Per-object back-off for failed reconciles: 1 s, 2 s, 4 s … capped at 5 minutes, reset by a
//! success, so a broken object never spins and a healed one is not left waiting.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::key::ObjectKey;

const CAP: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<ObjectKey, u32>>,
}

impl Backoff {
    /// Records a failure of `key` and returns how long to wait before the next try.
    pub fn failed(&self, key: &ObjectKey) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        delay(*n)
    }

    /// How many times in a row `key` has failed.
    pub fn failures(&self, key: &ObjectKey) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Forgets `key`'s failures (it succeeded, or it is gone).
    pub fn succeeded(&self, key: &ObjectKey) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

fn delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(9)).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let b = Backoff::default();
        let (a, other) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "other"));
        let delays: Vec<u64> = (0..11).map(|_| b.failed(&a).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.failures(&a), 11);
        assert_eq!(b.failed(&other).as_secs(), 1, "per key");
        b.succeeded(&a);
        assert_eq!(b.failures(&a), 0);
        assert_eq!(b.failed(&a).as_secs(), 1);
    }
}
