//! Pure builders of the Lease bodies the elector writes, and of its identity.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use rand::Rng;
use rand::distr::Alphanumeric;

/// Environment variable the Downward API fills with the pod's name.
pub const POD_NAME_ENV: &str = "POD_NAME";

const SUFFIX_LEN: usize = 5;

/// This process's identity: `$POD_NAME`, else the hostname, plus a random suffix so that a
/// restarted container never mistakes its predecessor's Lease for its own.
pub fn default_identity() -> String {
    let base = std::env::var(POD_NAME_ENV)
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        });
    let suffix: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(SUFFIX_LEN)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    identity_from(base.as_deref(), &suffix)
}

fn identity_from(base: Option<&str>, suffix: &str) -> String {
    let base = base
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .unwrap_or("unknown");
    format!("{base}-{suffix}")
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

/// A new Lease held by `me`.
pub fn created(name: &str, me: &str, now: Timestamp, duration: Duration) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(me.to_owned()),
            lease_duration_seconds: Some(seconds(duration)),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// `current` taken over by `me`. The metadata (and so the resourceVersion) is kept, making the
/// write fail with a conflict if anyone wrote the Lease since it was read.
pub fn taken(current: &Lease, me: &str, now: Timestamp, duration: Duration) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let changed_hands = spec.holder_identity.as_deref() != Some(me);
    spec.holder_identity = Some(me.to_owned());
    spec.lease_duration_seconds = Some(seconds(duration));
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    if changed_hands {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    lease
}

/// `current` with a fresh renewTime; resourceVersion kept as in [`taken`].
pub fn renewed(current: &Lease, now: Timestamp, duration: Duration) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(seconds(duration));
    lease
}

/// `current` with no holder, so a standby may take it at its next poll instead of waiting for
/// expiry; resourceVersion kept so a release never clears someone else's hold.
pub fn released(current: &Lease, now: Timestamp) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.renew_time = Some(MicroTime(now));
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn held_by(holder: &str, transitions: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("lease".into()),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(at(100))),
                acquire_time: Some(MicroTime(at(50))),
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn identity_has_base_and_suffix() {
        assert_eq!(
            identity_from(Some("node-controller-7d9f"), "ab1cd"),
            "node-controller-7d9f-ab1cd"
        );
        assert_eq!(identity_from(Some(" "), "ab1cd"), "unknown-ab1cd");
        assert_eq!(identity_from(None, "x"), "unknown-x");
    }

    #[test]
    fn default_identities_differ() {
        let first = default_identity();
        let second = default_identity();
        assert_ne!(first, second);
        assert!(first.len() > SUFFIX_LEN + 1);
    }

    #[test]
    fn created_lease_is_held_now() {
        let lease = created("valkey-node-controller", "me", at(10), DURATION);
        assert_eq!(
            lease.metadata.name.as_deref(),
            Some("valkey-node-controller")
        );
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.renew_time, Some(MicroTime(at(10))));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(10))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn taking_over_counts_a_transition_and_keeps_resource_version() {
        let lease = taken(&held_by("old", 3), "me", at(200), DURATION);
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("42"));
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(200))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(200))));
    }

    #[test]
    fn renewing_moves_only_renew_time() {
        let lease = renewed(&held_by("me", 3), at(205), DURATION);
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("42"));
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(50))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(205))));
    }

    #[test]
    fn releasing_clears_the_holder_under_the_same_version() {
        let lease = released(&held_by("me", 3), at(300));
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("42"));
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_transitions, Some(3));
    }
}
