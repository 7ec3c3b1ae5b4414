//! The secrets stage: the Secrets authentication needs, created or brought up to date, and what
//! the member nodes (the ACL Secret to mount), the access stage (every user and its logins) and
//! the engine (the operator's own credentials) take from them. Secret values go no further than
//! these return values: never into a status, an Event or a log line.
//!
//! The operator's users have passwords whether or not `spec.auth.enabled` is set: it only
//! decides whether the clients' default user needs one. So replication stays fenced, and no
//! client can act as the operator, in an open cluster too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use valkey_api::v1alpha1::StatusReason;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use plumbing::events::EventPublisher;
use valkey_api::v1alpha1::SecretKeyRef;

use super::auth::{self, SecretPlace};
use super::conditions::Problem;
use super::context::ParentMemory;
use super::error::{Error, api_error};
use super::labels::FIELD_MANAGER;
use super::node::NodeAuth;
use super::secret_cache::SecretCache;
use crate::access::rights::DEFAULT_USER;
use crate::access::{AclUser, Login, UserSet, password_hash, rotation};
use crate::client::{self, Credentials};

/// The reason a cluster reports a Secret of its names that the operator did not create.
pub const SECRET_NOT_OWNED: StatusReason = StatusReason::SecretNotOwned;

/// What authentication gives the rest of the pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// What the member nodes mount.
    pub node: NodeAuth,
    /// Who the engine and the access stage connect as.
    pub credentials: Credentials,
    /// Every user the servers should hold.
    pub users: UserSet,
    /// Logins to try on a server that refuses the operator's user: the clients' default user,
    /// with each password it may have, then with none.
    pub bootstrap: Vec<Credentials>,
    /// The replication user's password, for servers brought in through the bootstrap.
    pub replication_password: client::Secret,
    /// The `sentinel` user's password, which the Sentinels are told to log in with.
    pub sentinel_password: client::Secret,
    /// The Secret holding the clients' password, for the status.
    pub password_secret: Option<String>,
}

/// The object whose Secrets these are (a ValkeyCluster, a ValkeyReplication), as this stage
/// needs it: the object (for owner references and Events), its kind's label on its Secrets, its
/// `spec.auth`, and what its status says now (so a problem is announced once).
pub struct Parent<'a, K> {
    pub object: &'a K,
    pub label: &'static str,
    pub auth: &'a valkey_api::v1alpha1::Auth,
    /// The clients' users start off on every server until the engine admits it (servers that
    /// keep no data: see [`UserSet::with_clients_fenced`]).
    pub fence_clients: bool,
    /// Sentinel watches the servers (a replication's `spec.sentinel`): they hold the `sentinel`
    /// user, and the ACL Secret the Sentinels' own ACL file.
    pub sentinel: bool,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
}

/// What the stage uses of a controller: the API, Events, and how long a rotated password stays.
pub struct Tools<'a> {
    pub client: &'a kube::Client,
    /// Where the Secrets are read from (a watch, not a GET each pass).
    pub secrets: &'a SecretCache,
    pub events: &'a EventPublisher,
    pub rotation_grace: Duration,
}

