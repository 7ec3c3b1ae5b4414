//! One pass over a ValkeyNode, stage by stage: build (pure, [`crate::render`]) → secrets (the
//! credentials to PING with) → apply (ConfigMap, PVC, workload; only what changed; the PVC
//! through [`super::volume`]) → observe (the children from the caches, and Valkey itself) →
//! report (status and Events) → label (the pod's role). Each stage is a module of its own.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use plumbing::ObjectKey;
use valkey_api::v1alpha1::ValkeyNode;

use super::apply::{self, invalid};
use super::context::Context;
use super::error::Error;
use super::{label, observe, report, secrets, volume};
use crate::live::{self, apply::Outcome};
use crate::names::ChildNames;
use crate::probe::{self, Answer};
use crate::render::{self, Workload};
use crate::status::{self, Observed, WorkloadState};

/// How often a ready node is re-read: Valkey announces a failover through no Kubernetes event.
const REREAD_READY: Duration = Duration::from_secs(10);
/// How often a node that is not ready yet is looked at again (watches wake it sooner).
const REREAD_NOT_READY: Duration = Duration::from_secs(5);

pub async fn pass(ctx: &Context, node: &ValkeyNode, key: &ObjectKey) -> Result<Action, Error> {
    let namespace = key.namespace();
    let name = node.name_any();
    let names = ChildNames::of(&name);

    let mut children = match render::build_with(node, &ctx.render) {
        Ok(children) => children,
        Err(e) => {
            report::bad_spec(node, ctx, e.reason(), &e.to_string()).await?;
            return Ok(Action::await_change());
        }
    };

    let mut known = ctx.credentials.read(node, &ctx.stores.secrets).await?;
    let trust = secrets::read_trust(node, &ctx.stores.secrets).await?;

    let stores = &ctx.stores;
    let pods = stores.pods.state();

    // Valkey first: the live settings go to the running server before anything else is applied,
    // so that a value Valkey refuses changes nothing else (not even valkey.conf, from which a
    // restarted pod would fail to start). A pod on an older revision is not sent them: it is to
    // be replaced, and its server may be an older Valkey that refuses the newer one's values
    // (Valkey 9's shutdown-on-sigterm failover, on an upgrade from 8), which would hold the roll
    // that replaces it forever.
    let pod = observe::choose_pod(&pods, namespace, &name, &children.revision);
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
    let secrets::Read {
        state: credentials_state,
        credentials,
        ..
    } = known;
    let trust = trust.and_then(Result::ok);
    let live_outcome = match &answer {
        Some((ip, Answer::Pong { server, .. })) => {
            let login = Login {
                ip,
                credentials: credentials.as_ref(),
                trust: trust.as_ref(),
            };
            let running = pod.and_then(|p| status::pod_revision(p));
            let outcome = match live::apply::awaiting_restart(running, &children.revision) {
                Some(waiting) => waiting,
                None => live_settings(ctx, key, &login, server, &children.live).await,
            };
            if trust.is_some() && !children.live.contains_key(live::TLS_AUTO_RELOAD) {
                reload_tls(&login, server).await;
            }
            Some(outcome)
        }
        _ => None,
    };
    if let Some(refused @ Outcome::Refused { .. }) = &live_outcome {
        let observed = Observed {
            generation: node.meta().generation,
            workload_name: &names.workload,
            workload: WorkloadState::Present {
                ready_replicas: i32::from(node.status.as_ref().is_some_and(|s| s.ready)),
            },
            pvc: None,
            credentials: credentials_state,
            pod: pod.map(AsRef::as_ref),
            valkey: answer.map(|(_, a)| a),
            desired_revision: node
                .status
                .as_ref()
                .and_then(|s| s.desired_revision.as_deref())
                .unwrap_or(&children.revision),
            restart_allowed: false,
            live_config: Some(refused.clone()),
            initial_data: initial_data_object(node),
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let mut new_status = status::compute(node.status.as_ref(), &observed, &now);
        keep_conditions_of_untouched_children(node, &mut new_status);
        report::write_status(ctx, node, &new_status).await?;
        label::sync(ctx, pod.map(AsRef::as_ref), new_status.role).await?;
        return Ok(Action::requeue(REREAD_NOT_READY));
    }

    let live_config = stores
        .config_maps
        .get(&ObjectRef::new(&names.config_map).within(namespace));
    render::keep_held_configs(
        &mut children.config_map,
        live_config.as_deref(),
        observe::rolled_out(&pods, namespace, &name, &children.revision),
    );
    apply::child(ctx, node, key, &children.config_map, &stores.config_maps).await?;
    // A claim the API refuses to change (an immutable field, a class that cannot grow) is said
    // in the status, and the node runs on the volume that is.
    let pvc_state = match &children.pvc {
        None => None,
        Some(pvc) => Some(volume::sync(ctx, node, key, pvc).await?),
    };
    let applied = match &children.workload {
        Workload::StatefulSet(sts) => {
            apply::child(ctx, node, key, sts.as_ref(), &stores.stateful_sets).await
        }
        Workload::Deployment(deploy) => {
            apply::child(ctx, node, key, deploy.as_ref(), &stores.deployments).await
        }
    };
    let workload_state = match invalid(applied)? {
        Some(why) => WorkloadState::Rejected(format!("The API refused {}: {why}", names.workload)),
        None => match &children.workload {
            Workload::StatefulSet(_) => observe::ready_replicas(
                &stores.stateful_sets,
                namespace,
                &names.workload,
                |s: &StatefulSet| s.status.as_ref().and_then(|s| s.ready_replicas),
            ),
            Workload::Deployment(_) => observe::ready_replicas(
                &stores.deployments,
                namespace,
                &names.workload,
                |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas),
            ),
        },
    };

    let observed = Observed {
        generation: node.meta().generation,
        workload_name: &names.workload,
        workload: workload_state,
        pvc: pvc_state,
        credentials: credentials_state,
        pod: pod.map(AsRef::as_ref),
        valkey: answer.map(|(_, a)| a),
        desired_revision: &children.revision,
        restart_allowed: render::restart_allowed(
            node.spec.allowed_revision.as_deref(),
            &children.revision,
        ),
        live_config: live_outcome,
        initial_data: initial_data_object(node),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let new_status = status::compute(node.status.as_ref(), &observed, &now);
    report::write_status(ctx, node, &new_status).await?;
    label::sync(ctx, pod.map(AsRef::as_ref), new_status.role).await?;

    Ok(Action::requeue(if new_status.ready {
        REREAD_READY
    } else {
        REREAD_NOT_READY
    }))
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
    pod: Option<&std::sync::Arc<k8s_openapi::api::core::v1::Pod>>,
    known: &secrets::Read,
    trust: &Option<Result<plumbing::valkey_tls::Trust, String>>,
) -> Option<(String, Answer)> {
    match (pod.and_then(observe::running_ip), trust) {
        (Some(_), Some(Err(why))) => Some((String::new(), Answer::Failed(why.clone()))),
        (Some(ip), _) if known.credentials.is_some() || node.spec.credentials.is_none() => {
            let trust = trust.as_ref().and_then(|t| t.as_ref().ok());
            let answer = probe::ask(&ip, known.credentials.as_ref(), trust).await;
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
) -> Outcome {
    let fingerprint = server
        .run_id
        .as_deref()
        .map(|run_id| live::apply::fingerprint(run_id, live));
    if fingerprint.is_some() && ctx.live_set(key) == fingerprint {
        return Outcome::Applied {
            settings: live.len(),
        };
    }
    let outcome = live::apply::set(login.ip, login.credentials, login.trust, live).await;
    if let (Outcome::Applied { .. }, Some(fingerprint)) = (&outcome, fingerprint) {
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
        assert_eq!(action, Action::requeue(REREAD_NOT_READY));

        // The node goes: what was applied of its children is forgotten.
        assert_eq!(ctx.remembered_nodes(), 1);
        ctx.forget(&key);
        assert_eq!(ctx.remembered_nodes(), 0);
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
