//! The Kubernetes side of the cluster-controller: each pass reads the ValkeyCluster and its
//! ValkeyNodes, makes sure the Secrets and the member nodes exist as the spec says, lets the
//! engine observe Valkey and take one step, carries out the step when it is a Kubernetes one
//! (release a node's restart, delete a drained node), and reports status and Events.
//!
//! It touches ValkeyClusters, ValkeyNodes, the Secrets it manages, Events and Leases, and nothing
//! else: the ValkeyNode API is its only contract with the node-controller.

pub mod auth;
pub mod labels;
pub mod members;
pub mod placement;
pub mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use plumbing::Metrics;
use plumbing::events::EventPublisher;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyClusterStatus, ValkeyNode};

use crate::client::{Credentials, RedisClient, RedisClientConfig};
use crate::engine::{Action, Decision, Desired, Engine, EngineConfig, Member};
use auth::OperatorPasswords;
use labels::{CLUSTER_LABEL, FIELD_MANAGER};
use members::NodeAuth;
use status::{Outcome, Problem};

pub const CONTROLLER: &str = "valkey-cluster-controller";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("writing the status: {0}")]
    Status(#[source] plumbing::apply::ApplyError),
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
            Error::Status(_) => "status",
            Error::Invalid(_) => "invalid",
        }
    }
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// The longest wait before retrying a Valkey action that keeps failing.
const MAX_ACTION_RETRY: Duration = Duration::from_secs(30);
/// Failures in a row of a Valkey action before the cluster is reported Degraded: one or two are
/// the normal noise of pods restarting; three mean a person should look.
const ACTION_FAILURES_BEFORE_DEGRADED: u32 = 3;

pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    pub events: EventPublisher,
    /// One engine per cluster and operator password: it keeps Valkey connections between passes.
    engines: Mutex<HashMap<String, (String, Engine<RedisClient>)>>,
    /// Failed reconciles (the API, a Secret), per cluster.
    backoff: plumbing::backoff::Backoff,
    /// Valkey actions that failed in a row, per cluster: each retry waits longer.
    action_failures: plumbing::backoff::Backoff,
}

pub async fn run(handles: plumbing::Handles) {
    let clusters = handles.api::<DeserializeGuard<ValkeyCluster>>();
    let nodes = handles.api::<ValkeyNode>();
    let plumbing::Handles {
        client,
        metrics,
        events,
        readiness,
        stop,
        ..
    } = handles;
    let controller = Controller::new(clusters, watcher::Config::default())
        .owns(nodes, watcher::Config::default().labels(CLUSTER_LABEL));
    let store = controller.store();
    // (An error means the store's writer is gone: the controller is stopping anyway.)
    readiness.mark_synced_when(move || {
        let store = store.clone();
        async move { store.wait_until_ready().await }
    });
    let ctx = Arc::new(Context {
        client,
        metrics,
        events,
        engines: Mutex::new(HashMap::new()),
        backoff: plumbing::backoff::Backoff::default(),
        action_failures: plumbing::backoff::Backoff::default(),
    });
    controller
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile request failed");
            }
        })
        .await;
}

