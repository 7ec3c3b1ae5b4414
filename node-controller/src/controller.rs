//! The reconcile loop: observe (the ValkeyNode, its children from watch caches, the credentials
//! Secret) → build (pure, `render`) → apply (server-side, only what changed) → ask Valkey →
//! report (status and Events).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use plumbing::Metrics;
use plumbing::events::EventPublisher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use valkey_api::v1alpha1::{ValkeyNode, ValkeyNodeStatus};

use crate::names::{ChildNames, FIELD_MANAGER, NODE_LABEL};
use crate::probe::{self, Answer, Credentials};
use crate::render::{self, Workload};
use crate::status::{self, CredentialsState, Observed, PvcState, WorkloadState};

pub const CONTROLLER: &str = "valkey-node-controller";

/// How often a ready node is re-read: Valkey announces a failover through no Kubernetes event.
const REREAD_READY: Duration = Duration::from_secs(10);
/// How often a node that is not ready yet is looked at again (watches wake it sooner).
const REREAD_NOT_READY: Duration = Duration::from_secs(5);
/// How long a pass waits for the watch caches to list once before it gives up and backs off.
const CACHE_SYNC: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("reading Secret {name}: {source}")]
    Secret { name: String, source: kube::Error },
    #[error("writing the status: {0}")]
    Status(#[source] plumbing::apply::ApplyError),
    #[error("the watch caches of the children have not listed within {0:?}")]
    CachesNotSynced(Duration),
}

impl Error {
    /// The `kind` label of `reconcile_errors_total`.
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Secret { .. } => "secret",
            Error::Status(_) => "status",
            Error::CachesNotSynced(_) => "cache",
        }
    }
}

/// Watch caches of everything the node-controller owns, so a pass reads no object from the API.
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub stateful_sets: Store<StatefulSet>,
    pub deployments: Store<Deployment>,
    pub config_maps: Store<ConfigMap>,
    pub pvcs: Store<PersistentVolumeClaim>,
}

impl Stores {
    /// Waits until every cache has listed once. Until then an absent child may only be unseen,
    /// and a pass would report the node's pod as missing and recreate what exists.
    async fn synced(&self) -> Result<(), Error> {
        match tokio::time::timeout(CACHE_SYNC, self.all_ready()).await {
            Ok(true) => Ok(()),
            _ => Err(Error::CachesNotSynced(CACHE_SYNC)),
        }
    }

    /// `false` when a cache's writer is gone (the controller is stopping).
    async fn all_ready(&self) -> bool {
        let (pods, stateful_sets, deployments, config_maps, pvcs) = futures::future::join5(
            stores_ready(&self.pods),
            stores_ready(&self.stateful_sets),
            stores_ready(&self.deployments),
            stores_ready(&self.config_maps),
            stores_ready(&self.pvcs),
        )
        .await;
        pods && stateful_sets && deployments && config_maps && pvcs
    }
}

pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    pub events: EventPublisher,
    pub stores: Stores,
    /// Per child: the hash of what this process last applied and the resourceVersion that came
    /// back. When both still match, the child is as applied and the pass sends nothing.
    applied: Mutex<HashMap<String, (String, String)>>,
    backoff: plumbing::backoff::Backoff,
}

