//! `CLUSTER INFO`: the cluster's health as one node sees it.

use std::collections::BTreeMap;

use super::{ParseError, kv};

const REPLY: &str = "CLUSTER INFO";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    Ok,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub state: ClusterState,
    pub slots_assigned: u64,
    pub slots_ok: u64,
    pub slots_pfail: u64,
    pub slots_fail: u64,
    pub known_nodes: u64,
    /// How many primaries serve at least one slot.
    pub size: u64,
    pub current_epoch: u64,
    pub my_epoch: u64,
    /// Every line, typed or not (message statistics and fields of newer servers).
    pub fields: BTreeMap<String, String>,
}

pub fn parse(text: &str) -> Result<ClusterInfo, ParseError> {
    let fields: BTreeMap<String, String> = kv::parse(REPLY, text)?
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect();
    let get = |key: &str| {
        fields.get(key).ok_or_else(|| ParseError::Missing {
            reply: REPLY,
            key: key.to_owned(),
        })
    };
    let bad = |key: &str, value: &str| ParseError::BadValue {
        reply: REPLY,
        key: key.to_owned(),
        value: value.to_owned(),
    };
    let number = |key: &str| {
        let value = get(key)?;
        value.parse::<u64>().map_err(|_| bad(key, value))
    };
    let state = match get("cluster_state")?.as_str() {
        "ok" => ClusterState::Ok,
        "fail" => ClusterState::Fail,
        other => return Err(bad("cluster_state", other)),
    };
    Ok(ClusterInfo {
        state,
        slots_assigned: number("cluster_slots_assigned")?,
        slots_ok: number("cluster_slots_ok")?,
        slots_pfail: number("cluster_slots_pfail")?,
        slots_fail: number("cluster_slots_fail")?,
        known_nodes: number("cluster_known_nodes")?,
        size: number("cluster_size")?,
        current_epoch: number("cluster_current_epoch")?,
        my_epoch: number("cluster_my_epoch")?,
        fields,
    })
}
