//! Authentication: the clients' password and the operator's own users.
//!
//! Four Valkey users, in an ACL file kept in the Secret `<cluster>-acl` and mounted into every pod
//! (never in a ConfigMap, a status, an event or a log):
//! - `default`, for clients, with the password of `spec.auth.passwordSecret` (or the generated
//!   `<cluster>-password`);
//! - `operator`, for the cluster-controller's commands: cluster management, INFO and MIGRATE;
//! - `healthcheck`, for probes and the node-controller: PING, INFO and CONFIG GET/SET (the
//!   node-controller sets live settings with it);
//! - `replication`, for replicas syncing from their primary and for Valkey 9's slot migration
//!   between primaries (which replays the moved keys' commands as this user).
//!
//! Passwords are stored hashed in the ACL file; the generated ones also in plain text in the
//! Secret, for the controllers that connect with them.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::distr::{Alphanumeric, SampleString};
use sha2::{Digest, Sha256};

pub use valkey_api::contract::CREDENTIALS_DIR;
pub const ACL_FILE_KEY: &str = "users.acl";
pub const REPLICATION_CONF_KEY: &str = "replication.conf";
pub const OPERATOR_PASSWORD_KEY: &str = "operator-password";
pub const HEALTHCHECK_PASSWORD_KEY: &str = "healthcheck-password";
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";
pub const OPERATOR_USER: &str = "operator";
pub const HEALTHCHECK_USER: &str = "healthcheck";
pub const REPLICATION_USER: &str = "replication";
/// Key of the generated clients' password Secret.
pub const CLIENT_PASSWORD_KEY: &str = "password";

/// What each operator user may do. Least privilege: the operator manages the cluster and moves
/// keys but cannot run arbitrary data commands; health checks can only PING, read INFO and get or set settings.
// ACL GETUSER/SETUSER: to see and lift the replication user's fence (see below).
const OPERATOR_RULES: &str = "~* &* -@all +@connection +ping +info +dbsize +cluster +migrate +restore-asking +asking +readonly +config|get +acl|getuser +acl|setuser";
// CONFIG GET/SET: the node-controller sets the settings Valkey changes at runtime on the running
// server (the ValkeyNode contract's live config), so a change of them restarts no pod.
const HEALTHCHECK_RULES: &str = "resetchannels -@all +ping +info +config|get +config|set";
// Valkey 9's atomic slot migration authenticates between primaries as the replication user, and
// the importing primary runs the exported keys' commands (SELECT, RESTORE, any write) under that
// user, so it needs every data command; it still cannot log in without the generated password.
const REPLICATION_RULES: &str = "~* &* +@all";
const CLIENT_RULES: &str = "~* &* +@all";

pub fn acl_secret_name(cluster: &str) -> String {
    format!("{cluster}-acl")
}

pub fn generated_password_secret_name(cluster: &str) -> String {
    format!("{cluster}-password")
}

/// The operator's own passwords, generated once and kept in the ACL Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorPasswords {
    pub operator: String,
    pub healthcheck: String,
    pub replication: String,
}

impl std::fmt::Debug for OperatorPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorPasswords(***)")
    }
}

impl OperatorPasswords {
    pub fn generate() -> Self {
        Self {
            operator: random_password(),
            healthcheck: random_password(),
            replication: random_password(),
        }
    }

    /// The passwords an existing ACL Secret holds, if it holds all three.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        Some(Self {
            operator: secret_string(secret, OPERATOR_PASSWORD_KEY)?,
            healthcheck: secret_string(secret, HEALTHCHECK_PASSWORD_KEY)?,
            replication: secret_string(secret, REPLICATION_PASSWORD_KEY)?,
        })
    }
}

pub fn random_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), 32)
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

fn hashed(password: &str) -> String {
    hex::encode(Sha256::digest(password.as_bytes()))
}

/// The ACL file every server loads (`aclfile`).
pub fn acl_file(client_password: &str, p: &OperatorPasswords) -> String {
    [
        format!(
            "user default on #{} {CLIENT_RULES}",
            hashed(client_password)
        ),
        format!(
            "user {OPERATOR_USER} on #{} {OPERATOR_RULES}",
            hashed(&p.operator)
        ),
        format!(
            "user {HEALTHCHECK_USER} on #{} {HEALTHCHECK_RULES}",
            hashed(&p.healthcheck)
        ),
        format!(
            // Off on every start: the engine enables it once the node is settled in the cluster,
            // so a node that restarts empty at its old address cannot wipe the replicas that
            // find it there (see the engine's fencing rule).
            "user {REPLICATION_USER} off #{} {REPLICATION_RULES}",
            hashed(&p.replication)
        ),
    ]
    .join("\n")
        + "\n"
}

