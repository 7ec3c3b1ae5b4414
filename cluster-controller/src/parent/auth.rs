//! The Secrets of a parent's authentication (a ValkeyCluster's, a ValkeyReplication's), as objects: what each holds, who may mount
//! which key, and whether the operator may write one. Pure.
//!
//! - `<cluster>-acl`, owned by the cluster: the ACL file every server starts with and the
//!   replication login (`users.acl`, `replication.conf`: the only keys pods mount), the
//!   operator's three generated passwords (the healthcheck one reaches the probes through an
//!   environment variable), and the password hashes each client user's servers accept
//!   (`accepted-passwords`, hashes only, for rotations in progress).
//! - `<cluster>-operator`, owned by the cluster, mounted nowhere: a second copy of the
//!   operator's passwords, so that losing either Secret never locks the operator out of the
//!   servers (it rebuilds the lost one from the other).
//! - `<cluster>-password`, the generated clients' password when the user names none: created
//!   once, never owned (it outlives the cluster, like the data it protects), never overwritten.
//!
//! The operator writes only Secrets it created: a Secret of one of these names that lacks its
//! label (and, for the owned ones, an owner reference to this very cluster) is never adopted or
//! overwritten; the cluster reports it instead.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::distr::{Alphanumeric, SampleString};
use sha2::{Digest, Sha256};

use super::labels::FIELD_MANAGER;
use crate::access::rights::REPLICATION_USER;
use crate::access::{OperatorPasswords, UserSet};

pub use super::secret_names::{
    acl_secret_name, generated_password_secret_name, operator_secret_name,
};
pub use crate::access::rights::{HEALTHCHECK_USER, OPERATOR_USER};
pub use valkey_api::contract::CREDENTIALS_DIR;

pub const ACL_FILE_KEY: &str = "users.acl";
pub const REPLICATION_CONF_KEY: &str = "replication.conf";
pub const OPERATOR_PASSWORD_KEY: &str = "operator-password";
pub const HEALTHCHECK_PASSWORD_KEY: &str = "healthcheck-password";
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";
/// The backup user's password: read by the backup controller, mounted nowhere.
pub const BACKUP_PASSWORD_KEY: &str = "backup-password";
/// The `sentinel` user's password: Sentinel logs in to the servers and its peers with it (told
/// at run time, never through a ConfigMap), mounted nowhere.
pub const SENTINEL_PASSWORD_KEY: &str = "sentinel-password";
/// The Sentinels' ACL file (with Sentinel on): mounted by the Sentinels only.
pub const SENTINEL_ACL_FILE_KEY: &str = "sentinel.acl";
/// The password hashes each client user's servers accept (JSON: user → hashes, current last).
pub const ACCEPTED_PASSWORDS_KEY: &str = "accepted-passwords";
/// Key of the generated clients' password Secret.
pub const CLIENT_PASSWORD_KEY: &str = "password";
/// Key of the operator's own copy of the generated clients' password (in its operator Secret):
/// a deleted password Secret comes back with the same password, so no client is locked out.
pub const CLIENT_PASSWORD_COPY_KEY: &str = "client-password";
/// The keys of the ACL Secret a pod mounts as files: its ACL file and its replication login.
pub const MOUNTED_KEYS: [&str; 2] = [ACL_FILE_KEY, REPLICATION_CONF_KEY];

const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

pub fn random_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), 32)
}

/// New operator passwords, for a cluster that has none yet.
pub fn generate_passwords() -> OperatorPasswords {
    OperatorPasswords {
        operator: random_password(),
        healthcheck: random_password(),
        replication: random_password(),
        backup: random_password(),
        sentinel: random_password(),
    }
}

/// The operator's passwords a Secret of ours holds, if it holds the first three. The backup
/// user came later: a Secret written before it gets a new password for it, which this pass then
/// writes into both Secrets and every server.
pub fn passwords_in(secret: &Secret) -> Option<OperatorPasswords> {
    Some(OperatorPasswords {
        operator: secret_string(secret, OPERATOR_PASSWORD_KEY)?,
        healthcheck: secret_string(secret, HEALTHCHECK_PASSWORD_KEY)?,
        replication: secret_string(secret, REPLICATION_PASSWORD_KEY)?,
        backup: secret_string(secret, BACKUP_PASSWORD_KEY).unwrap_or_else(random_password),
        sentinel: secret_string(secret, SENTINEL_PASSWORD_KEY).unwrap_or_else(random_password),
    })
}