/// The Secrets authentication needs, created or brought up to date; then what the nodes, the
/// access stage and the engine need from them. `Ok(Err(problem))` for what a person must fix (a
/// missing Secret, a Secret of the operator's names that it did not create).
pub async fn ensure_for<K>(
    ctx: &Tools<'_>,
    parent: &Parent<'_, K>,
    memory: &ParentMemory,
) -> Result<Result<Auth, Problem>, Error>
where
    K: Resource<DynamicType = ()>,
{
    let cluster = parent.object;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);

    // The operator's own Secrets first: only its own are read or written, and they hold its
    // copies of what a deleted Secret would otherwise take with it.
    let acl_name = auth::acl_secret_name(&name);
    let operator_name = auth::operator_secret_name(&name);
    let current = match read_own(
        ctx,
        parent,
        &[&acl_name, &operator_name],
        "it will not overwrite or use a Secret it did not create; delete or rename it, and the operator creates its own",
    )
    .await?
    {
        Ok(current) => current,
        Err(problem) => return Ok(Err(problem)),
    };
    let acl = current.get(&acl_name).map(AsRef::as_ref);
    // Any copy will do, newest knowledge first; a cluster with none gets new ones.
    let passwords = acl
        .and_then(auth::passwords_in)
        .or_else(|| {
            current
                .get(&operator_name)
                .and_then(|s| auth::passwords_in(s))
        })
        .or_else(|| memory.passwords())
        .unwrap_or_else(auth::generate_passwords);
    memory.remember_passwords(&passwords);
    // Which passwords each client user's servers accept now.
    let stored = acl.map(auth::accepted_in).unwrap_or_default();

    // The clients' passwords: the default user's (when authentication is on) and each named
    // user's, from the Secrets the spec names.
    let auth_spec = parent.auth;
    let mut generated = None;
    let (default_password, password_secret) = if auth_spec.enabled {
        let found = match &auth_spec.password_secret {
            Some(reference) => {
                read_password(ctx, &namespace, reference, "spec.auth.passwordSecret").await?
            }
            None => {
                let kept = current
                    .get(&operator_name)
                    .and_then(|s| auth::client_password_copy(s))
                    .or_else(|| memory.client_password());
                let served = stored.get(DEFAULT_USER).is_some_and(|h| !h.is_empty());
                let found = generated_client_password(ctx, &secrets, parent, kept, served).await?;
                if let Ok(password) = &found {
                    memory.remember_client_password(password);
                    generated = Some(password.clone());
                }
                found
            }
        };
        match found {
            Ok(password) => (Some(password), Some(secret_of(auth_spec, &name))),
            Err(problem) => return Ok(Err(problem)),
        }
    } else {
        (None, None)
    };
    let mut named = Vec::new();
    for (i, user) in auth_spec.users.iter().flatten().enumerate() {
        let field = format!("spec.auth.users[{i}].passwordSecret ({})", user.name);
        match read_password(ctx, &namespace, &user.password_secret, &field).await? {
            Ok(password) => named.push((user, password)),
            Err(problem) => return Ok(Err(problem)),
        }
    }

    // A new password is added beside the old, which retires once every server has held both for
    // the grace period.
    let everywhere_since = acl
        .and_then(|s| auth::secret_string(s, auth::ACL_FILE_KEY))
        .and_then(|file| memory.access.everywhere_since_file(&file));
    let now = Instant::now();
    let mut accepted = BTreeMap::new();
    let mut accept = |user: &str, password: &str| {
        let hashes = rotation::accepted(
            stored.get(user).map(Vec::as_slice).unwrap_or_default(),
            &password_hash(password),
            everywhere_since,
            now,
            ctx.rotation_grace,
        );
        accepted.insert(user.to_owned(), hashes.clone());
        Login::Hashes(hashes)
    };
    let default_login = match &default_password {
        Some(password) => accept(DEFAULT_USER, password),
        None => Login::NoPassword,
    };
    let named_users: Vec<AclUser> = named
        .iter()
        .map(|(user, password)| {
            AclUser::client(&user.name, accept(&user.name, password), &user.rules)
        })
        .collect();
    let users = UserSet::new(default_login, &passwords, named_users);
    let users = if parent.fence_clients {
        users.with_clients_fenced()
    } else {
        users
    };
    let users = if parent.sentinel {
        users.with_sentinel(&passwords)
    } else {
        users
    };

    let owner = cluster
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid(format!("the {} has no uid", K::kind(&()))))?;
    let place = SecretPlace {
        parent: &name,
        label: parent.label,
        namespace: &namespace,
        owner,
    };
    for want in [
        auth::acl_secret(&place, &users, &passwords, &accepted),
        auth::operator_secret(&place, &passwords, generated.as_deref()),
    ] {
        let secret_name = want.name_any();
        if !holds(current.get(&secret_name).map(AsRef::as_ref), &want) {
            let written = secrets
                .patch(
                    &secret_name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&want),
                )
                .await
                .map_err(api_error(format!("writing Secret {secret_name}")))?;
            ctx.secrets.written(written).await;
        }
    }

    // A server started before the operator kept its own users knows only the default user.
    let mut bootstrap: Vec<Credentials> = default_password
        .iter()
        .map(|p| Credentials {
            username: None,
            password: Some(p.clone().into()),
        })
        .collect();
    bootstrap.push(Credentials::none());
    Ok(Ok(Auth {
        node: NodeAuth {
            secret: acl_name,
            tls: None,
        },
        credentials: Credentials::user(auth::OPERATOR_USER, passwords.operator.clone()),
        users,
        bootstrap,
        replication_password: passwords.replication.clone().into(),
        sentinel_password: passwords.sentinel.clone().into(),
        password_secret,
    }))
}