/// Runs the controller until `stop` resolves.
pub async fn run(handles: plumbing::Handles) {
    // Only our own children are cached: pods by their node label, the rest by managed-by.
    let ours =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    let pods_cfg = watcher::Config::default().labels(NODE_LABEL);

    let (pods, pods_writer) = reflector::store();
    let (stateful_sets, sts_writer) = reflector::store();
    let (deployments, deploy_writer) = reflector::store();
    let (config_maps, cm_writer) = reflector::store();
    let (pvcs, pvc_writer) = reflector::store();
    let pod_stream = watcher(handles.api::<Pod>(), pods_cfg)
        .default_backoff()
        .reflect(pods_writer)
        .touched_objects();
    let sts_stream = watcher(handles.api::<StatefulSet>(), ours.clone())
        .default_backoff()
        .reflect(sts_writer)
        .touched_objects();
    let deploy_stream = watcher(handles.api::<Deployment>(), ours.clone())
        .default_backoff()
        .reflect(deploy_writer)
        .touched_objects();
    let cm_stream = watcher(handles.api::<ConfigMap>(), ours.clone())
        .default_backoff()
        .reflect(cm_writer)
        .touched_objects();
    let pvc_stream = watcher(handles.api::<PersistentVolumeClaim>(), ours)
        .default_backoff()
        .reflect(pvc_writer)
        .touched_objects();

    let stores = Stores {
        pods,
        stateful_sets,
        deployments,
        config_maps,
        pvcs,
    };
    let nodes = handles.api::<DeserializeGuard<ValkeyNode>>();
    let controller = Controller::new(nodes, watcher::Config::default());
    let node_store = controller.store();
    let caches = stores.clone();
    let plumbing::Handles {
        client,
        metrics,
        events,
        readiness,
        stop,
        ..
    } = handles;
    readiness.mark_synced_when(move || {
        let (caches, node_store) = (caches.clone(), node_store.clone());
        async move { futures::future::join(caches.all_ready(), node_store.wait_until_ready()).await }
    });

    let ctx = Arc::new(Context {
        client,
        metrics,
        events,
        stores,
        applied: Mutex::new(HashMap::new()),
        backoff: plumbing::backoff::Backoff::default(),
    });
    controller
        .owns_stream(sts_stream)
        .owns_stream(deploy_stream)
        .owns_stream(cm_stream)
        .watches_stream(pod_stream, |pod| node_of(&pod))
        .watches_stream(pvc_stream, |pvc| node_of(&pvc))
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile request failed");
            }
        })
        .await;
}

async fn stores_ready<K: Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.wait_until_ready().await.is_ok()
}

/// Pods and PVCs point at their ValkeyNode through the `valkey.io/node` label.
fn node_of<K: Resource>(object: &K) -> Option<ObjectRef<DeserializeGuard<ValkeyNode>>> {
    let name = object.meta().labels.as_ref()?.get(NODE_LABEL)?;
    let namespace = object.meta().namespace.as_deref()?;
    Some(ObjectRef::new(name).within(namespace))
}