/// Config lines with a secret in them, `include`d from the mounted Secret: how replicas log in
/// to their primary.
pub fn replication_conf(p: &OperatorPasswords) -> String {
    format!(
        "masteruser {REPLICATION_USER}\nmasterauth {}\n",
        p.replication
    )
}

/// The ACL Secret, owned by the ValkeyCluster.
pub fn acl_secret(
    name: &str,
    namespace: &str,
    owner: OwnerReference,
    client_password: &str,
    p: &OperatorPasswords,
) -> Secret {
    let data = BTreeMap::from([
        (ACL_FILE_KEY.to_owned(), acl_file(client_password, p)),
        (REPLICATION_CONF_KEY.to_owned(), replication_conf(p)),
        (OPERATOR_PASSWORD_KEY.to_owned(), p.operator.clone()),
        (HEALTHCHECK_PASSWORD_KEY.to_owned(), p.healthcheck.clone()),
        (REPLICATION_PASSWORD_KEY.to_owned(), p.replication.clone()),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            owner_references: Some(vec![owner]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                super::labels::FIELD_MANAGER.to_owned(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A short fingerprint of what the pods load from the ACL Secret: when it changes, the pods must
/// restart to load it, so it goes into their annotations (and so into the node's revision).
pub fn credentials_revision(secret: &Secret) -> String {
    let mut hasher = Sha256::new();
    for key in [ACL_FILE_KEY, REPLICATION_CONF_KEY] {
        hasher.update(secret_string(secret, key).unwrap_or_default().as_bytes());
        hasher.update([0]);
    }
    hex::encode(&hasher.finalize()[..5])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passwords() -> OperatorPasswords {
        OperatorPasswords {
            operator: "op-pw".into(),
            healthcheck: "hc-pw".into(),
            replication: "rep-pw".into(),
        }
    }

    #[test]
    fn the_acl_file_holds_hashes_not_passwords() {
        let file = acl_file("client-pw", &passwords());
        assert_eq!(file.lines().count(), 4);
        for secret in ["client-pw", "op-pw", "hc-pw", "rep-pw"] {
            assert!(!file.contains(secret), "{secret} in {file}");
            assert!(file.contains(&hashed(secret)));
        }
        assert!(
            file.lines()
                .next()
                .is_some_and(|l| l.starts_with("user default on #"))
        );
    }

    #[test]
    fn health_checks_may_only_ping_and_read_info() {
        let file = acl_file("c", &passwords());
        let line = file
            .lines()
            .find(|l| l.starts_with("user healthcheck"))
            .unwrap_or_default();
        assert!(
            line.ends_with("-@all +ping +info +config|get +config|set"),
            "{line}"
        );
        assert!(!line.contains('~'), "no key access: {line}");
    }

    #[test]
    fn secrets_round_trip_and_change_the_revision_only_when_they_change() {
        let owner = OwnerReference {
            api_version: "valkey.io/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "c".into(),
            uid: "u".into(),
            ..Default::default()
        };
        let s1 = acl_secret("c-acl", "ns", owner.clone(), "client", &passwords());
        assert_eq!(OperatorPasswords::from_secret(&s1), Some(passwords()));
        let s2 = acl_secret("c-acl", "ns", owner.clone(), "client", &passwords());
        assert_eq!(credentials_revision(&s1), credentials_revision(&s2));
        let s3 = acl_secret("c-acl", "ns", owner, "new-client", &passwords());
        assert_ne!(credentials_revision(&s1), credentials_revision(&s3));
        assert!(!format!("{:?}", passwords()).contains("op-pw"));
    }

    #[test]
    fn generated_passwords_are_long_and_distinct() {
        let p = OperatorPasswords::generate();
        assert!(
            p.operator.len() >= 32 && p.operator != p.healthcheck && p.healthcheck != p.replication
        );
    }
}
