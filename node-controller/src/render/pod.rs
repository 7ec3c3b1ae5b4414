//! The pod template shared by both workload types, as the values `templates/node/pod-template.yaml`
//! inserts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use serde::Serialize;
use serde_json::{Value, json};
use valkey_api::contract::{
    SENTINEL_PORT, TLS_CA_KEY, TLS_CERT_KEY, TLS_DIR, TLS_KEY_KEY, VALKEY_PORT,
};
use valkey_api::v1alpha1::{NodeServer, ValkeyNodeSpec};

use super::exporter::Exporter;
use super::restore::Restore;
use crate::names::{ChildNames, NODE_LABEL, labels};

use super::paths::{CONFIG_DIR, CREDENTIALS_DIR, DATA_DIR};

/// Every value of the pod template that depends on the spec.
#[derive(Debug, Clone, Serialize)]
pub struct PodTemplate {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub affinity: Option<Affinity>,
    pub image: String,
    pub pull_policy: String,
    /// The cluster bus port the server listens on: its `cluster-port` setting, or Valkey's
    /// default (the client port + 10000). Left out of the fingerprint: it follows `cluster-port`,
    /// which the revision already covers, and a new field must not restart every running pod.
    #[serde(skip)]
    pub bus_port: u16,
    /// The pod runs a Sentinel (`spec.server`, which never changes on a node): its command and
    /// port. Left out of the fingerprint, as `bus_port` is.
    #[serde(skip)]
    pub sentinel: bool,
    pub env: Vec<Value>,
    pub resources: Option<ResourceRequirements>,
    /// The probe command: Valkey's own `PING`, authenticated when the node has credentials.
    pub ping: Vec<String>,
    pub mounts: Vec<Value>,
    pub volumes: Vec<Value>,
    /// The exporter container, when `spec.exporter` asks for one. Left out of the fingerprint
    /// when absent, so that a node without one keeps the revision it had before exporters existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exporter: Option<Exporter>,
    /// The init container that fetches `spec.initialData`; left out of the fingerprint when
    /// absent, as the exporter is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<Restore>,
}

impl PodTemplate {
    /// `restore_image`: the operator's image, which holds `valkey-restore`.
    pub fn new(
        name: &str,
        names: &ChildNames,
        spec: &ValkeyNodeSpec,
        persistent: bool,
        restore_image: &str,
    ) -> Self {
        // The parent's labels first, so the node-controller's own (the selector among them) win.
        let mut pod_labels = spec.pod_labels.clone().unwrap_or_default();
        pod_labels.extend(labels(name));
        debug_assert!(pod_labels.contains_key(NODE_LABEL));

        let mut env = Vec::new();
        let sentinel = spec.server == NodeServer::Sentinel;
        let port = if sentinel { SENTINEL_PORT } else { VALKEY_PORT };
        let mut ping: Vec<String> = ["valkey-cli", "-h", "127.0.0.1", "-p"]
            .into_iter()
            .map(str::to_owned)
            .chain([port.to_string()])
            .collect();
        let mut mounts = vec![
            json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true}),
            json!({"name": "data", "mountPath": DATA_DIR}),
            json!({"name": "tmp", "mountPath": "/tmp"}),
        ];
        let data = if persistent {
            json!({"name": "data", "persistentVolumeClaim": {"claimName": names.pvc}})
        } else {
            json!({"name": "data", "emptyDir": {}})
        };
        let mut volumes = vec![
            json!({"name": "config", "configMap": {"name": names.config_map, "defaultMode": 0o444}}),
            data,
            json!({"name": "tmp", "emptyDir": {}}),
        ];
        if let Some(credentials) = &spec.credentials {
            // valkey-cli reads the password from REDISCLI_AUTH, so it never shows in a process list.
            env.push(
                json!({"name": "REDISCLI_AUTH", "valueFrom": {"secretKeyRef": {
                "name": credentials.secret_name, "key": credentials.password_key}}}),
            );
            ping.extend([
                "--no-auth-warning".to_owned(),
                "--user".to_owned(),
                credentials.username.clone(),
            ]);
            mounts.push(
                json!({"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": true}),
            );
            let mut secret = json!({"secretName": credentials.secret_name, "defaultMode": 0o440});
            // Only the keys the parent lists: the pod (whose image the parent's user chooses)
            // never sees the rest of the Secret.
            if let Some(files) = credentials.files.as_ref().filter(|f| !f.is_empty()) {
                secret["items"] = files
                    .iter()
                    .map(|key| json!({"key": key, "path": key}))
                    .collect();
            }
            volumes.push(json!({"name": "credentials", "secret": secret}));
        }
        if let Some(tls) = &spec.tls {
            // The probe speaks TLS and checks the server's chain against the mounted CA.
            ping.extend([
                "--tls".to_owned(),
                "--cacert".to_owned(),
                format!("{TLS_DIR}/{TLS_CA_KEY}"),
            ]);
            mounts.push(json!({"name": "tls", "mountPath": TLS_DIR, "readOnly": true}));
            // Only the three keys Valkey reads: a CA's private key in the same Secret (a user's
            // choice) never reaches the pod.
            let items: Vec<Value> = [TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY]
                .iter()
                .map(|key| json!({"key": key, "path": key}))
                .collect();
            volumes.push(json!({"name": "tls", "secret": {
                "secretName": tls.secret_name,
                "defaultMode": 0o440,
                "items": items,
            }}));
        }
        ping.push("ping".to_owned());
        let restore = Restore::of(spec, restore_image).map(|(restore, restore_volumes)| {
            volumes.extend(restore_volumes);
            restore
        });

        Self {
            labels: pod_labels,
            annotations: spec.pod_annotations.clone().unwrap_or_default(),
            node_selector: spec.node_selector.clone(),
            tolerations: spec.tolerations.clone(),
            affinity: spec.affinity.clone(),
            image: spec.image.clone(),
            pull_policy: spec.image_pull_policy.to_string(),
            bus_port: spec
                .config
                .as_ref()
                .and_then(|c| c.get("cluster-port"))
                .and_then(|p| p.parse().ok())
                .unwrap_or(VALKEY_PORT + 10000),
            sentinel,
            env,
            resources: spec.resources.clone(),
            ping,
            mounts,
            volumes,
            exporter: Exporter::of(spec),
            restore,
        }
    }

    /// Mounts only `key` of the ConfigMap, as valkey.conf. Applied after the revision is known:
    /// the key is named after it, and the revision already covers valkey.conf.
    pub fn read_config_from(&mut self, key: &str) {
        for volume in &mut self.volumes {
            if volume["name"] == "config" {
                volume["configMap"]["items"] = json!([{"key": key, "path": "valkey.conf"}]);
            }
        }
    }

    /// Everything that shapes the pod, for the revision hash. (Serialising these types cannot
    /// fail: every map has string keys.)
    pub fn fingerprint(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