/// The accepted password hashes the ACL Secret records, by user.
pub fn accepted_in(secret: &Secret) -> BTreeMap<String, Vec<String>> {
    secret_string(secret, ACCEPTED_PASSWORDS_KEY)
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// A Secret's value as text.
pub fn secret_string(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

/// A short, one-way fingerprint of a secret, to notice that it changed without keeping it.
pub fn fingerprint(secret: &str) -> String {
    hex::encode(&Sha256::digest(secret.as_bytes())[..8])
}

/// Whether the operator made `secret` for the cluster of uid `cluster_uid`: its label, and an
/// owner reference to that cluster as controller.
pub fn owned_by(secret: &Secret, cluster_uid: &str) -> bool {
    managed(secret)
        && secret
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == cluster_uid && o.controller == Some(true))
}

/// Whether the operator generated this clients' password Secret for the parent named `parent`
/// (its kind's `label`, e.g. `valkey.io/cluster`, says which): its labels (it has no owner: it
/// outlives a deleted parent of that name).
pub fn generated_for(secret: &Secret, label: &str, parent: &str) -> bool {
    managed(secret)
        && secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .is_some_and(|c| c == parent)
}

fn managed(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY))
        .is_some_and(|m| m == FIELD_MANAGER)
}

fn labels(label: &str, parent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), FIELD_MANAGER.to_owned()),
        (label.to_owned(), parent.to_owned()),
    ])
}

/// Config lines with a secret in them, `include`d from the mounted Secret: how replicas log in
/// to their primary.
pub fn replication_conf(p: &OperatorPasswords) -> String {
    format!(
        "masteruser {REPLICATION_USER}\nmasterauth {}\n",
        p.replication
    )
}

/// Where a parent's Secret lives, who owns it, and the label of its kind (`valkey.io/cluster`,
/// `valkey.io/replication`) that names the parent on it.
#[derive(Debug, Clone)]
pub struct SecretPlace<'a> {
    pub parent: &'a str,
    pub label: &'a str,
    pub namespace: &'a str,
    pub owner: OwnerReference,
}

