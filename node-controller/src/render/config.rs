//! valkey.conf: `spec.config` as given, one `key value` line per entry, `maxmemory` from the
//! memory limit when the config sets none, then the two lines the pod needs (its data directory
//! and the port its probes use).

use std::collections::BTreeMap;

use askama::Template;
use k8s_openapi::api::core::v1::ResourceRequirements;

use super::{RenderError, memory};

#[derive(Template)]
#[template(path = "node/valkey.conf", escape = "none")]
struct ValkeyConf<'a> {
    name: &'a str,
    namespace: &'a str,
    config: Vec<(&'a str, &'a str)>,
    /// `maxmemory` derived from the memory limit, when `config` sets none (see [`super::memory`]).
    maxmemory: Option<u64>,
    dataset_percent: u64,
}

/// Renders valkey.conf. The API server already rejects keys that are not directive names and
/// values with control characters; this checks again so that no path, however it was reached,
/// writes a second line for one entry.
pub fn render_valkey_conf(
    name: &str,
    namespace: &str,
    config: Option<&BTreeMap<String, String>>,
    resources: Option<&ResourceRequirements>,
) -> Result<String, RenderError> {
    let mut entries = Vec::new();
    for (key, value) in config.into_iter().flatten() {
        if !is_directive_name(key) {
            return Err(RenderError::InvalidConfig(format!(
                "key {key:?} is not a Valkey directive name (lower-case letters, digits and '-')"
            )));
        }
        if value.chars().any(char::is_control) {
            return Err(RenderError::InvalidConfig(format!(
                "the value of {key} contains a line break or another control character"
            )));
        }
        entries.push((key.as_str(), value.as_str()));
    }
    let maxmemory = if entries.iter().any(|(key, _)| *key == "maxmemory") {
        None
    } else {
        memory::default_maxmemory(resources)
    };
    ValkeyConf {
        name,
        namespace,
        config: entries,
        maxmemory,
        dataset_percent: memory::DATASET_PERCENT,
    }
    .render()
    .map_err(|e| RenderError::Template {
        template: "node/valkey.conf",
        message: e.to_string(),
    })
}

fn is_directive_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && key.len() <= 64
}