fn error_policy(
    guarded: Arc<DeserializeGuard<ValkeyNode>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics
        .reconcile_failed(CONTROLLER, error.metric_label());
    let key = guarded.0.as_ref().map(key_of).unwrap_or_default();
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(node = %key, error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn key_of(node: &ValkeyNode) -> String {
    format!(
        "{}/{}",
        node.namespace().unwrap_or_default(),
        node.name_any()
    )
}

#[tracing::instrument(skip_all, fields(node = %guarded.0.as_ref().map(key_of).unwrap_or_default()))]
async fn reconcile(
    guarded: Arc<DeserializeGuard<ValkeyNode>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let node = match &guarded.0 {
        Ok(node) => node,
        Err(invalid) => {
            // A stored object the types cannot read: wait for someone to fix it.
            tracing::warn!(name = %invalid.metadata.name.as_deref().unwrap_or_default(), error = %invalid.error, "cannot read this ValkeyNode");
            return Ok(Action::await_change());
        }
    };
    if node.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // owner references take the children with it
    }
    ctx.stores.synced().await?;
    let _timer = ctx.metrics.reconcile_started(CONTROLLER);
    let namespace = node.namespace().unwrap_or_default();
    let name = node.name_any();
    let names = ChildNames::of(&name);

    let mut children = match render::build(node) {
        Ok(children) => children,
        Err(e) => {
            report_bad_spec(node, &ctx, e.reason(), &e.to_string()).await?;
            return Ok(Action::await_change());
        }
    };

    let (credentials_state, credentials) = read_credentials(node, &ctx.client, &namespace).await?;

    let pods = ctx.stores.pods.state();
    let live_config = ctx
        .stores
        .config_maps
        .get(&ObjectRef::new(&names.config_map).within(&namespace));
    render::keep_held_configs(
        &mut children.config_map,
        live_config.as_deref(),
        rolled_out(&pods, &namespace, &name, &children.revision),
    );
    ctx.apply_child(
        node,
        &namespace,
        &children.config_map,
        &ctx.stores.config_maps,
    )
    .await?;
    let pvc_state = match &children.pvc {
        None => None,
        Some(pvc) => Some(
            match invalid(
                ctx.apply_child(node, &namespace, pvc, &ctx.stores.pvcs)
                    .await,
            )? {
                None => pvc_phase(&ctx.stores.pvcs, &namespace, &names.pvc),
                // An immutable field (storage class) or a shrink: say so and run on the volume that is.
                Some(why) => PvcState::Rejected(format!(
                    "The API refused the change to {}: {why}",
                    names.pvc
                )),
            },
        ),
    };
    let applied = match &children.workload {
        Workload::StatefulSet(sts) => {
            ctx.apply_child(node, &namespace, sts.as_ref(), &ctx.stores.stateful_sets)
                .await
        }
        Workload::Deployment(deploy) => {
            ctx.apply_child(node, &namespace, deploy.as_ref(), &ctx.stores.deployments)
                .await
        }
    };
    let workload_state = match invalid(applied)? {
        Some(why) => WorkloadState::Rejected(format!("The API refused {}: {why}", names.workload)),
        None => match &children.workload {
            Workload::StatefulSet(_) => ready_replicas(
                &ctx.stores.stateful_sets,
                &namespace,
                &names.workload,
                |s: &StatefulSet| s.status.as_ref().and_then(|s| s.ready_replicas),
            ),
            Workload::Deployment(_) => ready_replicas(
                &ctx.stores.deployments,
                &namespace,
                &names.workload,
                |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas),
            ),
        },
    };

    let pod = choose_pod(&pods, &namespace, &name, &children.revision);
    let answer = match pod.and_then(running_ip) {
        Some(ip) if credentials.is_some() || node.spec.credentials.is_none() => {
            Some(probe::ask(&ip, credentials.as_ref()).await)
        }
        Some(_) => Some(Answer::Failed("no credentials to authenticate with".into())),
        None => None,
    };

    let observed = Observed {
        generation: node.meta().generation,
        workload_name: &names.workload,
        workload: workload_state,
        pvc: pvc_state,
        credentials: credentials_state,
        pod: pod.map(AsRef::as_ref),
        valkey: answer,
        desired_revision: &children.revision,
        restart_allowed: render::restart_allowed(
            node.spec.allowed_revision.as_deref(),
            &children.revision,
        ),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let new_status = status::compute(node.status.as_ref(), &observed, &now);
    ctx.write_status(node, &namespace, &name, &new_status)
        .await?;
    ctx.backoff.succeeded(&key_of(node));

    Ok(Action::requeue(if new_status.ready {
        REREAD_READY
    } else {
        REREAD_NOT_READY
    }))
}

impl Context {
    /// Server-side applies `object` unless it is exactly as this process last applied it.
    async fn apply_child<K>(
        &self,
        node: &ValkeyNode,
        namespace: &str,
        object: &K,
        store: &Store<K>,
    ) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let kind = K::kind(&());
        let name = object.meta().name.clone().unwrap_or_default();
        let key = format!("{kind}/{namespace}/{name}");
        let hash = hex::encode(Sha256::digest(
            serde_json::to_vec(object).unwrap_or_default(),
        ));
        let live = store.get(&ObjectRef::new(&name).within(namespace));
        let live_version = live
            .as_ref()
            .and_then(|l| l.meta().resource_version.clone());
        let last = self
            .applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let (Some((last_hash, last_version)), Some(live_version)) = (&last, &live_version)
            && *last_hash == hash
            && last_version == live_version
        {
            return Ok(());
        }

        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let result = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .map_err(|source| Error::Apply {
                kind: static_kind::<K>(),
                name: name.clone(),
                source,
            })?;
        let new_version = result.meta().resource_version.clone().unwrap_or_default();
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (hash.clone(), new_version));

        // Events for what this controller decided: a create, or a change of what it wants. (Other
        // writers move resourceVersions all the time, so a moved version proves nothing.)
        let note = match (&live, &last) {
            (None, _) => Some(("Created", format!("Created {kind} {name}."))),
            (Some(_), Some((last_hash, _))) if *last_hash != hash => Some((
                "Updated",
                format!("Updated {kind} {name} to match the ValkeyNode."),
            )),
            _ => None,
        };
        if let Some((reason, note)) = note {
            let reason = format!("{reason}{kind}");
            if let Err(e) = self.events.normal(node, &reason, "Apply", &note).await {
                tracing::debug!(error = %e, "could not publish an event");
            }
        }
        Ok(())
    }

    async fn write_status(
        &self,
        node: &ValkeyNode,
        namespace: &str,
        name: &str,
        status: &ValkeyNodeStatus,
    ) -> Result<(), Error> {
        let previous = node.status.as_ref();
        if previous == Some(status) {
            return Ok(());
        }
        let api: Api<ValkeyNode> = Api::namespaced(self.client.clone(), namespace);
        plumbing::apply::apply_status(&api, FIELD_MANAGER, name, status)
            .await
            .map_err(Error::Status)?;
        self.announce(node, previous, status).await;
        Ok(())
    }

    /// Events for the transitions a person cares about.
    async fn announce(
        &self,
        node: &ValkeyNode,
        previous: Option<&ValkeyNodeStatus>,
        status: &ValkeyNodeStatus,
    ) {
        let was_ready = previous.is_some_and(|s| s.ready);
        let ready_condition = status
            .conditions
            .as_deref()
            .and_then(|c| plumbing::conditions::find_condition(c, status::READY));
        let mut events = Vec::new();
        if status.ready && !was_ready {
            events.push((
                false,
                "Ready",
                format!(
                    "Pod {} is ready and Valkey answers.",
                    status.pod_name.as_deref().unwrap_or_default()
                ),
            ));
        }
        if !status.ready && was_ready {
            let message = ready_condition
                .map(|c| c.message.clone())
                .unwrap_or_default();
            events.push((true, "NotReady", message));
        }
        let was_role = previous.and_then(|s| s.role);
        if let (Some(before), Some(now)) = (was_role, status.role)
            && before != now
        {
            events.push((
                false,
                "RoleChanged",
                format!("Valkey now reports role {now} (was {before})."),
            ));
        }
        for (warning, reason, note) in events {
            let result = if warning {
                self.events.warning(node, reason, "Observe", &note).await
            } else {
                self.events.normal(node, reason, "Observe", &note).await
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "could not publish an event");
            }
        }
    }
}

