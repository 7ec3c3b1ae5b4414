//! The secrets stage: the Secrets authentication needs, created or brought up to date, and what
//! the member nodes (the ACL Secret to mount) and the engine (the operator's own credentials)
//! take from them. Secret values go no further than these return values: never into a status,
//! an Event or a log line.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::ValkeyCluster;

use super::auth::{self, OperatorPasswords};
use super::context::Context;
use super::desired::NodeAuth;
use super::error::{Error, api_error};
use super::labels::{CLUSTER_LABEL, FIELD_MANAGER};
use super::status::Problem;
use crate::client::Credentials;

/// What authentication gives the rest of the pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// What the member nodes mount and how their pods are annotated.
    pub node: NodeAuth,
    /// Who the engine connects as.
    pub credentials: Credentials,
    /// The Secret holding the clients' password, for the status.
    pub password_secret: Option<String>,
}

/// The Secrets authentication needs, created or brought up to date; then what the nodes and the
/// engine need from them. `Ok(Err(problem))` for a user error (a missing Secret) to report.
pub async fn ensure(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<Result<Auth, Problem>, Error> {
    if !cluster.spec.auth.enabled {
        return Ok(Ok(Auth {
            node: NodeAuth::Open,
            credentials: Credentials::none(),
            password_secret: None,
        }));
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let (password_secret, client_password) = match &cluster.spec.auth.password_secret {
        Some(reference) => {
            let secret = secrets
                .get_opt(&reference.name)
                .await
                .map_err(api_error(format!("reading Secret {}", reference.name)))?;
            let Some(secret) = secret else {
                return Ok(Err(Problem {
                    reason: "PasswordSecretNotFound".into(),
                    message: format!(
                        "Secret {} named by spec.auth.passwordSecret does not exist; create it with key {}.",
                        reference.name, reference.key
                    ),
                }));
            };
            let Some(password) = auth::secret_string(&secret, &reference.key) else {
                return Ok(Err(Problem {
                    reason: "PasswordKeyNotFound".into(),
                    message: format!(
                        "Secret {} has no non-empty key {}.",
                        reference.name, reference.key
                    ),
                }));
            };
            (reference.name.clone(), password)
        }
        None => {
            let secret_name = auth::generated_password_secret_name(&name);
            (
                secret_name.clone(),
                generated_client_password(ctx, &secrets, cluster, &secret_name).await?,
            )
        }
    };

    let acl_name = auth::acl_secret_name(&name);
    let current = secrets
        .get_opt(&acl_name)
        .await
        .map_err(api_error(format!("reading Secret {acl_name}")))?;
    let passwords = current
        .as_ref()
        .and_then(OperatorPasswords::from_secret)
        .unwrap_or_else(OperatorPasswords::generate);
    let owner = cluster
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("the ValkeyCluster has no uid".into()))?;
    let want = auth::acl_secret(&acl_name, &namespace, owner, &client_password, &passwords);
    if current.as_ref().map(|s| &s.data) != Some(&want.data) {
        secrets
            .patch(
                &acl_name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&want),
            )
            .await
            .map_err(api_error(format!("writing Secret {acl_name}")))?;
    }
    let revision = auth::credentials_revision(&want);
    Ok(Ok(Auth {
        node: NodeAuth::Acl {
            secret: acl_name,
            revision,
        },
        credentials: Credentials::user(auth::OPERATOR_USER, passwords.operator),
        password_secret: Some(password_secret),
    }))
}