fn key_of(cluster: &ValkeyCluster) -> String {
    format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

fn error_policy(
    guarded: Arc<DeserializeGuard<ValkeyCluster>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Requeue {
    ctx.metrics
        .reconcile_failed(CONTROLLER, error.metric_label());
    let key = guarded.0.as_ref().map(key_of).unwrap_or_default();
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(cluster = %key, error = %error, retry_in = ?delay, "reconcile failed");
    Requeue::requeue(delay)
}

#[tracing::instrument(skip_all, fields(cluster = %guarded.0.as_ref().map(key_of).unwrap_or_default()))]
async fn reconcile(
    guarded: Arc<DeserializeGuard<ValkeyCluster>>,
    ctx: Arc<Context>,
) -> Result<Requeue, Error> {
    let cluster = match &guarded.0 {
        Ok(cluster) => cluster,
        Err(invalid) => {
            tracing::warn!(error = %invalid.error, "cannot read this ValkeyCluster");
            return Ok(Requeue::await_change());
        }
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Requeue::await_change()); // owner references take the ValkeyNodes with it
    }
    let _timer = ctx.metrics.reconcile_started(CONTROLLER);
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();

    let (auth, credentials, password_secret) =
        match ensure_auth(&ctx, cluster, &namespace, &name).await? {
            Ok(auth) => auth,
            Err(problem) => {
                let password_secret = cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.password_secret_name.clone());
                write_status(
                    &ctx,
                    cluster,
                    &Outcome::Problem {
                        problem,
                        health: None,
                    },
                    password_secret.as_deref(),
                )
                .await?;
                return Ok(Requeue::requeue(Duration::from_secs(15)));
            }
        };

    let nodes_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    let existing: Vec<ValkeyNode> = nodes_api
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}")))
        .await
        .map_err(api_error("listing ValkeyNodes"))?
        .items
        .into_iter()
        .filter(|n| n.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    let by_name: HashMap<String, &ValkeyNode> =
        existing.iter().map(|n| (n.name_any(), n)).collect();

    // Every member the spec wants exists with the spec it should have. Members the spec no longer
    // wants stay as they are until the engine has drained and forgotten them.
    // Before the cluster first forms it holds no data, so nothing needs a restart gate: a
    // corrected spec (a placement that could not be met) reaches every member at once.
    // (`status.shards` counts the shards that served slots when a member last answered.)
    let forming = cluster.status.as_ref().is_none_or(|s| s.shards == 0);
    let gate = |current: Option<&ValkeyNode>| {
        if forming {
            None
        } else {
            members::allowed_revision(current)
        }
    };
    let desired = Desired {
        shards: cluster.spec.shards.max(1) as u32,
        replicas: cluster.spec.replicas.max(0) as u32,
    };
    for (shard, index) in desired.slots_of_members() {
        let member_name = labels::member_name(&name, shard, index);
        let current = by_name.get(&member_name).copied();
        let Some(want) = members::desired_node(cluster, shard, index, &auth, gate(current)) else {
            continue;
        };
        if current.is_some_and(|c| c.spec == want.spec) {
            continue;
        }
        if !forming
            && current.is_some_and(|c| c.spec.allowed_revision.is_some())
            && want.spec.allowed_revision.is_none()
        {
            tracing::info!(
                node = %member_name,
                "the node's pod cannot run; it takes the new spec without waiting its turn"
            );
        }
        apply_node(&nodes_api, &want).await?;
        if current.is_none()
            && let Err(e) = ctx
                .events
                .normal_related(
                    cluster,
                    node_reference(&namespace, &member_name),
                    "NodeCreated",
                    "Create",
                    &format!("Created ValkeyNode {member_name} (shard {shard}, member {index})."),
                )
                .await
        {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }

    let members: Vec<Member> = existing.iter().filter_map(members::member).collect();
    let key = key_of(cluster);
    let engine = ctx.engine(&key, &credentials);
    let pass = engine.pass(&desired, &members).await;
    let decision = &pass.decision;
    let mut requeue = match decision {
        Decision::Act { .. } => Duration::from_millis(500),
        Decision::Wait { .. } => Duration::from_secs(2),
        Decision::Steady(_) => Duration::from_secs(15),
        Decision::Blocked { .. } => Duration::from_secs(10),
    };
    // A Valkey action that fails again and again is retried ever more slowly, and from the
    // third failure in a row the status says what Valkey answered. Any other pass clears it.
    let failing = match (&pass.outcome, decision) {
        (Some(Err(error)), Decision::Act { action, .. }) => {
            requeue = ctx.action_failures.failed(&key).min(MAX_ACTION_RETRY);
            let times = ctx.action_failures.failures(&key);
            tracing::info!(%error, times, retry_in = ?requeue, "the step failed; the next pass looks again");
            (times >= ACTION_FAILURES_BEFORE_DEGRADED).then(|| Problem {
                reason: "ActionFailing".into(),
                // No count in the words: a status that changed on every failure would be
                // written, and its own watch event would start the next pass at once.
                message: format!(
                    "{action} keeps failing: {error}. The operator retries, at most every {}s.",
                    MAX_ACTION_RETRY.as_secs()
                ),
            })
        }
        _ => {
            ctx.action_failures.succeeded(&key);
            None
        }
    };
    if let Decision::Act { action, reason, .. } = decision {
        match action {
            Action::AllowRestart { member } => {
                allow_restart(&nodes_api, cluster, &auth, &existing, &members, member).await?;
            }
            Action::DeleteMember { member } => {
                delete_node(&nodes_api, member).await?;
            }
            _ => {}
        }
        let failed = matches!(pass.outcome, Some(Err(_)));
        let note = format!(
            "{action}{}",
            if failed { " (failed; retrying)" } else { "" }
        );
        if let Err(e) = ctx
            .events
            .normal_related(
                cluster,
                node_reference(&namespace, action_member(action)),
                reason.as_str(),
                action_verb(action),
                &note,
            )
            .await
        {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }
    if let Decision::Blocked { reason, message } = decision
        && cluster.status.as_ref().and_then(|s| s.reason.as_deref()) != Some(reason.as_str())
        && let Err(e) = ctx
            .events
            .warning(cluster, reason.as_str(), "Reconcile", message)
            .await
    {
        tracing::debug!(error = %e, "could not publish an event");
    }

    // A member the node-controller cannot run (unschedulable, image, crash loop) stops progress:
    // say which and why, rather than "waiting for nodes" forever.
    let stuck = match decision {
        Decision::Steady(_) => None,
        _ => members::stuck_member(&existing),
    };
    // A step the slot machine refused to take safely needs a person as much as a stuck member.
    let blocked_step = match &pass.outcome {
        Some(Ok(crate::engine::Outcome::Blocked(why))) => Some(Problem {
            reason: "MigrationBlocked".into(),
            message: format!("{why}; the operator will not move this slot until it is resolved."),
        }),
        _ => None,
    };
    let outcome = match stuck.or(blocked_step).or(failing) {
        Some(problem) => Outcome::Problem {
            problem,
            health: pass.health.clone(),
        },
        None => Outcome::Decided {
            decision,
            health: pass.health.clone(),
        },
    };
    write_status(&ctx, cluster, &outcome, password_secret.as_deref()).await?;
    ctx.backoff.succeeded(&key);
    Ok(Requeue::requeue(requeue))
}

/// The member an action is about, for the Event's related object.
fn action_member(action: &Action) -> &str {
    match action {
        Action::Meet { on, .. }
        | Action::AddSlots { on, .. }
        | Action::Replicate { on, .. }
        | Action::Forget { on, .. }
        | Action::CancelMigrations { on }
        | Action::AdmitReplication { on, .. }
        | Action::ClearSlot { on, .. } => &on.member,
        Action::MigrateSlots(m) => &m.target.member,
        Action::StartAtomicMigration { target, .. } => &target.member,
        Action::Failover { on_replica, .. } | Action::Takeover { on_replica, .. } => {
            &on_replica.member
        }
        Action::AllowRestart { member } | Action::DeleteMember { member } => member,
    }
}

fn node_reference(namespace: &str, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("valkey.io/v1alpha1".into()),
        kind: Some("ValkeyNode".into()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn action_verb(action: &Action) -> &'static str {
    match action {
        Action::Meet { .. } => "Meet",
        Action::AddSlots { .. } => "AddSlots",
        Action::Replicate { .. } => "Replicate",
        Action::Forget { .. } => "Forget",
        Action::MigrateSlots(_) | Action::StartAtomicMigration { .. } => "MigrateSlots",
        Action::CancelMigrations { .. } | Action::ClearSlot { .. } => "CleanUpMigration",
        Action::Failover { .. } => "Failover",
        Action::Takeover { .. } => "Takeover",
        Action::AdmitReplication { .. } => "AdmitReplication",
        Action::AllowRestart { .. } => "AllowRestart",
        Action::DeleteMember { .. } => "DeleteNode",
    }
}

impl Context {
    fn engine(&self, key: &str, credentials: &Credentials) -> Engine<RedisClient> {
        let fingerprint = credentials
            .password
            .as_ref()
            .map(|p| auth::fingerprint(p.expose()))
            .unwrap_or_default();
        let mut engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, engine)) = engines.get(key)
            && *known == fingerprint
        {
            return engine.clone();
        }
        let client = RedisClient::new(RedisClientConfig {
            credentials: credentials.clone(),
            ..RedisClientConfig::default()
        });
        // With authentication the replication user is fenced (off in the ACL file at every start).
        let config = EngineConfig {
            fence_user: credentials
                .username
                .as_ref()
                .map(|_| auth::REPLICATION_USER.to_owned()),
            ..EngineConfig::for_credentials(credentials)
        };
        let engine = Engine::new(client, config);
        engines.insert(key.to_owned(), (fingerprint, engine.clone()));
        engine
    }
}

async fn apply_node(api: &Api<ValkeyNode>, node: &ValkeyNode) -> Result<(), Error> {
    let name = node.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(node),
    )
    .await
    .map_err(api_error(format!("applying ValkeyNode {name}")))?;
    Ok(())
}

