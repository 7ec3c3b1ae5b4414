//! `spec.initialData` as an init container: `valkey-restore` (a program of the operator's own
//! image, see backup/src/bin/valkey-restore.rs) fetches the snapshot into the data folder and
//! checks it before the Valkey container may start. The store's credentials (and CA bundle)
//! are mounted into this container only: the server's container, whose image the parent's user
//! chooses, never sees them.

use serde::Serialize;
use serde_json::{Value, json};
use valkey_api::v1alpha1::{InitialData, ValkeyNodeSpec};

use super::paths::DATA_DIR;

/// The init container's name.
pub const RESTORE_CONTAINER: &str = "restore";
/// Where the store's access key is mounted (two files, whatever the Secret's keys are called).
pub const STORE_CREDENTIALS_DIR: &str = "/etc/valkey/restore";
pub const STORE_CA_DIR: &str = "/etc/valkey/restore-ca";
const ACCESS_KEY_ID_FILE: &str = "access-key-id";
const SECRET_ACCESS_KEY_FILE: &str = "secret-access-key";
const CA_FILE: &str = "ca.crt";

/// The init container, as the pod template inserts it.
#[derive(Debug, Clone, Serialize)]
pub struct Restore {
    pub image: String,
    pub args: Vec<String>,
    pub mounts: Vec<Value>,
}

impl Restore {
    /// The init container and the pod volumes it needs, when the spec has initial data.
    pub fn of(spec: &ValkeyNodeSpec, image: &str) -> Option<(Self, Vec<Value>)> {
        let data = spec.initial_data.as_ref()?;
        Some(Self::render(data, &dbfilename(spec), image))
    }

    fn render(data: &InitialData, dbfilename: &str, image: &str) -> (Self, Vec<Value>) {
        let s3 = &data.store.s3;
        let mut args: Vec<String> = vec![
            "--dir".into(),
            DATA_DIR.into(),
            "--dbfilename".into(),
            dbfilename.into(),
            "--object".into(),
            data.object.clone(),
            "--sha256".into(),
            data.sha256.clone(),
            "--bytes".into(),
            data.bytes.to_string(),
            "--bucket".into(),
            s3.bucket.clone(),
            "--region".into(),
            s3.region.clone(),
            "--path-style".into(),
            s3.path_style.to_string(),
            "--access-key-id-file".into(),
            format!("{STORE_CREDENTIALS_DIR}/{ACCESS_KEY_ID_FILE}"),
            "--secret-access-key-file".into(),
            format!("{STORE_CREDENTIALS_DIR}/{SECRET_ACCESS_KEY_FILE}"),
        ];
        if let Some(endpoint) = &s3.endpoint {
            args.extend(["--endpoint".into(), endpoint.clone()]);
        }
        if let Some(prefix) = s3.prefix.as_ref().filter(|p| !p.is_empty()) {
            args.extend(["--prefix".into(), prefix.clone()]);
        }
        let mut mounts = vec![
            json!({"name": "data", "mountPath": DATA_DIR}),
            json!({"name": "tmp", "mountPath": "/tmp"}),
            json!({"name": "restore-credentials", "mountPath": STORE_CREDENTIALS_DIR, "readOnly": true}),
        ];
        let credentials = &s3.credentials;
        // Only the two keys of the access key, under fixed names: the rest of the Secret stays
        // out of the pod.
        let mut volumes = vec![json!({"name": "restore-credentials", "secret": {
            "secretName": credentials.secret_name,
            "defaultMode": 0o440,
            "items": [
                {"key": credentials.access_key_id_key, "path": ACCESS_KEY_ID_FILE},
                {"key": credentials.secret_access_key_key, "path": SECRET_ACCESS_KEY_FILE},
            ],
        }})];
        if let Some(ca) = &s3.ca_bundle {
            args.extend([
                "--ca-bundle-file".into(),
                format!("{STORE_CA_DIR}/{CA_FILE}"),
            ]);
            mounts.push(json!({"name": "restore-ca", "mountPath": STORE_CA_DIR, "readOnly": true}));
            volumes.push(json!({"name": "restore-ca", "secret": {
                "secretName": ca.secret_name,
                "defaultMode": 0o440,
                "items": [{"key": ca.key, "path": CA_FILE}],
            }}));
        }
        (
            Self {
                image: image.to_owned(),
                args,
                mounts,
            },
            volumes,
        )
    }
}

/// The file the server loads at start: `dbfilename` of spec.config (as Valkey reads it, quotes
/// removed), else Valkey's default.
fn dbfilename(spec: &ValkeyNodeSpec) -> String {
    spec.config
        .as_ref()
        .and_then(|c| c.get("dbfilename"))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "dump.rdb".to_owned())
}
