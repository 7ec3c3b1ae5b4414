//! The secrets stage: the credentials Secret a node names, read for the node-controller's own
//! PING, and the CA of its TLS Secret, to verify the server with. The credentials' values never
//! leave this module except as the `Credentials` whose Debug hides the password; of the TLS
//! Secret only the CA (no secret) is read.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use plumbing::valkey_tls::Trust;
use valkey_api::contract::TLS_CA_KEY;
use valkey_api::v1alpha1::ValkeyNode;

use super::error::Error;
use crate::probe::Credentials;
use crate::status::CredentialsState;

/// The credentials Secret, read for the node-controller's own PING. Its values never leave this
/// function except as the `Credentials` whose Debug hides the password.
pub async fn read(
    node: &ValkeyNode,
    client: &Client,
) -> Result<(Option<CredentialsState>, Option<Credentials>), Error> {
    let Some(spec) = &node.spec.credentials else {
        return Ok((None, None));
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &node.namespace().unwrap_or_default());
    let secret = api
        .get_opt(&spec.secret_name)
        .await
        .map_err(|source| Error::Secret {
            name: spec.secret_name.clone(),
            source,
        })?;
    let Some(secret) = secret else {
        return Ok((
            Some(CredentialsState::SecretMissing {
                secret: spec.secret_name.clone(),
            }),
            None,
        ));
    };
    let password = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&spec.password_key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok());
    Ok(match password {
        Some(password) => (
            Some(CredentialsState::Found),
            Some(Credentials {
                username: spec.username.clone(),
                password,
            }),
        ),
        None => (
            Some(CredentialsState::KeyMissing {
                secret: spec.secret_name.clone(),
                key: spec.password_key.clone(),
            }),
            None,
        ),
    })
}

/// The CA of the TLS Secret a node names: `None` for a plain node, `Some(Err(why))` when the
/// Secret or its `ca.crt` is missing (the pod cannot start without it either).
pub async fn read_trust(
    node: &ValkeyNode,
    client: &Client,
) -> Result<Option<Result<Trust, String>>, Error> {
    let Some(tls) = &node.spec.tls else {
        return Ok(None);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &node.namespace().unwrap_or_default());
    let secret = api
        .get_opt(&tls.secret_name)
        .await
        .map_err(|source| Error::Secret {
            name: tls.secret_name.clone(),
            source,
        })?;
    let ca = secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(TLS_CA_KEY))
        .filter(|v| !v.0.is_empty());
    Ok(Some(match (&secret, ca) {
        (None, _) => Err(format!(
            "the TLS Secret {} of spec.tls does not exist",
            tls.secret_name
        )),
        (Some(_), None) => Err(format!(
            "the TLS Secret {} has no {TLS_CA_KEY} to verify the server with",
            tls.secret_name
        )),
        (Some(_), Some(ca)) => Ok(Trust::from_pem(ca.0.clone())),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{NODE, node};
    use http::Method;

    #[tokio::test]
    async fn a_missing_secret_or_key_is_a_state_to_report_and_a_found_one_gives_credentials() {
        let yaml = format!(
            "{NODE}  credentials: {{secretName: cache-acl, username: healthcheck, passwordKey: healthcheck-password}}\n"
        );
        let with_credentials = node(&yaml);
        let (client, mut api) = plumbing::testing::mock_client();
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .not_found();
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .answer(
                    http::StatusCode::OK,
                    &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cache-acl"}, "data": {"other": "eA=="}}),
                );
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .answer(
                    http::StatusCode::OK,
                    // "s3cret", base64
                    &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cache-acl"}, "data": {"healthcheck-password": "czNjcmV0"}}),
                );
            api.done().await;
        });
        let missing = read(&with_credentials, &client)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            missing,
            (Some(CredentialsState::SecretMissing { .. }), None)
        ));
        let no_key = read(&with_credentials, &client)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            no_key,
            (Some(CredentialsState::KeyMissing { .. }), None)
        ));
        let found = read(&with_credentials, &client)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(found.0, Some(CredentialsState::Found)));
        let credentials = found.1.unwrap_or_else(|| panic!("no credentials"));
        assert_eq!(
            (credentials.username.as_str(), credentials.password.as_str()),
            ("healthcheck", "s3cret")
        );

        // A node without credentials reads nothing.
        let (client, api) = plumbing::testing::mock_client();
        assert!(matches!(read(&node(NODE), &client).await, Ok((None, None))));
        api.done().await;
    }
}
