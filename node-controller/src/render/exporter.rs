//! The exporter container `spec.exporter` adds beside Valkey: the Redis exporter
//! (oliver006/redis_exporter, or an image that takes the same flags and environment) reading the
//! server on the pod's own loopback and serving Prometheus metrics on [`METRICS_PORT`].
//!
//! How it logs in, and why not the usual way: the exporter's own password setting
//! (`REDIS_PASSWORD`, `--redis.password`) is also used for every address its `/scrape?target=`
//! endpoint is asked to read, so anyone who can reach the metrics port could have the exporter
//! send the password to a server of their choice (Redis exporter 1.45, checked). The login goes
//! in the address instead (`redis://<user>:<password>@localhost:6379`), which only the exporter's
//! own server is read with; Kubernetes puts the password into it from an environment variable
//! that reads the Secret (`$(VAR)` expansion), so the password is in no argument, no pod spec and
//! no log (the exporter writes the address with the password masked). It must therefore be
//! URL-safe (`/`, `?`, `#` and `%` break the address): the operator's passwords are letters and
//! digits.

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::Serialize;
use serde_json::{Value, json};
use valkey_api::contract::{METRICS_PORT, VALKEY_PORT};
use valkey_api::v1alpha1::ValkeyNodeSpec;

/// The environment variable the password reaches the exporter's container by. Not one the
/// exporter reads itself (`REDIS_PASSWORD`): it only fills the address.
pub const PASSWORD_ENV: &str = "VALKEY_EXPORTER_PASSWORD";

/// Everything of the exporter container that depends on the spec; part of the pod's fingerprint,
/// so adding, removing or changing it changes the revision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exporter {
    pub image: String,
    pub resources: Option<ResourceRequirements>,
    pub args: Vec<String>,
    pub env: Vec<Value>,
}

impl Exporter {
    /// The exporter of `spec`, if it asks for one.
    pub fn of(spec: &ValkeyNodeSpec) -> Option<Self> {
        let exporter = spec.exporter.as_ref()?;
        let mut args = vec![
            format!("--web.listen-address=:{METRICS_PORT}"),
            // CLIENT SETNAME is not among the rights of the user it reads as, and a name on its
            // connection is not worth granting a command for.
            "--set-client-name=false".to_owned(),
        ];
        let scheme = if spec.tls.is_some() {
            // The exporter reaches the server on the pod's own loopback, where only this pod's
            // containers can listen, so there is nobody to tell apart by certificate. And it
            // cannot verify the chain without the host name (Redis exporter 1.45 has no such
            // mode: with `--tls-ca-cert-file` alone it also checks that the certificate names
            // `localhost`, which a certificate of the user's need not), so it verifies neither.
            args.push("--skip-tls-verification".to_owned());
            "rediss"
        } else {
            "redis"
        };
        let mut env = Vec::new();
        let login = match &spec.credentials {
            Some(credentials) => {
                env.push(json!({"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {
                    "name": credentials.secret_name, "key": credentials.password_key}}}));
                format!("{}:$({PASSWORD_ENV})@", credentials.username)
            }
            None => String::new(),
        };
        env.push(json!({"name": "REDIS_ADDR",
            "value": format!("{scheme}://{login}localhost:{VALKEY_PORT}")}));
        Some(Self {
            image: exporter.image.clone(),
            resources: exporter.resources.clone(),
            args,
            env,
        })
    }
}
