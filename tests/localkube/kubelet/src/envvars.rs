//! Container environment: `envFrom`, `env` with its sources, and `$(VAR)` expansion exactly as
//! Kubernetes does it (`third_party/forked/golang/expansion`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar};

/// Everything an env var may refer to, fetched before the pure build.
#[derive(Debug, Default, Clone)]
pub struct EnvContext {
    pub pod_name: String,
    pub namespace: String,
    pub pod_uid: String,
    pub node_name: String,
    pub pod_ip: String,
    pub host_ip: String,
    pub service_account: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// ConfigMaps by name; `None` when the object does not exist.
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// Secrets by name, values decoded; `None` when the object does not exist.
    pub secrets: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// Variables every container gets unless it defines them (image env, API server address).
    pub defaults: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("{kind} \"{name}\" not found")]
    ObjectNotFound { kind: &'static str, name: String },
    #[error("couldn't find key {key} in {kind} {name}")]
    KeyNotFound {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("unsupported fieldRef {0}")]
    UnsupportedField(String),
    #[error("env var {0} has no value source this kubelet supports")]
    UnsupportedSource(String),
}

/// Names of the ConfigMaps and Secrets a container's env refers to, to fetch beforehand.
pub fn referenced_objects(container: &Container) -> (Vec<String>, Vec<String>) {
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            config_maps.push(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.push(r.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(src) = &var.value_from {
            if let Some(r) = &src.config_map_key_ref {
                config_maps.push(r.name.clone());
            }
            if let Some(r) = &src.secret_key_ref {
                secrets.push(r.name.clone());
            }
        }
    }
    config_maps.sort();
    config_maps.dedup();
    secrets.sort();
    secrets.dedup();
    (config_maps, secrets)
}

/// The container's final environment, in a stable order.
pub fn build(container: &Container, ctx: &EnvContext) -> Result<Vec<(String, String)>, EnvError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| match env
        .iter_mut()
        .find(|(n, _)| *n == name)
    {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    };

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional, objects) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => ("configmap", &r.name, r.optional, &ctx.config_maps),
            (None, Some(r)) => ("secret", &r.name, r.optional, &ctx.secrets),
            (None, None) => continue,
        };
        match objects.get(name).cloned().flatten() {
            Some(data) => {
                for (k, v) in data {
                    set(&mut env, format!("{prefix}{k}"), v);
                }
            }
            None if optional == Some(true) => {}
            None => {
                return Err(EnvError::ObjectNotFound {
                    kind,
                    name: name.clone(),
                });
            }
        }
    }

    for var in container.env.iter().flatten() {
        if let Some(value) = value_of(var, ctx, &env)? {
            set(&mut env, var.name.clone(), value);
        }
    }

    for (name, value) in &ctx.defaults {
        if !env.iter().any(|(n, _)| n == name) {
            env.push((name.clone(), value.clone()));
        }
    }
    Ok(env)
}

fn value_of(
    var: &EnvVar,
    ctx: &EnvContext,
    earlier: &[(String, String)],
) -> Result<Option<String>, EnvError> {
    let Some(src) = &var.value_from else {
        let raw = var.value.clone().unwrap_or_default();
        let lookup = |name: &str| {
            earlier
                .iter()
                .chain(ctx.defaults.iter())
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        return Ok(Some(expand(&raw, lookup)));
    };
    if let Some(field) = &src.field_ref {
        return field_value(&field.field_path, ctx).map(Some);
    }
    if let Some(r) = &src.config_map_key_ref {
        return key_value("configmap", &r.name, &r.key, r.optional, &ctx.config_maps);
    }
    if let Some(r) = &src.secret_key_ref {
        return key_value("secret", &r.name, &r.key, r.optional, &ctx.secrets);
    }
    if src.resource_field_ref.is_some() {
        // Limits are not enforced here; a kubelet reports node allocatable when unset.
        return Ok(Some("0".to_string()));
    }
    Err(EnvError::UnsupportedSource(var.name.clone()))
}

fn key_value(
    kind: &'static str,
    name: &str,
    key: &str,
    optional: Option<bool>,
    objects: &BTreeMap<String, Option<BTreeMap<String, String>>>,
) -> Result<Option<String>, EnvError> {
    let optional = optional == Some(true);
    match objects.get(name).cloned().flatten() {
        None if optional => Ok(None),
        None => Err(EnvError::ObjectNotFound {
            kind,
            name: name.to_string(),
        }),
        Some(data) => match data.get(key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(EnvError::KeyNotFound {
                kind,
                name: name.to_string(),
                key: key.to_string(),
            }),
        },
    }
}

/// The downward API fields a kubelet resolves for env vars and downwardAPI volumes.
pub fn field_value(path: &str, ctx: &EnvContext) -> Result<String, EnvError> {
    let value = match path {
        "metadata.name" => ctx.pod_name.clone(),
        "metadata.namespace" => ctx.namespace.clone(),
        "metadata.uid" => ctx.pod_uid.clone(),
        "spec.nodeName" => ctx.node_name.clone(),
        "spec.serviceAccountName" => ctx.service_account.clone(),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.clone(),
        "metadata.labels" => render_map(&ctx.labels),
        "metadata.annotations" => render_map(&ctx.annotations),
        other => {
            let keyed = |prefix: &str, map: &BTreeMap<String, String>| {
                other
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_suffix("']"))
                    .map(|key| map.get(key).cloned().unwrap_or_default())
            };
            return keyed("metadata.labels['", &ctx.labels)
                .or_else(|| keyed("metadata.annotations['", &ctx.annotations))
                .ok_or_else(|| EnvError::UnsupportedField(other.to_string()));
        }
    };
    Ok(value)
}