/// A Secret of the parent's, labelled as the operator's and owned by the parent.
pub fn owned_secret(place: &SecretPlace<'_>, name: String, data: BTreeMap<&str, String>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(place.namespace.to_owned()),
            owner_references: Some(vec![place.owner.clone()]),
            labels: Some(labels(place.label, place.parent)),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The ACL Secret: what the servers load, the operator's passwords, the accepted hashes.
pub fn acl_secret(
    place: &SecretPlace<'_>,
    users: &UserSet,
    p: &OperatorPasswords,
    accepted: &BTreeMap<String, Vec<String>>,
) -> Secret {
    let mut data = BTreeMap::from([
        (ACL_FILE_KEY, users.acl_file()),
        (REPLICATION_CONF_KEY, replication_conf(p)),
        (OPERATOR_PASSWORD_KEY, p.operator.clone()),
        (HEALTHCHECK_PASSWORD_KEY, p.healthcheck.clone()),
        (REPLICATION_PASSWORD_KEY, p.replication.clone()),
        (BACKUP_PASSWORD_KEY, p.backup.clone()),
        (SENTINEL_PASSWORD_KEY, p.sentinel.clone()),
        (
            ACCEPTED_PASSWORDS_KEY,
            serde_json::to_string(accepted).unwrap_or_default(),
        ),
    ]);
    if let Some(file) = users.sentinel_acl_file() {
        data.insert(SENTINEL_ACL_FILE_KEY, file);
    }
    owned_secret(place, acl_secret_name(place.parent), data)
}

/// The operator's own copy of its passwords, and of the clients' password it generated.
pub fn operator_secret(
    place: &SecretPlace<'_>,
    p: &OperatorPasswords,
    generated_client_password: Option<&str>,
) -> Secret {
    let mut data = BTreeMap::from([
        (OPERATOR_PASSWORD_KEY, p.operator.clone()),
        (HEALTHCHECK_PASSWORD_KEY, p.healthcheck.clone()),
        (REPLICATION_PASSWORD_KEY, p.replication.clone()),
        (BACKUP_PASSWORD_KEY, p.backup.clone()),
        (SENTINEL_PASSWORD_KEY, p.sentinel.clone()),
    ]);
    if let Some(password) = generated_client_password {
        data.insert(CLIENT_PASSWORD_COPY_KEY, password.to_owned());
    }
    owned_secret(place, operator_secret_name(place.parent), data)
}

/// The operator's copy of the generated clients' password, in its operator Secret.
pub fn client_password_copy(secret: &Secret) -> Option<String> {
    secret_string(secret, CLIENT_PASSWORD_COPY_KEY)
}

/// The generated clients' password Secret, labelled as the operator's, with no owner.
pub fn generated_password_secret(label: &str, parent: &str, password: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(generated_password_secret_name(parent)),
            labels: Some(labels(label, parent)),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some([(CLIENT_PASSWORD_KEY.to_owned(), password.to_owned())].into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Login;
    use crate::access::users::example_passwords as passwords;
    use crate::parent::labels::CLUSTER_LABEL;

    fn place() -> SecretPlace<'static> {
        SecretPlace {
            parent: "c",
            label: CLUSTER_LABEL,
            namespace: "ns",
            owner: OwnerReference {
                api_version: "valkey.io/v1alpha1".into(),
                kind: "ValkeyCluster".into(),
                name: "c".into(),
                uid: "u".into(),
                controller: Some(true),
                ..Default::default()
            },
        }
    }

    #[test]
    fn secrets_round_trip_and_are_recognised_as_the_operators_own() {
        let users = UserSet::new(Login::NoPassword, &passwords(), []);
        let accepted = BTreeMap::from([("default".to_owned(), vec!["aa".to_owned()])]);
        let acl = acl_secret(&place(), &users, &passwords(), &accepted);
        assert_eq!(passwords_in(&acl), Some(passwords()));
        assert_eq!(accepted_in(&acl), accepted);
        assert!(owned_by(&acl, "u"));
        assert!(
            !owned_by(&acl, "another-uid"),
            "a namesake's Secret is not ours"
        );
        let backup = operator_secret(&place(), &passwords(), Some("clients-pw"));
        assert_eq!(passwords_in(&backup), Some(passwords()));
        assert_eq!(
            client_password_copy(&backup).as_deref(),
            Some("clients-pw"),
            "the operator keeps the generated clients' password too"
        );
        assert_eq!(
            client_password_copy(&operator_secret(&place(), &passwords(), None)),
            None
        );
        assert!(owned_by(&backup, "u"));
        assert_eq!(backup.metadata.name.as_deref(), Some("c-operator"));

        // A Secret someone else made under the same name is not ours, whatever it holds.
        let mut foreign = acl.clone();
        foreign.metadata.labels = None;
        assert!(!owned_by(&foreign, "u"));
        let generated = generated_password_secret(CLUSTER_LABEL, "c", "pw");
        assert!(generated_for(&generated, CLUSTER_LABEL, "c"));
        assert!(!generated_for(&generated, CLUSTER_LABEL, "d"));
        assert!(
            !generated_for(&generated, "valkey.io/replication", "c"),
            "a replication's namesake password is not the cluster's"
        );
        assert!(generated.metadata.owner_references.is_none());
    }

    #[test]
    fn generated_passwords_are_long_and_distinct() {
        let p = generate_passwords();
        assert!(
            p.operator.len() >= 32 && p.operator != p.healthcheck && p.healthcheck != p.replication
        );
    }

    #[test]
    fn pods_mount_only_the_acl_file_and_the_replication_login() {
        assert_eq!(MOUNTED_KEYS, ["users.acl", "replication.conf"]);
        assert!(replication_conf(&passwords()).contains("masteruser replication\n"));
    }
}
