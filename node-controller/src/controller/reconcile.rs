//! One pass over a ValkeyNode, as a pipeline whose every stage is a function with a typed result:
//!
//! 1. build ([`crate::render`], pure): the children the spec asks for, and the live settings of
//!    its valkey.conf. A spec the build refuses is reported, and nothing else is done.
//! 2. observe ([`observe_server`]): the credentials and the TLS CA from the Secrets
//!    ([`super::secrets`]), the pod that speaks for the node (from the cache, [`super::observe`]),
//!    and Valkey's answer to PING ([`crate::probe`]).
//! 3. act ([`act_on_server`]): the live settings set on the running server, and an older TLS
//!    server told to reload its certificate files.
//! 4. apply ([`apply_children`]): the ConfigMap, the PVC ([`super::volume`]) and the workload,
//!    each only when it changed ([`super::apply`]).
//! 5. report ([`report_status`]): the status ([`crate::status`]) with its Events, the pod's role
//!    label ([`super::label`]), and when to look again.
//!
//! Valkey's live settings go before anything is applied so that a value Valkey refuses changes
//! nothing else: not even valkey.conf, from which a pod that restarts would fail to start. Such a
//! pass stops after act and reports the refusal ([`report_refused`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use plumbing::{ObjectKey, Reconciler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use valkey_api::contract::{SENTINEL_PORT, VALKEY_PORT};
use valkey_api::v1alpha1::{NodeServer, Role, ValkeyNode, ValkeyNodeStatus};

use super::apply::{self, invalid};
use super::context::Context;
use super::error::Error;
use super::{label, observe, report, reread, secrets, volume};
use crate::live::{self, apply::LiveSettingsOutcome};
use crate::names::ChildNames;
use crate::probe::{self, Answer};
use crate::render::{self, Children, RenderError, Workload};
use crate::status::{self, CredentialsState, Observed, PvcState, WorkloadState};

/// The reconcile shell runs the pass below for each ValkeyNode.
impl Reconciler for Context {
    type Object = ValkeyNode;
    type Error = Error;

    async fn reconcile(&self, node: &ValkeyNode, key: &ObjectKey) -> Result<Action, Error> {
        pass(self, node, key).await
    }

    fn forget(&self, key: &ObjectKey) {
        Context::forget(self, key);
    }
}

pub async fn pass(ctx: &Context, node: &ValkeyNode, key: &ObjectKey) -> Result<Action, Error> {
    let node = ctx.as_last_written(node);
    let node = node.as_ref();
    let children = match render::build_with(node, &ctx.render) {
        Ok(children) => children,
        Err(bad_spec) => return report_bad_spec(ctx, node, &bad_spec).await,
    };
    // One look at the pods serves the whole pass: the pod asked and whether the roll is done
    // are judged on the same snapshot. Only the node's own pods, by the index: a scan of every
    // pod each pass made the fleet's CPU grow with its square.
    let pods = ctx.stores.pods_of(key.namespace(), key.name());
    let server = observe_server(ctx, node, key, &pods, &children.revision).await?;
    let live_config = act_on_server(ctx, key, &server, &children).await;
    if let Some(refused @ LiveSettingsOutcome::Refused { .. }) = live_config {
        return report_refused(ctx, node, server, &children.revision, refused).await;
    }
    let applied = apply_children(ctx, node, key, &pods, children).await?;
    report_status(ctx, node, server, applied, live_config).await
}

/// A spec the build refuses: said in the status and an Event; nothing to do until it changes.
async fn report_bad_spec(
    ctx: &Context,
    node: &ValkeyNode,
    bad_spec: &RenderError,
) -> Result<Action, Error> {
    report::bad_spec(node, ctx, bad_spec.reason(), &bad_spec.to_string()).await?;
    Ok(Action::await_change())
}

