//! The version a Valkey server reports, and what it can do.

use std::fmt;
use std::str::FromStr;

use super::ParseError;

/// A server version, `major.minor.patch`, ordered numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = ParseError;

    /// `9.1.2`; a missing minor or patch counts as 0 and a suffix after the numbers
    /// (`8.0.1-rc1`) is ignored, since release stages are reported separately.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || ParseError::BadVersion(text.to_owned());
        let numeric = text
            .trim()
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap_or("");
        let mut parts = numeric.split('.');
        let mut next = |required: bool| -> Result<u32, ParseError> {
            match parts.next() {
                Some(p) if !p.is_empty() => p.parse().map_err(|_| bad()),
                None if !required => Ok(0),
                _ => Err(bad()),
            }
        };
        let version = Version::new(next(true)?, next(false)?, next(false)?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(version)
    }
}

/// Atomic slot migration (`CLUSTER MIGRATESLOTS`, `CLUSTER GETSLOTMIGRATIONS`) came with
/// Valkey 9.0; older servers need the SETSLOT/MIGRATE dance.
pub fn supports_atomic_slot_migration(version: Version) -> bool {
    version >= Version::new(9, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_orders() {
        let v: Version = "9.1.2".parse().unwrap();
        assert_eq!(v, Version::new(9, 1, 2));
        assert_eq!("8.0".parse::<Version>().unwrap(), Version::new(8, 0, 0));
        assert_eq!(
            "8.0.1-rc1".parse::<Version>().unwrap(),
            Version::new(8, 0, 1)
        );
        assert!(Version::new(8, 10, 0) > Version::new(8, 9, 9));
        assert!(Version::new(10, 0, 0) > Version::new(9, 99, 99));
        assert_eq!(v.to_string(), "9.1.2");
        for bad in ["", "x", "9..1", "9.1.2.3", ".1", "99999999999"] {
            assert!(bad.parse::<Version>().is_err(), "{bad}");
        }
    }

    #[test]
    fn atomic_migration_from_nine() {
        assert!(!supports_atomic_slot_migration(Version::new(8, 1, 4)));
        assert!(!supports_atomic_slot_migration(Version::new(7, 2, 4)));
        assert!(supports_atomic_slot_migration(Version::new(9, 0, 0)));
        assert!(supports_atomic_slot_migration(Version::new(9, 1, 2)));
    }
}