/// Whether `current` holds every key of `want` with its value: other keys (the TLS stage keeps
/// its CA's copy in the operator Secret, under a field manager of its own) are not this stage's.
fn holds(current: Option<&Secret>, want: &Secret) -> bool {
    let (Some(current), Some(wanted)) = (current.and_then(|s| s.data.as_ref()), &want.data) else {
        return false;
    };
    wanted.iter().all(|(k, v)| current.get(k) == Some(v))
}

/// The name of the Secret holding the default user's password.
fn secret_of(auth: &valkey_api::v1alpha1::Auth, cluster: &str) -> String {
    auth.password_secret
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_else(|| auth::generated_password_secret_name(cluster))
}

/// A password from a Secret the user names; `Ok(Err(problem))` when it is missing or empty.
async fn read_password(
    tools: &Tools<'_>,
    namespace: &str,
    reference: &SecretKeyRef,
    field: &str,
) -> Result<Result<String, Problem>, Error> {
    let secret = tools
        .secrets
        .get(namespace, &reference.name)
        .await
        .map_err(api_error(format!("reading Secret {}", reference.name)))?;
    let Some(secret) = secret else {
        return Ok(Err(Problem {
            reason: StatusReason::PasswordSecretNotFound,
            message: format!(
                "Secret {} named by {field} does not exist; create it with key {}.",
                reference.name, reference.key
            ),
        }));
    };
    Ok(
        auth::secret_string(&secret, &reference.key).ok_or_else(|| Problem {
            reason: StatusReason::PasswordKeyNotFound,
            message: format!(
                "Secret {} named by {field} has no non-empty key {}.",
                reference.name, reference.key
            ),
        }),
    )
}

/// A Secret of the operator's names that the operator did not create: reported (a Warning Event
/// when the parent first says so), never touched.
/// The operator's own Secrets of `parent` among `names`, by name (a missing one is left out).
/// One of those names held by a Secret the operator did not create stops the stage with a
/// problem that says `consequence`: the operator neither overwrites nor uses it.
pub async fn read_own<K: Resource<DynamicType = ()>>(
    tools: &Tools<'_>,
    parent: &Parent<'_, K>,
    names: &[&String],
    consequence: &str,
) -> Result<Result<BTreeMap<String, Arc<Secret>>, Problem>, Error> {
    let uid = parent.object.meta().uid.clone().unwrap_or_default();
    let namespace = parent.object.namespace().unwrap_or_default();
    let mut current = BTreeMap::new();
    for &secret_name in names {
        let found = tools
            .secrets
            .get(&namespace, secret_name)
            .await
            .map_err(api_error(format!("reading Secret {secret_name}")))?;
        if let Some(secret) = found {
            if !auth::owned_by(&secret, &uid) {
                return Ok(Err(not_owned(tools, parent, secret_name, consequence).await));
            }
            current.insert(secret_name.clone(), secret);
        }
    }
    Ok(Ok(current))
}

pub async fn not_owned<K: Resource<DynamicType = ()>>(
    ctx: &Tools<'_>,
    parent: &Parent<'_, K>,
    secret: &str,
    consequence: &str,
) -> Problem {
    let message = format!(
        "Secret {secret} exists but was not created by the operator for this {}: {consequence}.",
        K::kind(&())
    );
    let already = parent.reason == Some(SECRET_NOT_OWNED.as_str())
        && parent.message == Some(message.as_str());
    if !already {
        ctx.events
            .warning(
                parent.object,
                SECRET_NOT_OWNED.as_str(),
                "Reconcile",
                &message,
            )
            .await;
    }
    Problem {
        reason: SECRET_NOT_OWNED,
        message,
    }
}

/// The reason a parent reports while its generated password Secret is gone with no copy left.
pub const PASSWORD_SECRET_LOST: StatusReason = StatusReason::PasswordSecretLost;