/// What the observe stage sees of the node's server before anything is changed.
struct ServerView<'p> {
    /// The pod that speaks for the node (see [`observe::choose_pod`]).
    pod: Option<&'p Arc<Pod>>,
    /// For the Credentials condition; `None` when the node names no credentials.
    credentials_state: Option<CredentialsState>,
    credentials: Option<probe::Credentials>,
    /// The CA to verify a TLS server with, when the node serves TLS and its Secret holds one.
    trust: Option<plumbing::valkey_tls::Trust>,
    /// The IP asked and Valkey's answer; `None` while no pod runs.
    answer: Option<(String, Answer)>,
}

impl ServerView<'_> {
    /// How to reach the server and what it says of itself, when it answered PING.
    fn answering(&self) -> Option<(Login<'_>, &probe::Server)> {
        match &self.answer {
            Some((ip, Answer::Pong { server, .. })) => Some((
                Login {
                    ip,
                    credentials: self.credentials.as_ref(),
                    trust: self.trust.as_ref(),
                },
                server,
            )),
            _ => None,
        }
    }
}

/// The observe stage: the credentials, the trust, the pod on `revision` if one is, and what its
/// Valkey answers.
async fn observe_server<'p>(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    pods: &'p [Arc<Pod>],
    revision: &str,
) -> Result<ServerView<'p>, Error> {
    let mut known = ctx.credentials.read(node, &ctx.stores.secrets).await?;
    let trust = secrets::read_trust(node, &ctx.stores.secrets).await?;
    let pod = observe::choose_pod(pods, key.namespace(), &node.name_any(), revision);
    let mut answer = ask(node, pod, &known, &trust).await;
    if known.remembered
        && answer
            .as_ref()
            .is_some_and(|(_, a)| a.refused_credentials())
    {
        // Remembered credentials the server no longer takes (someone changed the Secret): read
        // the Secret again and ask once more before saying the node is not ready. Only then: a
        // server that does not answer would make the pass wait for its timeout twice.
        ctx.credentials.forget(node);
        known = ctx.credentials.read(node, &ctx.stores.secrets).await?;
        answer = ask(node, pod, &known, &trust).await;
    }
    Ok(ServerView {
        pod,
        credentials_state: known.state,
        credentials: known.credentials,
        trust: trust.and_then(Result::ok),
        answer,
    })
}

/// The act stage: the live settings go to a server that answered, and an older TLS server is told
/// to reload its files. `None` when no server answered.
///
/// A pod on an older revision is not sent the settings: it is to be replaced, and its server may
/// be an older Valkey that refuses the newer one's values (Valkey 9's shutdown-on-sigterm
/// failover, on an upgrade from 8), which would hold the roll that replaces it forever.
async fn act_on_server(
    ctx: &Context,
    key: &ObjectKey,
    server: &ServerView<'_>,
    children: &Children,
) -> Option<LiveSettingsOutcome> {
    let (login, answered) = server.answering()?;
    let running = server.pod.and_then(|p| status::pod_revision(p));
    let outcome = match live::apply::awaiting_restart(running, &children.revision) {
        Some(waiting) => waiting,
        None => live_settings(ctx, key, &login, answered, &children.live).await,
    };
    // A Sentinel takes no CONFIG SET; it reads its certificate files when it starts.
    let sentinel = matches!(
        &server.answer,
        Some((
            _,
            Answer::Pong {
                role: Some(Role::Sentinel),
                ..
            }
        ))
    );
    if !sentinel && login.trust.is_some() && !children.live.contains_key(live::TLS_AUTO_RELOAD) {
        reload_tls(&login, answered).await;
    }
    Some(outcome)
}

/// The children as the pass leaves them, for the status.
#[derive(Debug, PartialEq)]
struct AppliedChildren {
    workload: WorkloadState,
    /// `None` when the node has no persistence.
    pvc: Option<PvcState>,
    /// The revision the pod is to run, and whether the parent lets it run now.
    desired_revision: String,
    restart_allowed: bool,
}

