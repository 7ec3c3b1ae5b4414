//! valkey.conf: `spec.config` as given, one `key value` line per entry, `maxmemory` from the
//! memory limit when the config sets none, then the lines the pod needs (its data directory, the
//! port its probes use, and with `spec.tls` the TLS files where the pod mounts them).

use std::collections::BTreeMap;

use askama::Template;
use k8s_openapi::api::core::v1::ResourceRequirements;
use valkey_api::contract::{
    PLAINTEXT_PORT, SENTINEL_PORT, TLS_CA_KEY, TLS_CERT_KEY, TLS_DIR, TLS_KEY_KEY, VALKEY_PORT,
};
use valkey_api::v1alpha1::{NodeServer, NodeTls};

use super::error::RenderError;
use super::memory;

#[derive(Template)]
#[template(path = "node/valkey.conf", escape = "none")]
struct ValkeyConf<'a> {
    name: &'a str,
    namespace: &'a str,
    config: Vec<(&'a str, &'a str)>,
    /// `maxmemory` derived from the memory limit, when `config` sets none (see [`super::memory`]).
    maxmemory: Option<u64>,
    dataset_percent: u64,
    port: u16,
    tls: Option<TlsLines>,
    /// A Sentinel: no cluster bus to secure.
    sentinel: bool,
}

/// What valkey.conf says when the server speaks TLS.
struct TlsLines {
    /// The plain port: 0 (none) or the plain-text port beside TLS.
    plain_port: u16,
    cert: String,
    key: String,
    ca: String,
}

impl TlsLines {
    fn of(tls: &NodeTls) -> Self {
        let file = |key: &str| format!("{TLS_DIR}/{key}");
        Self {
            plain_port: if tls.plaintext_port {
                PLAINTEXT_PORT
            } else {
                0
            },
            cert: file(TLS_CERT_KEY),
            key: file(TLS_KEY_KEY),
            ca: file(TLS_CA_KEY),
        }
    }
}

/// Renders valkey.conf. The API server already rejects keys that are not directive names and
/// values with control characters; this checks again so that no path, however it was reached,
/// writes a second line for one entry.
pub fn render_valkey_conf(
    name: &str,
    namespace: &str,
    server: NodeServer,
    config: Option<&BTreeMap<String, String>>,
    resources: Option<&ResourceRequirements>,
    tls: Option<&NodeTls>,
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
    let sentinel = server == NodeServer::Sentinel;
    // A Sentinel holds no data set: no memory to bound.
    let maxmemory = if sentinel || entries.iter().any(|(key, _)| *key == "maxmemory") {
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
        port: if sentinel { SENTINEL_PORT } else { VALKEY_PORT },
        tls: tls.map(TlsLines::of),
        sentinel,
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