/// Releases one member's restart: its `allowedRevision` becomes its desired revision.
async fn allow_restart(
    api: &Api<ValkeyNode>,
    cluster: &ValkeyCluster,
    auth: &NodeAuth,
    existing: &[ValkeyNode],
    members: &[Member],
    member: &str,
) -> Result<(), Error> {
    let (Some(node), Some(m)) = (
        existing.iter().find(|n| n.name_any() == member),
        members.iter().find(|m| m.name == member),
    ) else {
        return Ok(());
    };
    let Some(revision) = m.desired_revision.clone() else {
        return Ok(());
    };
    let desired = if m.shard < cluster.spec.shards.max(1) as u32
        && m.index <= cluster.spec.replicas.max(0) as u32
    {
        members::desired_node(cluster, m.shard, m.index, auth, Some(revision.clone()))
    } else {
        // A member on its way out keeps its spec; only the gate moves.
        let mut node = node.clone();
        node.spec.allowed_revision = Some(revision.clone());
        node.metadata = ObjectMeta {
            name: node.metadata.name.clone(),
            namespace: node.metadata.namespace.clone(),
            labels: node.metadata.labels.clone(),
            owner_references: node.metadata.owner_references.clone(),
            ..Default::default()
        };
        node.status = None;
        Some(node)
    };
    if let Some(node) = desired {
        apply_node(api, &node).await?;
    }
    Ok(())
}

