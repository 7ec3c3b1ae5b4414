//! The object store a ValkeyBackup names, opened with the credentials (and CA) of the Secrets it
//! names in its own namespace. No value of those Secrets goes into a log, status or Event.

use std::time::Duration;
use valkey_api::v1alpha1::StatusReason;

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
                reason: StatusReason::StoreCredentialsMissing,
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
                    reason: StatusReason::StoreCredentialsInvalid,
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
            reason: StatusReason::SessionTokenNotSupported,
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
                        reason: StatusReason::StoreCaMissing,
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
            reason: StatusReason::StoreInvalid,
            message: format!("The store cannot be used as spec.store says: {e}."),
        })
    })
}

/// A store's failure in a person's words (the store's own error names the bucket and request,
/// never the credentials).
pub fn unreachable(error: &backup::StoreError) -> Problem {
    Problem {
        reason: StatusReason::StoreUnreachable,
        message: format!(
            "The object store failed: {error}. Check spec.store (endpoint, bucket, credentials) and that the store is up; create a new ValkeyBackup to try again."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use plumbing::testing::mock_client;
    use serde_json::json;

    const SECRETS: &str = "/api/v1/namespaces/prod/secrets";

    fn spec() -> BackupStore {
        serde_json::from_value(json!({"s3": {
            "endpoint": "http://127.0.0.1:1",
            "bucket": "backups",
            "credentials": {"secretName": "store"},
        }}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The Secret `store` with `data` (encoded as the API sends it).
    fn secret(data: &[(&str, &str)]) -> serde_json::Value {
        let mut values = serde_json::Map::new();
        for (key, value) in data {
            let encoded = k8s_openapi::ByteString(value.as_bytes().to_vec());
            values.insert(
                (*key).to_owned(),
                serde_json::to_value(encoded).unwrap_or_default(),
            );
        }
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "store", "namespace": "prod"}, "data": values})
    }

    fn problem(opened: Result<backup::Store, Unopened>) -> Problem {
        match opened {
            Err(Unopened::Problem(problem)) => problem,
            Err(Unopened::Api(e)) => panic!("API error: {e}"),
            Ok(_) => panic!("opened"),
        }
    }

    #[tokio::test]
    async fn a_missing_credentials_secret_says_which_and_with_what() {
        let (client, mut api) = mock_client();
        let script = tokio::spawn(async move {
            api.expect(Method::GET, &format!("{SECRETS}/store"))
                .await
                .not_found();
        });
        let found = problem(open(&client, "prod", &spec()).await);
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found.reason.as_str(), "StoreCredentialsMissing");
        for words in [
            "Secret store",
            "namespace prod",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(found.message.contains(words), "{words}: {}", found.message);
        }
    }

    #[tokio::test]
    async fn a_key_missing_from_the_secret_is_named_and_no_value_is_shown() {
        let (client, mut api) = mock_client();
        let script = tokio::spawn(async move {
            let answer = secret(&[("AWS_ACCESS_KEY_ID", "AKIDVISIBLE")]);
            api.expect(Method::GET, &format!("{SECRETS}/store"))
                .await
                .answer(StatusCode::OK, &answer);
        });
        let found = problem(open(&client, "prod", &spec()).await);
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found.reason.as_str(), "StoreCredentialsInvalid");
        assert!(
            found.message.contains("AWS_SECRET_ACCESS_KEY"),
            "{}",
            found.message
        );
        assert!(!found.message.contains("AKIDVISIBLE"), "{}", found.message);
    }

    #[tokio::test]
    async fn a_whole_secret_opens_the_store() {
        let (client, mut api) = mock_client();
        let script = tokio::spawn(async move {
            let answer = secret(&[
                ("AWS_ACCESS_KEY_ID", "id"),
                ("AWS_SECRET_ACCESS_KEY", "very-secret"),
            ]);
            api.expect(Method::GET, &format!("{SECRETS}/store"))
                .await
                .answer(StatusCode::OK, &answer);
        });
        let opened = open(&client, "prod", &spec()).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
        let store = opened.unwrap_or_else(|_| panic!("not opened"));
        assert_eq!(store.bucket(), "backups");
        assert!(!format!("{store:?}").contains("very-secret"));
    }
}