fn static_kind<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "StatefulSet" => "StatefulSet",
        "Deployment" => "Deployment",
        "ConfigMap" => "ConfigMap",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        _ => "object",
    }
}

/// A spec the build stage refuses: Ready=False with the reason, one Warning event, no children touched.
async fn report_bad_spec(
    node: &ValkeyNode,
    ctx: &Context,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let mut status = node.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    plumbing::conditions::set_condition(
        &mut conditions,
        status::READY,
        plumbing::conditions::ConditionStatus::False,
        reason,
        message,
        node.meta().generation,
        &now,
    );
    status.conditions = Some(conditions);
    status.ready = false;
    status.observed_generation = node.meta().generation;
    if node.status.as_ref() != Some(&status) {
        let namespace = node.namespace().unwrap_or_default();
        let api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), &namespace);
        plumbing::apply::apply_status(&api, FIELD_MANAGER, &node.name_any(), &status)
            .await
            .map_err(Error::Status)?;
        if let Err(e) = ctx.events.warning(node, reason, "Render", message).await {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }
    Ok(())
}

/// The credentials Secret, read for the node-controller's own PING. Its values never leave this
/// function except as the `Credentials` whose Debug hides the password.
async fn read_credentials(
    node: &ValkeyNode,
    client: &Client,
    namespace: &str,
) -> Result<(Option<CredentialsState>, Option<Credentials>), Error> {
    let Some(spec) = &node.spec.credentials else {
        return Ok((None, None));
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
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

/// An apply the API refused as invalid (422) is a fact to report, not an error to retry.
fn invalid(result: Result<(), Error>) -> Result<Option<String>, Error> {
    match result {
        Ok(()) => Ok(None),
        Err(Error::Apply {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 422 => Ok(Some(status.message)),
        Err(e) => Err(e),
    }
}

fn pvc_phase(store: &Store<PersistentVolumeClaim>, namespace: &str, name: &str) -> PvcState {
    match store.get(&ObjectRef::new(name).within(namespace)) {
        None => PvcState::Missing,
        Some(pvc) => PvcState::Phase {
            name: name.to_owned(),
            phase: pvc
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
        },
    }
}

fn ready_replicas<K>(
    store: &Store<K>,
    namespace: &str,
    name: &str,
    ready: impl Fn(&K) -> Option<i32>,
) -> WorkloadState
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match store.get(&ObjectRef::new(name).within(namespace)) {
        None => WorkloadState::Missing,
        Some(w) => WorkloadState::Present {
            ready_replicas: ready(&w).unwrap_or(0),
        },
    }
}

/// Whether `pod` belongs to ValkeyNode `node` (terminating or not).
fn is_pod_of(pod: &Pod, namespace: &str, node: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NODE_LABEL))
            .map(String::as_str)
            == Some(node)
}

/// Whether the node has a pod and every pod not being deleted runs `revision`: only then may
/// the configs of earlier revisions go.
fn rolled_out(pods: &[Arc<Pod>], namespace: &str, node: &str, revision: &str) -> bool {
    let mut live = pods
        .iter()
        .filter(|p| is_pod_of(p, namespace, node) && p.metadata.deletion_timestamp.is_none())
        .peekable();
    live.peek().is_some() && live.all(|p| status::pod_revision(p).as_deref() == Some(revision))
}

/// The pod that speaks for the node: not terminating, on the desired revision if one is, then
/// the newest. A Deployment rolling may briefly have two.
fn choose_pod<'a>(
    pods: &'a [Arc<Pod>],
    namespace: &str,
    node: &str,
    revision: &str,
) -> Option<&'a Arc<Pod>> {
    let mine = pods.iter().filter(|p| is_pod_of(p, namespace, node));
    mine.max_by_key(|p| {
        (
            p.metadata.deletion_timestamp.is_none(),
            status::pod_revision(p).as_deref() == Some(revision),
            status::pod_is_ready(p),
            p.metadata.creation_timestamp.clone().map(|t| t.0),
        )
    })
}