impl AppliedChildren {
    /// After a refused live setting nothing was applied: the workload as the last status saw it,
    /// no claim, and the revision the last pass wanted (the built one when none did), held.
    fn untouched(node: &ValkeyNode, built_revision: &str) -> Self {
        let previous = node.status.as_ref();
        Self {
            workload: WorkloadState::Present {
                ready_replicas: i32::from(previous.is_some_and(|s| s.ready)),
            },
            pvc: None,
            desired_revision: previous
                .and_then(|s| s.desired_revision.as_deref())
                .unwrap_or(built_revision)
                .to_owned(),
            restart_allowed: false,
        }
    }
}

/// The apply stage: every child of the bundle, in the order ConfigMap, PVC, workload (the pod
/// mounts the first two). The bundle is taken apart without `..`, so a child added to
/// [`Children`] does not compile until it is applied here.
async fn apply_children(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    pods: &[Arc<Pod>],
    children: Children,
) -> Result<AppliedChildren, Error> {
    let Children {
        config_map,
        pvc,
        workload,
        revision,
        // Set on the running server by the act stage; valkey.conf in the ConfigMap holds them too.
        live: _,
    } = children;
    apply_config_map(ctx, node, key, pods, config_map, &revision).await?;
    // A claim the API refuses to change (an immutable field, a class that cannot grow) is said
    // in the status, and the node runs on the volume that is.
    let pvc = match &pvc {
        None => None,
        Some(pvc) => Some(volume::sync(ctx, node, key, pvc).await?),
    };
    let workload = apply_workload(ctx, node, key, &workload).await?;
    Ok(AppliedChildren {
        workload,
        pvc,
        restart_allowed: render::restart_allowed(node.spec.allowed_revision.as_deref(), &revision),
        desired_revision: revision,
    })
}

/// The ConfigMap, still holding the valkey.conf of every revision a live pod runs.
async fn apply_config_map(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    pods: &[Arc<Pod>],
    mut config_map: ConfigMap,
    revision: &str,
) -> Result<(), Error> {
    let (namespace, name) = (key.namespace(), node.name_any());
    let store = &ctx.stores.config_maps;
    let live = store.get(&ObjectRef::new(&ChildNames::of(&name).config_map).within(namespace));
    let rolled_out = observe::rolled_out(pods, namespace, &name, revision);
    render::keep_held_configs(&mut config_map, live.as_deref(), rolled_out);
    apply::child(ctx, node, key, &config_map, store).await
}

/// The StatefulSet or Deployment, and how many of its pods are ready.
async fn apply_workload(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    workload: &Workload,
) -> Result<WorkloadState, Error> {
    let stores = &ctx.stores;
    match workload {
        Workload::StatefulSet(sts) => {
            apply_and_count(ctx, node, key, sts.as_ref(), &stores.stateful_sets, |s| {
                s.status.as_ref()?.ready_replicas
            })
            .await
        }
        Workload::Deployment(deploy) => {
            apply_and_count(ctx, node, key, deploy.as_ref(), &stores.deployments, |d| {
                d.status.as_ref()?.ready_replicas
            })
            .await
        }
    }
}

/// Applies a workload of kind `K` and reads its ready replicas from the cache. A workload the API
/// refuses as invalid is said in the status rather than retried.
async fn apply_and_count<K>(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    workload: &K,
    store: &Store<K>,
    ready_replicas: impl Fn(&K) -> Option<i32>,
) -> Result<WorkloadState, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
        + 'static,
{
    let name = ChildNames::of(&node.name_any()).workload;
    let applied = apply::child(ctx, node, key, workload, store).await;
    Ok(match invalid(applied)? {
        Some(why) => WorkloadState::Rejected(format!("The API refused {name}: {why}")),
        None => observe::ready_replicas(store, key.namespace(), &name, ready_replicas),
    })
}

