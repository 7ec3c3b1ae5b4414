//! The pure decision of one election step: what to do with the Lease as last read.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// What a candidate should do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take the Lease (create it, or write it with the read resourceVersion).
    Acquire(AcquireReason),
    /// This candidate holds the Lease: write a fresh renewTime.
    Renew,
    /// Another candidate holds a Lease that has not expired.
    Wait {
        holder: String,
        expires_in: Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireReason {
    /// No Lease object exists yet.
    Missing,
    /// The Lease exists with no holder (never held, or released on graceful shutdown).
    Free,
    /// The holder has not renewed within its leaseDurationSeconds.
    Expired { previous: String },
}

/// Decides from the Lease as read (`None` when it does not exist), the current time and this
/// candidate's identity. `default_duration` applies when the Lease names no duration.
///
/// Expiry is judged by the holder's renewTime (acquireTime when it never renewed) on this
/// candidate's clock; the elector additionally waits until it has itself seen the Lease unchanged
/// for a full duration before taking an expired one, so clock skew cannot cut a live lease short.
pub fn decide(
    lease: Option<&Lease>,
    now: Timestamp,
    me: &str,
    default_duration: Duration,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Acquire(AcquireReason::Missing);
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Decision::Acquire(AcquireReason::Free);
    };
    if holder == me {
        return Decision::Renew;
    }
    let duration = SignedDuration::try_from(lease_duration(lease, default_duration))
        .unwrap_or(SignedDuration::MAX);
    let last_heard = spec.and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()));
    let remaining = match last_heard {
        Some(time) => duration - now.duration_since(time.0).max(SignedDuration::ZERO),
        // A holder that never wrote a time cannot prove it is alive.
        None => SignedDuration::ZERO,
    };
    if remaining <= SignedDuration::ZERO {
        Decision::Acquire(AcquireReason::Expired {
            previous: holder.to_owned(),
        })
    } else {
        Decision::Wait {
            holder: holder.to_owned(),
            expires_in: Duration::try_from(remaining).unwrap_or(Duration::MAX),
        }
    }
}

/// The holder's leaseDurationSeconds, or `default_duration` when the Lease names none.
pub fn lease_duration(lease: &Lease, default_duration: Duration) -> Duration {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|seconds| u64::try_from(seconds).ok())
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
        .unwrap_or(default_duration)
}

/// Whether a candidate may act on an expired Lease: only once it has itself observed the same
/// resourceVersion for at least the lease duration, measured on its own monotonic clock.
pub fn expiry_confirmed(unchanged_for: Duration, lease_duration: Duration) -> bool {
    unchanged_for >= lease_duration
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    const DURATION: Duration = Duration::from_secs(15);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn lease(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renewed.map(|s| MicroTime(at(s))),
                lease_duration_seconds: duration,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_lease_is_acquired() {
        assert_eq!(
            decide(None, at(1000), "me", DURATION),
            Decision::Acquire(AcquireReason::Missing)
        );
    }

    #[test]
    fn free_lease_is_acquired() {
        let released = lease(None, Some(1000), Some(15));
        assert_eq!(
            decide(Some(&released), at(1001), "me", DURATION),
            Decision::Acquire(AcquireReason::Free)
        );
        let empty_holder = lease(Some(""), Some(1000), Some(15));
        assert_eq!(
            decide(Some(&empty_holder), at(1001), "me", DURATION),
            Decision::Acquire(AcquireReason::Free)
        );
        let no_spec = Lease::default();
        assert_eq!(
            decide(Some(&no_spec), at(1), "me", DURATION),
            Decision::Acquire(AcquireReason::Free)
        );
    }

    #[test]
    fn own_lease_is_renewed_even_if_late() {
        let mine = lease(Some("me"), Some(1000), Some(15));
        assert_eq!(
            decide(Some(&mine), at(1001), "me", DURATION),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&mine), at(5000), "me", DURATION),
            Decision::Renew
        );
    }

    #[test]
    fn live_lease_of_another_waits_with_remaining_time() {
        let theirs = lease(Some("other"), Some(1000), Some(15));
        assert_eq!(
            decide(Some(&theirs), at(1010), "me", DURATION),
            Decision::Wait {
                holder: "other".into(),
                expires_in: Duration::from_secs(5)
            }
        );
    }

    #[test]
    fn expires_exactly_at_renew_plus_duration() {
        let theirs = lease(Some("other"), Some(1000), Some(15));
        assert!(matches!(
            decide(Some(&theirs), at(1014), "me", DURATION),
            Decision::Wait { .. }
        ));
        assert_eq!(
            decide(Some(&theirs), at(1015), "me", DURATION),
            Decision::Acquire(AcquireReason::Expired {
                previous: "other".into()
            })
        );
    }

    #[test]
    fn lease_duration_comes_from_the_lease() {
        let long = lease(Some("other"), Some(1000), Some(60));
        assert!(matches!(
            decide(Some(&long), at(1030), "me", DURATION),
            Decision::Wait { .. }
        ));
        // No duration on the lease: the candidate's own default applies.
        let unspecified = lease(Some("other"), Some(1000), None);
        assert!(matches!(
            decide(Some(&unspecified), at(1014), "me", DURATION),
            Decision::Wait { .. }
        ));
        assert!(matches!(
            decide(Some(&unspecified), at(1016), "me", DURATION),
            Decision::Acquire(_)
        ));
    }

    #[test]
    fn renew_time_in_the_future_is_not_expired() {
        // The holder's clock runs ahead of ours: never treat that as expired.
        let ahead = lease(Some("other"), Some(1100), Some(15));
        assert_eq!(
            decide(Some(&ahead), at(1000), "me", DURATION),
            Decision::Wait {
                holder: "other".into(),
                expires_in: DURATION
            }
        );
    }

    #[test]
    fn acquire_time_counts_when_never_renewed_and_no_time_means_expired() {
        let mut acquired_only = lease(Some("other"), None, Some(15));
        if let Some(spec) = acquired_only.spec.as_mut() {
            spec.acquire_time = Some(MicroTime(at(1000)));
        }
        assert!(matches!(
            decide(Some(&acquired_only), at(1005), "me", DURATION),
            Decision::Wait { .. }
        ));
        let timeless = lease(Some("other"), None, Some(15));
        assert!(matches!(
            decide(Some(&timeless), at(1005), "me", DURATION),
            Decision::Acquire(_)
        ));
    }

    #[test]
    fn expiry_needs_a_full_local_observation() {
        assert!(!expiry_confirmed(Duration::from_secs(14), DURATION));
        assert!(expiry_confirmed(DURATION, DURATION));
    }
}
