//! `maxmemory` by default: a server given no `maxmemory` but a container memory limit stops
//! growing well below that limit instead of being OOM-killed by design.
//!
//! Valkey needs memory beyond its dataset: a fork for a snapshot, an AOF rewrite or a replica's
//! full sync copies every page written while it runs (copy-on-write), replicas' output buffers
//! hold what they have not read yet, and the allocator fragments. The default keeps
//! [`DATASET_PERCENT`] of the limit for the dataset and leaves the rest for those.

use k8s_openapi::api::core::v1::ResourceRequirements;

/// The share of the container's memory limit that the dataset may use when `maxmemory` is not set.
pub const DATASET_PERCENT: u64 = 60;

/// The `maxmemory` in bytes a server with `resources` and no `maxmemory` of its own runs with:
/// `None` without a memory limit (or one that does not parse, which the API server refuses).
pub fn default_maxmemory(resources: Option<&ResourceRequirements>) -> Option<u64> {
    let limit = resources?.limits.as_ref()?.get("memory")?;
    let bytes = quantity_bytes(&limit.0)?;
    Some(bytes / 100 * DATASET_PERCENT + bytes % 100 * DATASET_PERCENT / 100)
}

/// Bytes of a Kubernetes memory quantity (`512Mi`, `1G`, `1.5Gi`, `268435456`, `1e9`). Fractions
/// of a byte round down; a negative or malformed quantity is `None`.
pub fn quantity_bytes(quantity: &str) -> Option<u64> {
    let quantity = quantity.trim();
    let split = quantity
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "m" => 1e-3,
        exponent => {
            let e: i32 = exponent.strip_prefix(['e', 'E'])?.parse().ok()?;
            10f64.powi(e)
        }
    };
    let value: f64 = number.parse().ok()?;
    let bytes = (value * multiplier).floor();
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    #[test]
    fn quantities_in_every_notation() {
        for (text, bytes) in [
            ("268435456", Some(268_435_456)),
            ("256Mi", Some(268_435_456)),
            ("1Gi", Some(1_073_741_824)),
            ("1.5Gi", Some(1_610_612_736)),
            ("500M", Some(500_000_000)),
            ("1e9", Some(1_000_000_000)),
            ("128974848000m", Some(128_974_848)),
            ("", None),
            ("Mi", None),
            ("12Qi", None),
            ("-1Gi", None),
        ] {
            assert_eq!(quantity_bytes(text), bytes, "{text:?}");
        }
    }

    #[test]
    fn the_default_leaves_room_below_the_limit_and_needs_one() {
        let with_limit = |limit: &str| ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity(limit.to_owned()),
            )])),
            ..Default::default()
        };
        assert_eq!(
            default_maxmemory(Some(&with_limit("1Gi"))),
            Some(644_245_094)
        );
        assert_eq!(default_maxmemory(Some(&with_limit("100"))), Some(60));
        let requests_only = ResourceRequirements {
            requests: with_limit("1Gi").limits,
            ..Default::default()
        };
        assert_eq!(default_maxmemory(Some(&requests_only)), None);
        assert_eq!(default_maxmemory(None), None);
    }
}