/// The report stage: the status of what the pass saw and left, and when to look again.
async fn report_status(
    ctx: &Context,
    node: &ValkeyNode,
    server: ServerView<'_>,
    applied: AppliedChildren,
    live_config: Option<LiveSettingsOutcome>,
) -> Result<Action, Error> {
    let pod = server.pod.map(AsRef::as_ref);
    let status = new_status(node, server, applied, live_config);
    publish(ctx, node, pod, &status).await?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Ok(Action::requeue(reread::after(&status, &now)))
}

/// The report of a pass that stopped at a live setting Valkey refused: what the server said, and
/// the children's conditions as the last pass wrote them, since none was touched.
async fn report_refused(
    ctx: &Context,
    node: &ValkeyNode,
    server: ServerView<'_>,
    built_revision: &str,
    refused: LiveSettingsOutcome,
) -> Result<Action, Error> {
    let pod = server.pod.map(AsRef::as_ref);
    let untouched = AppliedChildren::untouched(node, built_revision);
    let mut status = new_status(node, server, untouched, Some(refused));
    keep_conditions_of_untouched_children(node, &mut status);
    publish(ctx, node, pod, &status).await?;
    // Looked at again soon: the refusal is what the spec asks, and a change of it wakes the pass.
    Ok(Action::requeue(reread::NOT_READY))
}

/// The status computed from everything the pass saw, starting from the node's last one.
fn new_status(
    node: &ValkeyNode,
    server: ServerView<'_>,
    applied: AppliedChildren,
    live_config: Option<LiveSettingsOutcome>,
) -> ValkeyNodeStatus {
    let names = ChildNames::of(&node.name_any());
    let observed = Observed {
        generation: node.meta().generation,
        workload_name: &names.workload,
        workload: applied.workload,
        pvc: applied.pvc,
        credentials: server.credentials_state,
        pod: server.pod.map(AsRef::as_ref),
        valkey: server.answer.map(|(_, answer)| answer),
        desired_revision: &applied.desired_revision,
        restart_allowed: applied.restart_allowed,
        live_config,
        initial_data: initial_data_object(node),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    status::compute(node.status.as_ref(), &observed, &now)
}

/// Writes the status (when it changed) and then the role it reports onto the pod.
async fn publish(
    ctx: &Context,
    node: &ValkeyNode,
    pod: Option<&Pod>,
    status: &ValkeyNodeStatus,
) -> Result<(), Error> {
    report::write_status(ctx, node, status).await?;
    label::sync(ctx, pod, status.role).await
}

/// How the node-controller reaches a running server.
struct Login<'a> {
    ip: &'a str,
    credentials: Option<&'a probe::Credentials>,
    trust: Option<&'a plumbing::valkey_tls::Trust>,
}

/// What Valkey answers the node-controller's PING with, over the pod's IP: `None` while no pod
/// runs. Without the credentials the node names, or without the CA its TLS needs, nothing is
/// asked and the answer says why.
async fn ask(
    node: &ValkeyNode,
    pod: Option<&Arc<Pod>>,
    known: &secrets::Read,
    trust: &Option<Result<plumbing::valkey_tls::Trust, String>>,
) -> Option<(String, Answer)> {
    match (pod.and_then(observe::running_ip), trust) {
        (Some(_), Some(Err(why))) => Some((String::new(), Answer::Failed(why.clone()))),
        (Some(ip), _) if known.credentials.is_some() || node.spec.credentials.is_none() => {
            let trust = trust.as_ref().and_then(|t| t.as_ref().ok());
            let port = match node.spec.server {
                NodeServer::Valkey => VALKEY_PORT,
                NodeServer::Sentinel => SENTINEL_PORT,
            };
            let answer = probe::ask(&ip, port, known.credentials.as_ref(), trust).await;
            Some((ip, answer))
        }
        (Some(_), _) => Some((
            String::new(),
            Answer::Failed("no credentials to authenticate with".into()),
        )),
        (None, _) => None,
    }
}

