//! The build stage: a ValkeyNode becomes its children (ConfigMap, PVC, StatefulSet or Deployment).
//!
//! Pure and deterministic: no client, no clock, no randomness, so the same spec always yields
//! byte-identical objects and a reconcile that finds nothing to change changes nothing. The
//! objects come from the askama templates in `templates/node/` and are parsed into typed
//! k8s-openapi objects before anything is applied. Every user-written value enters a template
//! through the `json` filter, which YAML reads as a quoted scalar or a flow collection, so no value
//! can add YAML structure; valkey.conf values are checked to hold no line break or control
//! character, so no value can add a line.

mod config;
mod error;
mod exporter;
pub mod memory;
mod paths;
mod pod;
pub mod restore;
pub mod volume;

use std::collections::BTreeMap;

use askama::Template;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use serde_json::Value;
use sha2::{Digest, Sha256};
use valkey_api::v1alpha1::{NodeServer, ValkeyNode, WorkloadType};

use crate::live;
use crate::names::{ChildNames, REVISION_ANNOTATION, labels, selector};
pub use config::render_valkey_conf;
pub use error::RenderError;
use pod::PodTemplate;

/// Everything a ValkeyNode should own, plus the revision its pod template carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    pub config_map: ConfigMap,
    /// Only with persistence enabled.
    pub pvc: Option<PersistentVolumeClaim>,
    pub workload: Workload,
    /// Hash of everything that shapes the pod: the template and the restart-only part of
    /// valkey.conf.
    pub revision: String,
    /// The settings of valkey.conf the running server takes with CONFIG SET (see [`crate::live`]).
    pub live: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    StatefulSet(Box<StatefulSet>),
    Deployment(Box<Deployment>),
}

#[derive(Template)]
#[template(path = "node/configmap.yaml", escape = "none")]
struct ConfigMapYaml<'a> {
    names: &'a ChildNames,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    owner: &'a OwnerReference,
    data: &'a BTreeMap<String, String>,
}

#[derive(Template)]
#[template(path = "node/pvc.yaml", escape = "none")]
struct PvcYaml<'a> {
    names: &'a ChildNames,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    size: &'a str,
    storage_class: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "node/statefulset.yaml", escape = "none")]
struct StatefulSetYaml<'a> {
    names: &'a ChildNames,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    selector: &'a BTreeMap<String, String>,
    owner: &'a OwnerReference,
    pod: &'a PodTemplate,
    /// 1 holds the pod on its current revision; 0 lets the new one roll.
    partition: i32,
}

#[derive(Template)]
#[template(path = "node/deployment.yaml", escape = "none")]
struct DeploymentYaml<'a> {
    names: &'a ChildNames,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    selector: &'a BTreeMap<String, String>,
    owner: &'a OwnerReference,
    pod: &'a PodTemplate,
    paused: bool,
    recreate: bool,
}

/// What the build needs besides the ValkeyNode: how this node-controller was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The image whose `valkey-restore` fetches `spec.initialData` (the operator's own).
    pub restore_image: String,
}

/// The image of this version's node-controller, as the chart names it.
pub const DEFAULT_RESTORE_IMAGE: &str = concat!(
    "valkey-operator/node-controller:",
    env!("CARGO_PKG_VERSION")
);

impl Default for Options {
    fn default() -> Self {
        Self {
            restore_image: DEFAULT_RESTORE_IMAGE.to_owned(),
        }
    }
}

/// Builds every child of `node` with the default [`Options`].
#[cfg(test)]
pub fn build(node: &ValkeyNode) -> Result<Children, RenderError> {
    build_with(node, &Options::default())
}