async fn delete_node(api: &Api<ValkeyNode>, member: &str) -> Result<(), Error> {
    match api.delete(member, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_error(format!("deleting ValkeyNode {member}"))(e)),
    }
}

async fn write_status(
    ctx: &Context,
    cluster: &ValkeyCluster,
    outcome: &Outcome<'_>,
    password_secret: Option<&str>,
) -> Result<(), Error> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let new = status::compute(
        cluster.status.as_ref(),
        cluster.meta().generation,
        outcome,
        password_secret,
        &now,
    );
    let previous: Option<&ValkeyClusterStatus> = cluster.status.as_ref();
    if previous == Some(&new) {
        return Ok(());
    }
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    plumbing::apply::apply_status(&api, FIELD_MANAGER, &cluster.name_any(), &new)
        .await
        .map_err(Error::Status)?;
    let became = |state| new.state == Some(state) && previous.and_then(|p| p.state) != Some(state);
    if became(valkey_api::v1alpha1::ClusterState::Ready)
        && let Err(e) = ctx
            .events
            .normal(
                cluster,
                "ClusterReady",
                "Reconcile",
                new.message.as_deref().unwrap_or_default(),
            )
            .await
    {
        tracing::debug!(error = %e, "could not publish an event");
    }
    Ok(())
}

/// The Secrets authentication needs, created or brought up to date; then what the nodes and the
/// engine need from them. `Ok(Err(problem))` for a user error (a missing Secret) to report.
async fn ensure_auth(
    ctx: &Context,
    cluster: &ValkeyCluster,
    namespace: &str,
    name: &str,
) -> Result<Result<(NodeAuth, Credentials, Option<String>), Problem>, Error> {
    if !cluster.spec.auth.enabled {
        return Ok(Ok((NodeAuth::Open, Credentials::none(), None)));
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
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
            let secret_name = auth::generated_password_secret_name(name);
            (
                secret_name.clone(),
                generated_client_password(ctx, &secrets, cluster, &secret_name).await?,
            )
        }
    };

    let acl_name = auth::acl_secret_name(name);
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
    let want = auth::acl_secret(&acl_name, namespace, owner, &client_password, &passwords);
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
    Ok(Ok((
        NodeAuth::Acl {
            secret: acl_name,
            revision,
        },
        Credentials::user(auth::OPERATOR_USER, passwords.operator),
        Some(password_secret),
    )))
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
            if let Err(e) = ctx
                .events
                .normal(
                    cluster,
                    "PasswordGenerated",
                    "Create",
                    &format!(
                        "Generated the clients' password in Secret {secret_name} (key {}).",
                        auth::CLIENT_PASSWORD_KEY
                    ),
                )
                .await
            {
                tracing::debug!(error = %e, "could not publish an event");
            }
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