/// A TLS server that does not reload its certificate files by itself (older than Valkey 9.1,
/// or not known yet) is told to at each re-read, so that a renewed certificate is served within
/// a re-read of the kubelet writing it into the pod, with no restart. A server that refuses is
/// logged (it keeps serving the certificate it has) and told again next time.
async fn reload_tls(login: &Login<'_>, server: &probe::Server) {
    if let Err(why) = live::apply::reload_tls(login.ip, login.credentials, login.trust).await {
        tracing::warn!(
            ip = login.ip,
            version = server.version.as_deref().unwrap_or("unknown"),
            "the server did not reload its TLS files: {why}"
        );
    }
}

/// Sets the live settings on the running server unless this process already set exactly these
/// on this server process (its run id).
async fn live_settings(
    ctx: &Context,
    key: &ObjectKey,
    login: &Login<'_>,
    server: &probe::Server,
    live: &std::collections::BTreeMap<String, String>,
) -> LiveSettingsOutcome {
    let fingerprint = server
        .run_id
        .as_deref()
        .map(|run_id| live::apply::fingerprint(run_id, live));
    if fingerprint.is_some() && ctx.live_set(key) == fingerprint {
        return LiveSettingsOutcome::Applied {
            settings: live.len(),
        };
    }
    let outcome = live::apply::set(login.ip, login.credentials, login.trust, live).await;
    if let (LiveSettingsOutcome::Applied { .. }, Some(fingerprint)) = (&outcome, fingerprint) {
        ctx.remember_live_set(key, fingerprint);
    }
    outcome
}

/// On a refused live setting nothing was applied: the conditions about the children stay as
/// the last pass wrote them.
fn keep_conditions_of_untouched_children(
    node: &ValkeyNode,
    status: &mut valkey_api::v1alpha1::ValkeyNodeStatus,
) {
    let previous = node.status.as_ref().and_then(|s| s.conditions.as_deref());
    let (Some(previous), Some(conditions)) = (previous, status.conditions.as_mut()) else {
        return;
    };
    for type_ in [status::WORKLOAD_READY, status::PVC_READY] {
        conditions.retain(|c| c.type_ != type_);
        if let Some(kept) = previous.iter().find(|c| c.type_ == type_) {
            conditions.push(kept.clone());
        }
    }
    status.desired_revision = node
        .status
        .as_ref()
        .and_then(|s| s.desired_revision.clone());
}

