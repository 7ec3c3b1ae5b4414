//! `INFO`: `# Section` headers and `key:value` lines, with typed accessors for what a controller
//! reads.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::version::Version;
use super::{ParseError, kv};

const REPLY: &str = "INFO";

/// A parsed INFO reply. Keys are unique across sections in Valkey, so lookups go by key alone;
/// [`Info::section`] gives a section's own lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info {
    fields: BTreeMap<String, String>,
    sections: BTreeMap<String, Vec<String>>,
}

/// A server's append-only file, as its `INFO persistence` shows it (a restored member's is
/// turned on live and must be written before its snapshot is let go: see `parent::restore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aof {
    /// `aof_enabled:0`: no append-only file (a restored member runs on its snapshot alone).
    Off,
    /// Turned on and being written (or the last rewrite failed): not yet a file a restart
    /// could load.
    Writing,
    /// On, no rewrite running or scheduled, the last one ok: a restart loads it.
    Written,
}

impl Aof {
    /// From `INFO persistence`'s fields (`None`: the member did not answer).
    pub fn of(field: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let is = |key: &str, value: &str| field(key).as_deref() == Some(value);
        let enabled = field("aof_enabled")?;
        Some(if enabled != "1" {
            Self::Off
        } else if is("aof_rewrite_in_progress", "0")
            && is("aof_rewrite_scheduled", "0")
            && is("aof_last_bgrewrite_status", "ok")
        {
            Self::Written
        } else {
            Self::Writing
        })
    }
}

/// The role INFO reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

/// `master_link_status` of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkStatus {
    Up,
    Down,
}

/// A replica as its primary lists it (`slaveN:ip=..,port=..,state=..,offset=..,lag=..`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online`, `wait_bgsave`, `send_bulk`, ...
    pub state: String,
    pub offset: i64,
    pub lag: Option<u64>,
}

pub fn parse(text: &str) -> Result<Info, ParseError> {
    let mut info = Info::default();
    for (section, key, value) in kv::parse(REPLY, text)? {
        info.sections.entry(section).or_default().push(key.clone());
        info.fields.insert(key, value);
    }
    Ok(info)
}

impl Info {
    /// The raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// The keys of `section` (lowercase name, e.g. `replication`) in reply order.
    pub fn section(&self, section: &str) -> Option<&[String]> {
        self.sections.get(section).map(Vec::as_slice)
    }

    fn require(&self, key: &str) -> Result<&str, ParseError> {
        self.get(key).ok_or_else(|| ParseError::Missing {
            reply: REPLY,
            key: key.to_owned(),
        })
    }

    fn number<T: FromStr>(&self, key: &str) -> Result<T, ParseError> {
        let value = self.require(key)?;
        value.parse().map_err(|_| bad(key, value))
    }

    fn optional_number<T: FromStr>(&self, key: &str) -> Result<Option<T>, ParseError> {
        self.get(key)
            .map(|value| value.parse().map_err(|_| bad(key, value)))
            .transpose()
    }

    fn flag(&self, key: &str) -> Result<bool, ParseError> {
        match self.require(key)? {
            "0" => Ok(false),
            "1" => Ok(true),
            other => Err(bad(key, other)),
        }
    }

    /// The server's clock (`server_time_usec`), in Unix milliseconds: the engine measures how
    /// long a node has been failing on Valkey's clock, so its decisions need no clock of their own.
    pub fn server_time_ms(&self) -> Option<u64> {
        self.get("server_time_usec")?
            .parse::<u64>()
            .ok()
            .map(|us| us / 1000)
    }

    /// The server's own version: `valkey_version`, or `redis_version` on servers that predate
    /// it (Valkey keeps `redis_version` at 7.2.4 for client compatibility, so it is only a
    /// fallback).
    pub fn server_version(&self) -> Result<Version, ParseError> {
        self.get("valkey_version")
            .or_else(|| self.get("redis_version"))
            .ok_or_else(|| ParseError::Missing {
                reply: REPLY,
                key: "valkey_version".into(),
            })?
            .parse()
    }

    /// `redis_version` as reported, for clients that gate on it.
    pub fn redis_version(&self) -> Result<Version, ParseError> {
        self.require("redis_version")?.parse()
    }