/// `key="value"` lines, as the downward API renders label and annotation maps.
fn render_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands `$(VAR)` references; `$$` escapes a `$`; unknown or unterminated references stay as written.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(value) => out.push_str(&value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // A `$` before any other character is kept with that character.
                    let ch_len = rest.chars().next().map(char::len_utf8).unwrap_or(1);
                    out.push('$');
                    out.push_str(&rest[..ch_len]);
                    ch_len
                }
            };
            cursor += advance + 1;
            checkpoint = cursor;
        } else {
            cursor += 1;
        }
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// Expands `$(VAR)` in command and args with the container's final environment.
pub fn expand_all(items: &[String], env: &[(String, String)]) -> Vec<String> {
    let lookup = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    items.iter().map(|s| expand(s, lookup)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapKeySelector, EnvFromSource, EnvVarSource, ObjectFieldSelector, SecretEnvSource,
        SecretKeySelector,
    };

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        assert_eq!(expand("$(A)-x", lookup), "alpha-x");
        assert_eq!(expand("$$(A)", lookup), "$(A)");
        assert_eq!(expand("$$$(A)", lookup), "$alpha");
        assert_eq!(expand("$(B)", lookup), "$(B)");
        assert_eq!(expand("$(A", lookup), "$(A");
        assert_eq!(expand("a$b", lookup), "a$b");
        assert_eq!(expand("end$", lookup), "end$");
        assert_eq!(expand("$(EMPTY)x", lookup), "x");
        assert_eq!(expand("é$(A)ü", lookup), "éalphaü");
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from(name: &str, src: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(src),
        }
    }

    fn context() -> EnvContext {
        EnvContext {
            pod_name: "web-0".into(),
            namespace: "ns1".into(),
            pod_ip: "10.213.1.2".into(),
            config_maps: [(
                "cm".to_string(),
                Some([("k".to_string(), "v".to_string())].into()),
            )]
            .into(),
            secrets: [
                (
                    "sec".to_string(),
                    Some([("pass".to_string(), "s3cret".to_string())].into()),
                ),
                ("missing".to_string(), None),
            ]
            .into(),
            defaults: vec![("KUBERNETES_SERVICE_HOST".into(), "10.213.0.1".into())],
            ..Default::default()
        }
    }

    #[test]
    fn env_resolves_sources_in_order() {
        let container = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                prefix: Some("S_".into()),
                secret_ref: Some(SecretEnvSource {
                    name: "sec".into(),
                    optional: None,
                }),
                config_map_ref: None,
            }]),
            env: Some(vec![
                from(
                    "POD_IP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.podIP".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    },
                ),
                var("ADDR", "$(POD_IP):6379 $(LATER) $(KUBERNETES_SERVICE_HOST)"),
                var("LATER", "x"),
                from(
                    "CM",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cm".into(),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "OPT",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "missing".into(),
                            key: "k".into(),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        let env = build(&container, &context());
        assert_eq!(
            env,
            Ok(vec![
                ("S_pass".to_string(), "s3cret".to_string()),
                ("POD_IP".to_string(), "10.213.1.2".to_string()),
                (
                    "ADDR".to_string(),
                    "10.213.1.2:6379 $(LATER) 10.213.0.1".to_string()
                ),
                ("LATER".to_string(), "x".to_string()),
                ("CM".to_string(), "v".to_string()),
                (
                    "KUBERNETES_SERVICE_HOST".to_string(),
                    "10.213.0.1".to_string()
                ),
            ])
        );
        let args = expand_all(&["--dir=$(LATER)".to_string()], &env.unwrap_or_default());
        assert_eq!(args, vec!["--dir=x".to_string()]);
    }

    #[test]
    fn a_missing_required_key_is_an_error() {
        let container = Container {
            name: "c".into(),
            env: Some(vec![from(
                "P",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "nope".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        assert_eq!(
            build(&container, &context()),
            Err(EnvError::KeyNotFound {
                kind: "secret",
                name: "sec".into(),
                key: "nope".into()
            })
        );
    }
}
