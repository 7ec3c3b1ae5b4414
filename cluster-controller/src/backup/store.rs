//! The object store a ValkeyBackup names, opened with the credentials (and CA) of the Secrets it
//! names in its own namespace. No value of those Secrets goes into a log, status or Event.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use valkey_api::v1alpha1::BackupStore;

use crate::parent::conditions::Problem;

/// How long one store request may retry before its error is the backup's: long enough for a
/// store that restarts, short enough that a store that is down fails the backup in minutes.
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a store could not be opened.
pub enum Unopened {
    /// The spec or its Secrets are wrong: a person must act.
    Problem(Problem),
    /// The API failed: retry.
    Api(kube::Error),
}

/// The store of `spec`, with the Secrets of `namespace` it names.
pub async fn open(
    client: &kube::Client,
    namespace: &str,
    spec: &BackupStore,
) -> Result<backup::Store, Unopened> {
    let s3 = &spec.s3;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let credentials = &s3.credentials;
    let secret = secrets
        .get_opt(&credentials.secret_name)
        .await
        .map_err(Unopened::Api)?
        .ok_or_else(|| {
            Unopened::Problem(Problem {
                reason: "StoreCredentialsMissing".into(),
                message: format!(
                    "Secret {} (store.s3.credentials.secretName) is not in namespace {namespace}: create it with the store's access key under {} and {}.",
                    credentials.secret_name,
                    credentials.access_key_id_key,
                    credentials.secret_access_key_key
                ),
            })
        })?;
    let value = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Unopened::Problem(Problem {
                    reason: "StoreCredentialsInvalid".into(),
                    message: format!(
                        "Secret {} has no value under {key} (store.s3.credentials): add it.",
                        credentials.secret_name
                    ),
                })
            })
    };
    let access_key_id = value(&credentials.access_key_id_key)?;
    let secret_access_key = value(&credentials.secret_access_key_key)?;
    if credentials.session_token_key.is_some() {
        return Err(Unopened::Problem(Problem {
            reason: "SessionTokenNotSupported".into(),
            message: "store.s3.credentials.sessionTokenKey: temporary credentials are not supported yet; use an access key without a session token.".into(),
        }));
    }
    let ca_bundle = match &s3.ca_bundle {
        None => None,
        Some(reference) => {
            let ca = secrets
                .get_opt(&reference.secret_name)
                .await
                .map_err(Unopened::Api)?
                .and_then(|s| s.data?.remove(&reference.key))
                .ok_or_else(|| {
                    Unopened::Problem(Problem {
                        reason: "StoreCaMissing".into(),
                        message: format!(
                            "Secret {} with key {} (store.s3.caBundle) is not in namespace {namespace}: create it with the store's CA certificates (PEM).",
                            reference.secret_name, reference.key
                        ),
                    })
                })?;
            Some(ca.0)
        }
    };
    let config = backup::StoreConfig {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        prefix: s3.prefix.clone().unwrap_or_default(),
        region: s3.region.clone(),
        path_style: s3.path_style,
        ca_bundle,
        access_key_id,
        secret_access_key,
        retry_timeout: RETRY_TIMEOUT,
        request_timeout: REQUEST_TIMEOUT,
    };
    backup::Store::new(&config).map_err(|e| {
        Unopened::Problem(Problem {
            reason: "StoreInvalid".into(),
            message: format!("The store cannot be used as spec.store says: {e}."),
        })
    })
}

/// A store's failure in a person's words (the store's own error names the bucket and request,
/// never the credentials).
pub fn unreachable(error: &backup::StoreError) -> Problem {
    Problem {
        reason: "StoreUnreachable".into(),
        message: format!(
            "The object store failed: {error}. Check spec.store (endpoint, bucket, credentials) and that the store is up; create a new ValkeyBackup to try again."
        ),
    }
}