    pub fn role(&self) -> Result<Role, ParseError> {
        match self.require("role")? {
            "master" | "primary" => Ok(Role::Primary),
            "slave" | "replica" => Ok(Role::Replica),
            other => Err(bad("role", other)),
        }
    }

    /// `connected_slaves`: how many replicas are attached to this primary.
    pub fn connected_replicas(&self) -> Result<u64, ParseError> {
        self.number("connected_slaves")
    }

    /// The `slaveN` lines of a primary, in N order.
    pub fn replicas(&self) -> Result<Vec<ConnectedReplica>, ParseError> {
        let mut out: Vec<(u64, ConnectedReplica)> = Vec::new();
        for (key, value) in &self.fields {
            let Some(index) = key
                .strip_prefix("slave")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            out.push((index, parse_replica(key, value)?));
        }
        out.sort_by_key(|(index, _)| *index);
        Ok(out.into_iter().map(|(_, r)| r).collect())
    }

    /// A replica's link to its primary; `None` on a primary.
    pub fn master_link_status(&self) -> Result<Option<LinkStatus>, ParseError> {
        self.get("master_link_status")
            .map(|status| match status {
                "up" => Ok(LinkStatus::Up),
                "down" => Ok(LinkStatus::Down),
                other => Err(bad("master_link_status", other)),
            })
            .transpose()
    }

    /// The replication offset this node has produced (primary) or relayed (replica).
    pub fn master_repl_offset(&self) -> Result<i64, ParseError> {
        self.number("master_repl_offset")
    }

    /// How far a replica has processed its primary's stream; `None` on a primary.
    pub fn slave_repl_offset(&self) -> Result<Option<i64>, ParseError> {
        self.optional_number("slave_repl_offset")
    }

    /// True while the dataset is being loaded from disk.
    pub fn loading(&self) -> Result<bool, ParseError> {
        self.flag("loading")
    }

    /// True while a replica is receiving a full sync; `None` on a primary.
    pub fn master_sync_in_progress(&self) -> Result<Option<bool>, ParseError> {
        self.get("master_sync_in_progress")
            .map(|_| self.flag("master_sync_in_progress"))
            .transpose()
    }

    pub fn cluster_enabled(&self) -> Result<bool, ParseError> {
        self.flag("cluster_enabled")
    }
}

fn bad(key: &str, value: &str) -> ParseError {
    ParseError::BadValue {
        reply: REPLY,
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

fn parse_replica(key: &str, value: &str) -> Result<ConnectedReplica, ParseError> {
    let mut fields = BTreeMap::new();
    for part in value.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| bad(key, value))?;
        fields.insert(k, v);
    }
    let get = |k: &str| fields.get(k).copied().ok_or_else(|| bad(key, value));
    Ok(ConnectedReplica {
        ip: get("ip")?.to_owned(),
        port: get("port")?.parse().map_err(|_| bad(key, value))?,
        state: get("state")?.to_owned(),
        offset: get("offset")?.parse().map_err(|_| bad(key, value))?,
        lag: fields
            .get("lag")
            .map(|lag| lag.parse().map_err(|_| bad(key, value)))
            .transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_and_bad_values() {
        let info = parse("# Server\r\nvalkey_version:9.1.2\r\n\r\n# Replication\r\nrole:sentinel\r\nloading:2\r\n").unwrap();
        assert_eq!(info.section("server").unwrap(), ["valkey_version"]);
        assert!(matches!(info.role(), Err(ParseError::BadValue { .. })));
        assert!(matches!(info.loading(), Err(ParseError::BadValue { .. })));
        assert!(matches!(
            info.cluster_enabled(),
            Err(ParseError::Missing { .. })
        ));
        assert!(parse("# Server\r\nno colon here\r\n").is_err());
    }

    #[test]
    fn replica_line_errors() {
        let info = parse("slave0:ip=1.2.3.4,port=x,state=online,offset=1\r\n").unwrap();
        assert!(info.replicas().is_err());
        let info = parse("slave0:garbage\r\n").unwrap();
        assert!(info.replicas().is_err());
    }
}