/// Builds every child of `node`.
pub fn build_with(node: &ValkeyNode, options: &Options) -> Result<Children, RenderError> {
    let name = node
        .meta()
        .name
        .as_deref()
        .ok_or(RenderError::MissingMetadata("name"))?;
    let namespace = node
        .meta()
        .namespace
        .as_deref()
        .ok_or(RenderError::MissingMetadata("namespace"))?;
    let owner = node
        .controller_owner_ref(&())
        .ok_or(RenderError::MissingMetadata("uid"))?;
    let spec = &node.spec;
    let names = ChildNames::of(name);
    let labels = labels(name);
    let selector = selector(name);

    let sentinel = spec.server == NodeServer::Sentinel;
    let valkey_conf = render_valkey_conf(
        name,
        namespace,
        spec.server,
        spec.config.as_ref(),
        spec.resources.as_ref(),
        spec.tls.as_ref(),
    )?;
    // Live settings stay out of the revision, so changing them restarts nothing; valkey.conf
    // keeps them, so a pod that restarts anyway comes up with them.
    let version = node
        .status
        .as_ref()
        .and_then(|s| s.valkey_version.as_deref())
        .and_then(live::Version::parse);
    // A Sentinel takes no CONFIG SET: every setting of its is restart-only.
    let (restart_only, mut live_settings) = if sentinel {
        (spec.config.clone().unwrap_or_default(), BTreeMap::new())
    } else {
        live::split(spec.config.as_ref(), version)
    };
    if let Some(bytes) = memory::default_maxmemory(spec.resources.as_ref())
        .filter(|_| {
            !sentinel
                && !live_settings.contains_key("maxmemory")
                && !restart_only.contains_key("maxmemory")
        })
        .filter(|_| live::is_live(version, "maxmemory"))
    {
        live_settings.insert("maxmemory".to_owned(), bytes.to_string());
    }
    if !sentinel && spec.tls.is_some() && live::is_live(version, live::TLS_AUTO_RELOAD) {
        // Set on the running server only, never written to valkey.conf: an older image that a
        // pod might restart with would refuse the directive and not start.
        live_settings.insert(
            live::TLS_AUTO_RELOAD.to_owned(),
            live::TLS_RELOAD_SECONDS.to_string(),
        );
    }
    let restart_conf = render_valkey_conf(
        name,
        namespace,
        spec.server,
        Some(&restart_only),
        None,
        spec.tls.as_ref(),
    )?;
    let persistence = spec.persistence.as_ref().filter(|p| p.enabled);
    let pvc = match persistence {
        Some(p) => Some(parse(
            "node/pvc.yaml",
            PvcYaml {
                names: &names,
                namespace,
                labels: &labels,
                size: &p.size.0,
                storage_class: p.storage_class_name.as_deref(),
            }
            .render(),
        )?),
        None => None,
    };

    // The revision is computed over the template without its own annotation, plus valkey.conf:
    // a config change must restart the pod even though the template only names the ConfigMap.
    let mut pod = PodTemplate::new(
        name,
        &names,
        spec,
        persistence.is_some(),
        &options.restore_image,
    );
    let revision = revision(&pod.fingerprint(), &restart_conf);
    pod.annotations
        .insert(REVISION_ANNOTATION.to_owned(), revision.clone());
    // Each revision reads its own key, so a held pod that is recreated still starts with the
    // valkey.conf of its revision (see `keep_held_configs`).
    let key = config_key(&revision);
    pod.read_config_from(&key);
    let config_map: ConfigMap = parse(
        "node/configmap.yaml",
        ConfigMapYaml {
            names: &names,
            namespace,
            labels: &labels,
            owner: &owner,
            data: &BTreeMap::from([(key, valkey_conf)]),
        }
        .render(),
    )?;
    let allowed = restart_allowed(spec.allowed_revision.as_deref(), &revision);

    let workload = match spec.workload_type {
        WorkloadType::StatefulSet => Workload::StatefulSet(Box::new(parse(
            "node/statefulset.yaml",
            StatefulSetYaml {
                names: &names,
                namespace,
                labels: &labels,
                selector: &selector,
                owner: &owner,
                pod: &pod,
                partition: if allowed { 0 } else { 1 },
            }
            .render(),
        )?)),
        WorkloadType::Deployment => Workload::Deployment(Box::new(parse(
            "node/deployment.yaml",
            DeploymentYaml {
                names: &names,
                namespace,
                labels: &labels,
                selector: &selector,
                owner: &owner,
                pod: &pod,
                paused: !allowed,
                recreate: persistence.is_some(),
            }
            .render(),
        )?)),
    };

    Ok(Children {
        config_map,
        pvc,
        workload,
        revision,
        live: live_settings,
    })
}

/// The ConfigMap key holding the valkey.conf of `revision`.
pub fn config_key(revision: &str) -> String {
    format!("valkey-{revision}.conf")
}

/// Keeps, beside the desired revision's valkey.conf, every valkey.conf the live ConfigMap holds
/// until the pod has rolled to the desired revision: a pod held on its revision (or recreated on
/// it by its workload) must find its own config, which cannot be rendered again from a spec that
/// has moved on. Once every live pod runs the desired revision the older keys are left out, and
/// server-side apply removes them.
pub fn keep_held_configs(config_map: &mut ConfigMap, live: Option<&ConfigMap>, rolled_out: bool) {
    if rolled_out {
        return;
    }
    let Some(held) = live.and_then(|l| l.data.as_ref()) else {
        return;
    };
    let data = config_map.data.get_or_insert_default();
    for (key, conf) in held {
        if key.ends_with(".conf") && !data.contains_key(key) {
            data.insert(key.clone(), conf.clone());
        }
    }
}

/// Whether the parent lets the pod run `desired`: always when it set no revision, else only that
/// one.
pub fn restart_allowed(allowed: Option<&str>, desired: &str) -> bool {
    match allowed {
        None | Some("") => true,
        Some(allowed) => allowed == desired,
    }
}

fn revision(pod_fingerprint: &Value, valkey_conf: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(pod_fingerprint.to_string().as_bytes());
    hasher.update([0]);
    hasher.update(valkey_conf.as_bytes());
    hex::encode(&hasher.finalize()[..5])
}

fn parse<T: serde::de::DeserializeOwned>(
    template: &'static str,
    rendered: askama::Result<String>,
) -> Result<T, RenderError> {
    let text = rendered.map_err(|e| RenderError::Template {
        template,
        message: e.to_string(),
    })?;
    serde_yaml::from_str(&text).map_err(|e| RenderError::Parse {
        template,
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