/// The IP to ask Valkey on: only a pod whose container is running now.
fn running_ip(pod: &Arc<Pod>) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let running = status
        .container_statuses
        .as_ref()?
        .iter()
        .any(|c| c.name == "valkey" && c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if running { status.pod_ip.clone() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Arc<Pod> {
        Arc::new(serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn the_live_pod_on_the_desired_revision_speaks_for_the_node() {
        let old = pod(
            "metadata: {name: a, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r1}, creationTimestamp: '2026-01-01T00:00:00Z'}",
        );
        let new = pod(
            "metadata: {name: b, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r2}, creationTimestamp: '2026-01-01T00:01:00Z'}",
        );
        let gone = pod(
            "metadata: {name: c, namespace: ns, labels: {valkey.io/node: n}, annotations: {valkey.io/revision: r2}, deletionTimestamp: '2026-01-01T00:02:00Z'}",
        );
        let other = pod(
            "metadata: {name: d, namespace: ns, labels: {valkey.io/node: m}, annotations: {valkey.io/revision: r2}}",
        );
        let pods = vec![old, new, gone, other];
        let chosen = choose_pod(&pods, "ns", "n", "r2").and_then(|p| p.metadata.name.clone());
        assert_eq!(chosen.as_deref(), Some("b"));
        let chosen = choose_pod(&pods, "ns", "n", "r1").and_then(|p| p.metadata.name.clone());
        assert_eq!(chosen.as_deref(), Some("a"));
        assert!(choose_pod(&pods, "other", "n", "r1").is_none());
    }

    #[test]
    fn a_node_has_rolled_out_when_every_live_pod_runs_the_revision() {
        let on = |name: &str, revision: &str, deleting: bool| {
            let deletion = if deleting {
                ", deletionTimestamp: '2026-01-01T00:02:00Z'"
            } else {
                ""
            };
            pod(&format!(
                "metadata: {{name: {name}, namespace: ns, labels: {{valkey.io/node: n}}, annotations: {{valkey.io/revision: {revision}}}{deletion}}}"
            ))
        };
        assert!(!rolled_out(&[], "ns", "n", "r2"), "no pod yet");
        assert!(!rolled_out(&[on("a", "r1", false)], "ns", "n", "r2"));
        assert!(rolled_out(&[on("b", "r2", false)], "ns", "n", "r2"));
        assert!(
            !rolled_out(
                &[on("a", "r1", false), on("b", "r2", false)],
                "ns",
                "n",
                "r2"
            ),
            "a Deployment half way"
        );
        assert!(
            rolled_out(
                &[on("a", "r1", true), on("b", "r2", false)],
                "ns",
                "n",
                "r2"
            ),
            "the old pod is going"
        );
        assert!(
            !rolled_out(&[on("a", "r2", true)], "ns", "n", "r2"),
            "only a terminating pod"
        );
        assert!(
            !rolled_out(&[on("b", "r2", false)], "ns", "m", "r2"),
            "another node's pod"
        );
    }

    #[test]
    fn only_a_running_container_is_asked() {
        let waiting = pod(
            "metadata: {name: a}\nstatus: {podIP: 10.0.0.1, containerStatuses: [{name: valkey, image: x, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: CrashLoopBackOff}}}]}",
        );
        let running = pod(
            "metadata: {name: a}\nstatus: {podIP: 10.0.0.1, containerStatuses: [{name: valkey, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]}",
        );
        assert_eq!(running_ip(&waiting), None);
        assert_eq!(running_ip(&running).as_deref(), Some("10.0.0.1"));
    }
}