/// The object of `spec.initialData`, for the InitialData condition.
fn initial_data_object(node: &ValkeyNode) -> Option<&str> {
    node.spec.initial_data.as_ref().map(|d| d.object.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{NODE, context, node};
    use http::Method;
    use plumbing::Reconciler;

    #[tokio::test]
    async fn a_new_node_gets_its_children_and_a_status_saying_no_pod_yet() {
        let (ctx, mut api) = context();
        let stored = serde_json::to_value(node(NODE)).unwrap_or_default();
        let script = tokio::spawn(async move {
            for (path, reason) in [
                (
                    "/api/v1/namespaces/prod/configmaps/valkey-cache-0-0-config?",
                    "CreatedConfigMap",
                ),
                (
                    "/apis/apps/v1/namespaces/prod/statefulsets/valkey-cache-0-0?",
                    "CreatedStatefulSet",
                ),
            ] {
                let child = api.expect(Method::PATCH, path).await;
                assert!(child.uri.contains("fieldManager=valkey-node-controller"));
                assert_eq!(
                    child.body["metadata"]["ownerReferences"][0]["uid"],
                    "0000-2"
                );
                let mut echoed = child.body.clone();
                echoed["metadata"]["resourceVersion"] = "1".into();
                child.answer(http::StatusCode::OK, &echoed);
                assert_eq!(api.event().await["reason"], reason);
            }
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-0-0/status?",
                )
                .await;
            assert_eq!(status.body["status"]["ready"], false);
            let ready = status.body["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
                .unwrap_or_default();
            assert_eq!(ready["reason"], "PodMissing");
            status.with_status_of(&stored);
            api.done().await;
        });
        let valkey_node = node(NODE);
        let key = ObjectKey::of(&valkey_node);
        let action = ctx
            .reconcile(&valkey_node, &key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(action, Action::requeue(reread::NOT_READY));

        // The node goes: what was applied of its children is forgotten.
        assert_eq!(ctx.remembered_nodes(), 1);
        ctx.forget(&key);
        assert_eq!(ctx.remembered_nodes(), 0);
    }

    /// A watch cache lags behind the API server (seconds, at thousands of nodes): a pass that
    /// comes before the cache has seen the status the last pass wrote must judge against what was
    /// written, not against the older copy, or it writes the same status again (with a condition's
    /// lastTransitionTime moved to now, as if it had flipped twice).
    #[tokio::test]
    async fn a_pass_before_the_cache_has_seen_its_status_write_does_not_write_it_again() {
        let (ctx, mut api) = context();
        let mut stale = node(NODE);
        stale.metadata.resource_version = Some("7".into());
        let stored = serde_json::to_value(&stale).unwrap_or_default();
        let status_path = "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-0-0/status?";
        let script = tokio::spawn(async move {
            let mut status_writes = Vec::new();
            while let Some(request) = api.next(std::time::Duration::from_millis(500)).await {
                if request.uri.starts_with(status_path) {
                    status_writes.push(request.body["status"].clone());
                    request.with_status_of(&stored);
                } else {
                    request.echo();
                }
            }
            status_writes
        });
        let key = ObjectKey::of(&stale);
        // Judged against the stale copy (no status), the second pass would write it again.
        for _ in 0..2 {
            ctx.reconcile(&stale, &key)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let status_writes = script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status_writes.len(), 1, "status written: {status_writes:#?}");

        // Once the cache holds a newer copy of the object, it is the one judged against.
        let mut seen = stale.clone();
        seen.metadata.resource_version = Some("8".into());
        assert_eq!(ctx.as_last_written(&seen).status, None);
    }

    #[test]
    fn a_refused_live_setting_reports_the_children_as_the_last_status_left_them() {
        let fresh = node(NODE);
        let mut served = node(NODE);
        served.status = Some(valkey_api::v1alpha1::ValkeyNodeStatus {
            ready: true,
            desired_revision: Some("wanted".into()),
            ..Default::default()
        });
        // The revision the last pass wanted stays, not the one just built.
        for (node, ready_replicas, desired_revision) in [(fresh, 0, "built"), (served, 1, "wanted")]
        {
            assert_eq!(
                AppliedChildren::untouched(&node, "built"),
                AppliedChildren {
                    workload: WorkloadState::Present { ready_replicas },
                    pvc: None,
                    desired_revision: desired_revision.into(),
                    restart_allowed: false,
                }
            );
        }
    }

    #[tokio::test]
    async fn a_spec_the_build_refuses_is_a_condition_and_one_warning() {
        let (ctx, mut api) = context();
        let bad = node(&NODE.replace("{cluster-enabled: \"yes\"}", "{\"Not A Directive\": \"x\"}"));
        let stored = serde_json::to_value(&bad).unwrap_or_default();
        let script = tokio::spawn(async move {
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-0-0/status?",
                )
                .await;
            let ready = status.body["status"]["conditions"][0].clone();
            assert_eq!(
                (ready["type"].as_str(), ready["reason"].as_str()),
                (Some("Ready"), Some("InvalidConfig"))
            );
            status.with_status_of(&stored);
            let event = api.event().await;
            assert_eq!(
                (event["type"].as_str(), event["reason"].as_str()),
                (Some("Warning"), Some("InvalidConfig"))
            );
            api.done().await;
        });
        let action = ctx
            .reconcile(&bad, &ObjectKey::of(&bad))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            action,
            Action::await_change(),
            "nothing to do until the spec changes"
        );
    }
}