/// The generated clients' password: created once, never owned (it outlives the cluster, like
/// the data it protects), never overwritten.
async fn generated_client_password(
    ctx: &Context,
    secrets: &Api<Secret>,
    cluster: &ValkeyCluster,
    secret_name: &str,
) -> Result<String, Error> {
    if let Some(existing) = secrets
        .get_opt(secret_name)
        .await
        .map_err(api_error(format!("reading Secret {secret_name}")))?
        && let Some(password) = auth::secret_string(&existing, auth::CLIENT_PASSWORD_KEY)
    {
        return Ok(password);
    }
    let password = auth::random_password();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.to_owned()),
            labels: Some(
                [
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        FIELD_MANAGER.to_owned(),
                    ),
                    (CLUSTER_LABEL.to_owned(), cluster.name_any()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some([(auth::CLIENT_PASSWORD_KEY.to_owned(), password.clone())].into()),
        ..Default::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            ctx.events
                .normal(
                    cluster,
                    "PasswordGenerated",
                    "Create",
                    &format!(
                        "Generated the clients' password in Secret {secret_name} (key {}).",
                        auth::CLIENT_PASSWORD_KEY
                    ),
                )
                .await;
            Ok(password)
        }
        // Someone (a previous pass) created it meanwhile: use theirs.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = secrets
                .get(secret_name)
                .await
                .map_err(api_error(format!("reading Secret {secret_name}")))?;
            auth::secret_string(&existing, auth::CLIENT_PASSWORD_KEY).ok_or_else(|| {
                Error::Invalid(format!(
                    "Secret {secret_name} has no key {}",
                    auth::CLIENT_PASSWORD_KEY
                ))
            })
        }
        Err(e) => Err(api_error(format!("creating Secret {secret_name}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{CLUSTER, cluster, context};
    use http::{Method, StatusCode};

    #[tokio::test]
    async fn a_new_cluster_gets_a_generated_password_and_an_owned_acl_secret() {
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            api.expect(
                Method::GET,
                "/api/v1/namespaces/prod/secrets/cache-password",
            )
            .await
            .not_found();
            let created = api
                .expect(Method::POST, "/api/v1/namespaces/prod/secrets")
                .await;
            assert_eq!(created.body["metadata"]["name"], "cache-password");
            assert_eq!(created.body["metadata"]["labels"][CLUSTER_LABEL], "cache");
            assert!(
                created.body["metadata"]["ownerReferences"].is_null(),
                "the clients' password outlives the cluster"
            );
            let password = created.body["stringData"]["password"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(password.len() >= 32);
            created.echo();
            let event = api.event().await;
            assert_eq!(event["reason"], "PasswordGenerated");
            assert!(!event.to_string().contains(&password), "{event}");
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .not_found();
            let acl = api
                .expect(Method::PATCH, "/api/v1/namespaces/prod/secrets/cache-acl?")
                .await;
            assert!(acl.uri.contains("fieldManager=valkey-cluster-controller"));
            assert!(acl.uri.contains("force=true"));
            assert_eq!(acl.body["metadata"]["ownerReferences"][0]["uid"], "0000-1");
            let keys: Vec<&String> = acl.body["data"]
                .as_object()
                .map(|d| d.keys().collect())
                .unwrap_or_default();
            assert!(keys.iter().any(|k| *k == auth::ACL_FILE_KEY), "{keys:?}");
            acl.echo();
            api.done().await;
        });
        let auth = ensure(&ctx, &cluster(CLUSTER))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&auth.node, NodeAuth::Acl { secret, .. } if secret == "cache-acl"));
        assert_eq!(
            auth.credentials.username.as_deref(),
            Some(auth::OPERATOR_USER)
        );
        assert_eq!(auth.password_secret.as_deref(), Some("cache-password"));
    }

    #[tokio::test]
    async fn a_named_password_secret_that_is_missing_is_a_problem_not_an_error() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  auth: {{passwordSecret: {{name: mine, key: pw}}}}\n");
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/mine")
                .await
                .not_found();
            api.done().await;
        });
        let problem = ensure(&ctx, &cluster(&yaml))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .err()
            .unwrap_or_else(|| panic!("no problem"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(problem.reason, "PasswordSecretNotFound");
        assert!(problem.message.contains("mine") && problem.message.contains("pw"));
    }

    #[tokio::test]
    async fn an_api_failure_is_an_error_naming_the_secret() {
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-password")
                .await
                .answer(
                    StatusCode::FORBIDDEN,
                    &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403, "message": "forbidden"}),
                );
        });
        let error = ensure(&ctx, &cluster(CLUSTER))
            .await
            .err()
            .unwrap_or_else(|| panic!("no error"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            error.to_string().contains("Secret cache-password"),
            "{error}"
        );
    }
}