/// The generated clients' password: created once, never owned (it outlives the cluster, like
/// the data it protects), never overwritten, and never taken from a Secret of that name that the
/// operator did not generate.
///
/// A deleted Secret is an accident far more often than a wish to rotate: it comes back with the
/// password the operator `kept` (its copy in the operator Secret, or its memory), so no client
/// that holds the password is locked out. With no copy left while the servers `served` a
/// password, nothing new is generated (that would lock every client out, too): the parent says
/// so, and the servers keep the password they have until a person decides.
async fn generated_client_password<K: Resource<DynamicType = ()>>(
    ctx: &Tools<'_>,
    secrets: &Api<Secret>,
    parent: &Parent<'_, K>,
    kept: Option<String>,
    served: bool,
) -> Result<Result<String, Problem>, Error> {
    let name = parent.object.name_any();
    let secret_name = auth::generated_password_secret_name(&name);
    let namespace = parent.object.namespace().unwrap_or_default();
    let existing = ctx
        .secrets
        .get(&namespace, &secret_name)
        .await
        .map_err(api_error(format!("reading Secret {secret_name}")))?;
    let foreign = || {
        not_owned(
            ctx,
            parent,
            &secret_name,
            "it will not use a password it did not generate; name it in spec.auth.passwordSecret to use it, or delete it",
        )
    };
    if let Some(existing) = existing {
        if !auth::generated_for(&existing, parent.label, &name) {
            return Ok(Err(foreign().await));
        }
        if let Some(password) = auth::secret_string(&existing, auth::CLIENT_PASSWORD_KEY) {
            return Ok(Ok(password));
        }
        return Err(Error::Invalid(format!(
            "Secret {secret_name} has no key {}",
            auth::CLIENT_PASSWORD_KEY
        )));
    }
    let restored = kept.is_some();
    let password = match kept {
        Some(password) => password,
        None if served => {
            return Ok(Err(Problem {
                reason: PASSWORD_SECRET_LOST,
                message: format!(
                    "Secret {secret_name}, which held the clients' password, was deleted and the \
                     operator has no copy of it; the servers keep accepting the password they \
                     have. Create {secret_name} again with that password (key {}), or name a \
                     Secret of yours in spec.auth.passwordSecret to change it.",
                    auth::CLIENT_PASSWORD_KEY
                ),
            }));
        }
        None => auth::random_password(),
    };
    let secret = auth::generated_password_secret(parent.label, &name, &password);
    let created = secrets.create(&PostParams::default(), &secret).await;
    if let Ok(created) = &created {
        ctx.secrets.written(created.clone()).await;
    }
    match created {
        Ok(_) if restored => {
            ctx.events
                .warning(
                    parent.object,
                    "PasswordSecretRestored",
                    "Create",
                    &format!(
                        "Secret {secret_name} was deleted; it is created again with the same \
                         clients' password (key {}), which every server still accepts. To change \
                         the password, name a Secret of yours in spec.auth.passwordSecret.",
                        auth::CLIENT_PASSWORD_KEY
                    ),
                )
                .await;
            Ok(Ok(password))
        }
        Ok(_) => {
            ctx.events
                .normal(
                    parent.object,
                    "PasswordGenerated",
                    "Create",
                    &format!(
                        "Generated the clients' password in Secret {secret_name} (key {}).",
                        auth::CLIENT_PASSWORD_KEY
                    ),
                )
                .await;
            Ok(Ok(password))
        }
        // Someone created it meanwhile: theirs, if it is the operator's.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = secrets
                .get(&secret_name)
                .await
                .map_err(api_error(format!("reading Secret {secret_name}")))?;
            if !auth::generated_for(&existing, parent.label, &name) {
                return Ok(Err(foreign().await));
            }
            auth::secret_string(&existing, auth::CLIENT_PASSWORD_KEY)
                .map(Ok)
                .ok_or_else(|| {
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
    use crate::access::rights::{OPERATOR_USER, REPLICATION_USER};
    use crate::cluster::context::Context;
    use crate::cluster::fixtures::{CLUSTER, cluster, context};
    use crate::cluster::secrets::ensure;
    use http::{Method, StatusCode};
    use plumbing::testing::ApiServer;
    use serde_json::Value;
    use valkey_api::v1alpha1::ValkeyCluster;

    const SECRETS: &str = "/api/v1/namespaces/prod/secrets";

    /// The data of a Secret as the API returns it (base64), from plain text.
    fn secret_json(name: &str, labels: Value, owners: Value, data: &[(&str, &str)]) -> Value {
        use k8s_openapi::ByteString;
        let data: BTreeMap<String, ByteString> = data
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect();
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "prod", "labels": labels, "ownerReferences": owners},
            "data": serde_json::to_value(data).unwrap_or_default(),
        })
    }

    fn ours() -> (Value, Value) {
        (
            serde_json::json!({"app.kubernetes.io/managed-by": "valkey-cluster-controller", "valkey.io/cluster": "cache"}),
            serde_json::json!([{"apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyCluster", "name": "cache", "uid": "0000-1", "controller": true}]),
        )
    }

    fn decoded(body: &Value, key: &str) -> String {
        let data: BTreeMap<String, k8s_openapi::ByteString> =
            serde_json::from_value(body["data"].clone()).unwrap_or_default();
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    }

    /// What `ensure` reports for `cluster`, which must be a problem.
    async fn problem_of(ctx: &Context, cluster: &ValkeyCluster) -> Problem {
        ensure(ctx, cluster, &ParentMemory::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .err()
            .unwrap_or_else(|| panic!("no problem"))
    }

    async fn expect_get(api: &mut ApiServer, name: &str) -> plumbing::testing::Received {
        api.expect(Method::GET, &format!("{SECRETS}/{name}")).await
    }

    #[tokio::test]
    async fn a_new_cluster_gets_a_generated_password_and_its_two_owned_secrets() {
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            expect_get(&mut api, "cache-operator").await.not_found();
            expect_get(&mut api, "cache-password").await.not_found();
            let created = api.expect(Method::POST, SECRETS).await;
            assert_eq!(created.body["metadata"]["name"], "cache-password");
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
            let acl = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-acl?"))
                .await;
            assert!(acl.uri.contains("fieldManager=valkey-cluster-controller"));
            assert_eq!(acl.body["metadata"]["ownerReferences"][0]["uid"], "0000-1");
            let file = decoded(&acl.body, auth::ACL_FILE_KEY);
            assert!(!file.contains(&password), "hashes only: {file}");
            assert!(file.contains(&password_hash(&password)));
            let operator_password = decoded(&acl.body, auth::OPERATOR_PASSWORD_KEY);
            acl.echo();
            let backup = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-operator?"))
                .await;
            assert_eq!(
                decoded(&backup.body, auth::OPERATOR_PASSWORD_KEY),
                operator_password,
                "the backup holds the same passwords"
            );
            assert_eq!(
                decoded(&backup.body, auth::CLIENT_PASSWORD_COPY_KEY),
                password,
                "and a copy of the clients' password"
            );
            backup.echo();
            api.done().await;
        });
        let memory = ParentMemory::default();
        let auth = ensure(&ctx, &cluster(CLUSTER), &memory)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auth.node.secret, "cache-acl");
        assert_eq!(auth.credentials.username.as_deref(), Some(OPERATOR_USER));
        assert_eq!(auth.password_secret.as_deref(), Some("cache-password"));
        assert_eq!(
            memory.passwords().map(|p| p.operator),
            auth.credentials.password.map(|p| p.expose().to_owned())
        );
    }

    #[tokio::test]
    async fn an_open_cluster_keeps_the_operators_users_and_a_passwordless_default_user() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  auth: {{enabled: false}}\n");
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            expect_get(&mut api, "cache-operator").await.not_found();
            let acl = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-acl?"))
                .await;
            let file = decoded(&acl.body, auth::ACL_FILE_KEY);
            acl.echo();
            api.expect(Method::PATCH, &format!("{SECRETS}/cache-operator?"))
                .await
                .echo();
            api.done().await;
            file
        });
        let auth = ensure(&ctx, &cluster(&yaml), &ParentMemory::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        let file = script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(file.contains("user default on nopass"), "{file}");
        assert!(
            file.lines()
                .any(|l| l.starts_with(&format!("user {REPLICATION_USER} off #"))),
            "replication stays fenced without authentication: {file}"
        );
        assert_eq!(auth.credentials.username.as_deref(), Some(OPERATOR_USER));
        assert_eq!(auth.password_secret, None);
    }

    /// A cluster without persistence: its servers come back empty from a restart in place, so
    /// their clients start off, like the replication user, until the engine admits them.
    #[tokio::test]
    async fn the_clients_of_a_cluster_without_persistence_start_off() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!(
            "{CLUSTER}  auth: {{enabled: false, users: [{{name: app, passwordSecret: {{name: app-pw}}, rules: '+@read'}}]}}\n  persistence: {{enabled: false}}\n"
        );
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            expect_get(&mut api, "cache-operator").await.not_found();
            let pw = secret_json("app-pw", Value::Null, Value::Null, &[("password", "x")]);
            expect_get(&mut api, "app-pw")
                .await
                .answer(StatusCode::OK, &pw);
            let acl = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-acl?"))
                .await;
            let file = decoded(&acl.body, auth::ACL_FILE_KEY);
            acl.echo();
            api.expect(Method::PATCH, &format!("{SECRETS}/cache-operator?"))
                .await
                .echo();
            api.done().await;
            file
        });
        let auth = ensure(&ctx, &cluster(&yaml), &ParentMemory::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        let file = script.await.unwrap_or_else(|e| panic!("{e}"));
        for user in ["default", "app", REPLICATION_USER] {
            assert!(
                file.lines()
                    .any(|l| l.starts_with(&format!("user {user} off "))),
                "{user} starts off: {file}"
            );
        }
        assert!(
            file.lines().any(|l| l.starts_with("user operator on ")),
            "{file}"
        );
        assert!(auth.users.clients_fenced());
    }

    #[tokio::test]
    async fn a_pre_existing_acl_secret_is_left_untouched_and_reported_naming_it() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  auth: {{enabled: false}}\n");
        let script = tokio::spawn(async move {
            let theirs = secret_json(
                "cache-acl",
                Value::Null,
                Value::Null,
                &[("users.acl", "user default on nopass +@all")],
            );
            expect_get(&mut api, "cache-acl")
                .await
                .answer(StatusCode::OK, &theirs);
            let event = api.event().await;
            assert_eq!(event["type"], "Warning");
            assert_eq!(event["reason"], SECRET_NOT_OWNED.as_str());
            assert!(
                event["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("cache-acl"),
                "{event}"
            );
            // Nothing is written: the script ends here.
            api.done().await;
        });
        let problem = problem_of(&ctx, &cluster(&yaml)).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(problem.reason, SECRET_NOT_OWNED);
        assert!(
            problem.message.contains("Secret cache-acl"),
            "{}",
            problem.message
        );
    }

    #[tokio::test]
    async fn a_password_secret_the_operator_did_not_generate_is_not_adopted() {
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            expect_get(&mut api, "cache-operator").await.not_found();
            let theirs = secret_json(
                "cache-password",
                serde_json::json!({"team": "x"}),
                Value::Null,
                &[("password", "theirs")],
            );
            expect_get(&mut api, "cache-password")
                .await
                .answer(StatusCode::OK, &theirs);
            assert_eq!(api.event().await["reason"], SECRET_NOT_OWNED.as_str());
            api.done().await;
        });
        let problem = problem_of(&ctx, &cluster(CLUSTER)).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            problem.message.contains("spec.auth.passwordSecret"),
            "{}",
            problem.message
        );
    }

    #[tokio::test]
    async fn a_deleted_acl_secret_is_rebuilt_with_the_same_operator_passwords() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  auth: {{enabled: false}}\n");
        let (labels, owners) = ours();
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            let backup = secret_json(
                "cache-operator",
                labels,
                owners,
                &[
                    ("operator-password", "kept-op"),
                    ("healthcheck-password", "kept-hc"),
                    ("replication-password", "kept-rep"),
                    ("backup-password", "kept-bk"),
                    ("sentinel-password", "kept-sn"),
                ],
            );
            expect_get(&mut api, "cache-operator")
                .await
                .answer(StatusCode::OK, &backup);
            let acl = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-acl?"))
                .await;
            assert_eq!(decoded(&acl.body, auth::OPERATOR_PASSWORD_KEY), "kept-op");
            assert!(decoded(&acl.body, auth::REPLICATION_CONF_KEY).contains("masterauth kept-rep"));
            acl.echo();
            // The backup already holds what it should: not written again.
            api.done().await;
        });
        let auth = ensure(&ctx, &cluster(&yaml), &ParentMemory::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            auth.credentials
                .password
                .map(|p| p.expose().to_owned())
                .as_deref(),
            Some("kept-op")
        );
    }

    /// The clients' password Secret deleted: it comes back with the same password, from the
    /// operator's copy, announced with a Warning; nothing the servers accept changes.
    #[tokio::test]
    async fn a_deleted_password_secret_comes_back_with_the_same_password() {
        let (ctx, mut api, _nodes) = context();
        let (labels, owners) = ours();
        let accepted = format!("{{\"default\":[\"{}\"]}}", password_hash("the-clients-pw"));
        let acl = secret_json(
            "cache-acl",
            labels.clone(),
            owners.clone(),
            &[
                ("operator-password", "op"),
                ("healthcheck-password", "hc"),
                ("replication-password", "rep"),
                ("backup-password", "bk"),
                ("sentinel-password", "sn"),
                ("accepted-passwords", &accepted),
            ],
        );
        let operator = secret_json(
            "cache-operator",
            labels,
            owners,
            &[
                ("operator-password", "op"),
                ("healthcheck-password", "hc"),
                ("replication-password", "rep"),
                ("backup-password", "bk"),
                ("sentinel-password", "sn"),
                ("client-password", "the-clients-pw"),
            ],
        );
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl")
                .await
                .answer(StatusCode::OK, &acl);
            expect_get(&mut api, "cache-operator")
                .await
                .answer(StatusCode::OK, &operator);
            expect_get(&mut api, "cache-password").await.not_found();
            let created = api.expect(Method::POST, SECRETS).await;
            assert_eq!(created.body["metadata"]["name"], "cache-password");
            assert_eq!(created.body["stringData"]["password"], "the-clients-pw");
            created.echo();
            let event = api.event().await;
            assert_eq!(event["type"], "Warning");
            assert_eq!(event["reason"], "PasswordSecretRestored");
            assert!(!event.to_string().contains("the-clients-pw"), "{event}");
            // The ACL Secret changes only where the file does (it was never written here).
            let acl = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-acl?"))
                .await;
            let file = decoded(&acl.body, auth::ACL_FILE_KEY);
            assert!(
                file.contains(&password_hash("the-clients-pw")),
                "the servers keep accepting the same password: {file}"
            );
            assert_eq!(
                decoded(&acl.body, auth::ACCEPTED_PASSWORDS_KEY),
                accepted,
                "and no other"
            );
            acl.echo();
            api.done().await;
        });
        let memory = ParentMemory::default();
        let auth = ensure(&ctx, &cluster(CLUSTER), &memory)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|p| panic!("{p:?}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(memory.client_password().as_deref(), Some("the-clients-pw"));
        assert_eq!(auth.password_secret.as_deref(), Some("cache-password"));
    }

    /// The clients' password Secret and every copy of it gone, while the servers have a
    /// password: nothing new is generated (it would lock every client out); the cluster says
    /// what happened and what a person can do.
    #[tokio::test]
    async fn a_deleted_password_secret_without_a_copy_is_not_replaced_by_a_new_password() {
        let (ctx, mut api, _nodes) = context();
        let (labels, owners) = ours();
        let accepted = format!("{{\"default\":[\"{}\"]}}", password_hash("old"));
        let acl = secret_json(
            "cache-acl",
            labels,
            owners,
            &[
                ("operator-password", "op"),
                ("healthcheck-password", "hc"),
                ("replication-password", "rep"),
                ("backup-password", "bk"),
                ("sentinel-password", "sn"),
                ("accepted-passwords", &accepted),
            ],
        );
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl")
                .await
                .answer(StatusCode::OK, &acl);
            expect_get(&mut api, "cache-operator").await.not_found();
            expect_get(&mut api, "cache-password").await.not_found();
            // Nothing is created or written.
            api.done().await;
        });
        let problem = problem_of(&ctx, &cluster(CLUSTER)).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(problem.reason, PASSWORD_SECRET_LOST);
        assert!(
            problem.message.contains("cache-password")
                && problem.message.contains("spec.auth.passwordSecret"),
            "{}",
            problem.message
        );
    }

    #[tokio::test]
    async fn a_named_user_whose_secret_is_missing_is_a_problem_naming_both() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!(
            "{CLUSTER}  auth: {{enabled: false, users: [{{name: app, passwordSecret: {{name: app-pw}}, rules: '+@read'}}]}}\n"
        );
        let script = tokio::spawn(async move {
            expect_get(&mut api, "cache-acl").await.not_found();
            expect_get(&mut api, "cache-operator").await.not_found();
            expect_get(&mut api, "app-pw").await.not_found();
            api.done().await;
        });
        let problem = problem_of(&ctx, &cluster(&yaml)).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(problem.reason.as_str(), "PasswordSecretNotFound");
        assert!(
            problem.message.contains("app-pw") && problem.message.contains("(app)"),
            "{}",
            problem.message
        );
    }
}
