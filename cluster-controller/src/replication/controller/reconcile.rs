//! One pass over a ValkeyReplication, stage by stage: claim (its Lease) → secrets (the shared
//! stage) → observe (its ValkeyNodes from the cache) → desired (every member's ValkeyNode) →
//! apply (member nodes) → access (every member's users, live) → the engine (observe Valkey,
//! decide) → record a chosen primary → act (one Valkey command or Kubernetes action) → the
//! Services → report (Events and status).

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use plumbing::ObjectKey;
use valkey_api::contract::OBSERVE_ANNOTATION;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use super::context::Context;
use super::status::Outcome;
use super::{desired, observe, report, services};
use crate::controller::apply::{allow_restart, apply_members, delete_node};
use crate::controller::error::{Error, api_error};
use crate::controller::labels::FIELD_MANAGER;
use crate::controller::reconcile::{after_step, claim_for};
use crate::controller::secrets::{self, Parent, Tools};
use crate::controller::status::Problem;
use crate::controller::{access, members, monitoring, tls};
use crate::engine::Outcome as StepOutcome;
use crate::replication::engine::{Action, Decision, decide, health};

/// How soon a replication whose Secrets (its own, or its TLS certificate) are missing is looked
/// at again.
const RETRY_AUTH_PROBLEM: Duration = Duration::from_secs(15);
/// The field manager of the annotation that asks the node-controller to look at once.
const OBSERVE_MANAGER: &str = "valkey-replication-controller-observe";

/// The Lease a cluster-controller holds while it drives the replication `name`.
pub fn claim_name(name: &str) -> String {
    format!("{name}-replication-controller")
}

/// Reports what a person must fix before the pass can go on (a Secret, a TLS setting), keeping the
/// recorded primary and the password Secret's name, and looks again soon.
async fn stop_for(
    ctx: &Context,
    replication: &ValkeyReplication,
    problem: Problem,
    recorded: Option<&str>,
) -> Result<Requeue, Error> {
    let outcome = Outcome::Problem {
        problem,
        health: None,
    };
    let password = replication
        .status
        .as_ref()
        .and_then(|s| s.password_secret_name.as_deref());
    let new = report::status_of(replication, &outcome, recorded, password);
    report::write_status(ctx, replication, new).await?;
    Ok(Requeue::requeue(RETRY_AUTH_PROBLEM))
}

pub async fn pass(
    ctx: &Context,
    replication: &ValkeyReplication,
    key: &ObjectKey,
) -> Result<Requeue, Error> {
    let memory = ctx.memory(key);
    let lease = claim_name(&replication.name_any());
    if let Some(requeue) = claim_for(&ctx.claims, &ctx.events, replication, lease, &memory).await? {
        return Ok(requeue);
    }
    let tools = Tools {
        client: &ctx.client,
        events: &ctx.events,
        rotation_grace: ctx.settings.password_rotation_grace,
    };
    let status = replication.status.as_ref();
    let parent = Parent {
        object: replication,
        label: REPLICATION_LABEL,
        auth: &replication.spec.auth,
        // A restarted member of a replication starts parked (a replica of nothing): it takes no
        // write before the engine has judged its data.
        fence_clients: false,
        reason: status.and_then(|s| s.reason.as_deref()),
        message: status.and_then(|s| s.message.as_deref()),
    };
    let recorded = status.and_then(|s| s.primary.clone());
    let auth = match secrets::ensure_for(&tools, &parent, &memory).await? {
        Ok(auth) => auth,
        Err(problem) => return stop_for(ctx, replication, problem, recorded.as_deref()).await,
    };

    // TLS as for a cluster: the same Secrets, certificate and CA (see `controller::tls`).
    let served = match tls::unsupported(&replication.spec.tls) {
        Some(problem) => Err(problem),
        None => {
            tls::ensure_for(
                &tools,
                &parent,
                &replication.spec.tls,
                tls::DEFAULT_CERTIFICATE_LIFETIME,
            )
            .await?
        }
    };
    let served = match served {
        Ok(served) => served,
        Err(problem) => return stop_for(ctx, replication, problem, recorded.as_deref()).await,
    };
    let mut node_auth = auth.node.clone();
    node_auth.tls = served.as_ref().map(|s| s.node.clone());
    let trust = served.as_ref().map(|s| &s.trust);

    let existing = observe::member_nodes(&ctx.nodes, replication);
    let desired = desired::members(replication, &node_auth);
    let api: Api<ValkeyNode> = Api::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    );
    // Before the first primary is chosen there is no data to protect: no restart gate.
    apply_members(
        &api,
        &ctx.events,
        replication,
        &desired,
        &existing,
        recorded.is_none(),
    )
    .await?;

    let members = observe::engine_members(&existing);
    let engine = ctx.engine(key, &auth.credentials, trust);
    let refused = access::sync(&memory, engine.client(), &auth, &members, trust).await;
    let spec = desired::spec(replication);
    let observed = engine.observe(&members, spec.fence_user.as_deref()).await;
    let decision = decide(&spec, &members, recorded.as_deref(), &observed);
    let health = health(&spec, &members, recorded.as_deref(), &observed);

    // The primary after this pass: the one a promotion chooses, else the one the engine sees.
    let primary = match decision.action() {
        Some(Action::Promote { on }) => Some(on.member.clone()),
        _ => health.primary.clone(),
    };
    let password = auth.password_secret.as_deref();
    let mut current = replication.clone();
    if let Some(Action::Promote { .. }) = decision.action()
        && primary != recorded
    {
        // Recorded before the command runs: a controller that dies between the two finds the
        // member it chose, never an unrecorded primary it might take for an old one.
        let outcome = Outcome::Decided {
            decision: &decision,
            health: &health,
        };
        let intent = report::status_of(&current, &outcome, primary.as_deref(), password);
        current = report::write_status(ctx, &current, intent).await?;
    }

    let result = match decision.action() {
        None => None,
        Some(action @ (Action::AllowRestart { .. } | Action::DeleteMember { .. })) => {
            kubernetes_action(&api, action, &desired, &existing, &members).await?;
            Some(Ok(StepOutcome::Delegated))
        }
        Some(action) => Some(engine.execute(action).await),
    };
    poke_changed_roles(&api, &decision, recorded.as_deref(), primary.as_deref()).await;
    apply_services(ctx, replication, primary.as_deref()).await?;
    // The budget serves drains, not the replication itself: a failure to apply it is logged and
    // the pass goes on.
    if let Err(error) = apply_budget(ctx, replication, key).await {
        tracing::warn!(%error, "the disruption budget could not be applied");
    }
    if let Some(parent) = monitoring::Parent::of(replication, "replication", REPLICATION_LABEL) {
        let desired = monitoring::desired(&parent, &replication.spec.metrics);
        let monitored =
            monitoring::ensure(&ctx.client, &ctx.pod_monitors, &parent, desired, &memory).await;
        if let Err(error) = monitored {
            tracing::warn!(%error, "the PodMonitor could not be applied");
        }
    }

    let failed = match (&result, decision.action()) {
        (Some(Err(error)), Some(action)) => {
            Some((action as &(dyn std::fmt::Display + Sync), error))
        }
        _ => None,
    };
    let requeue = match &decision {
        Decision::Act { .. } => Duration::from_millis(500),
        Decision::Wait { .. } => Duration::from_secs(1),
        Decision::Blocked { .. } => Duration::from_secs(5),
        Decision::Steady => Duration::from_secs(5),
    };
    let step_failed = failed.is_some();
    let (requeue, failing) = after_step(&ctx.action_failures, key, failed, requeue);
    report::decision_events(ctx, &current, &decision, step_failed).await;

    let stuck = match &decision {
        Decision::Steady => None,
        _ => members::stuck_member(existing.iter().map(AsRef::as_ref)),
    };
    let refused_config = members::refused_config(existing.iter().map(AsRef::as_ref));
    let outcome = match stuck.or(refused_config).or(refused).or(failing) {
        Some(problem) => Outcome::Problem {
            problem,
            health: Some(&health),
        },
        None => Outcome::Decided {
            decision: &decision,
            health: &health,
        },
    };
    let new = report::status_of(&current, &outcome, primary.as_deref(), password);
    report::write_status(ctx, &current, new).await?;
    Ok(Requeue::requeue(requeue))
}

async fn kubernetes_action(
    api: &Api<ValkeyNode>,
    action: &Action,
    desired: &[crate::controller::desired::DesiredMember],
    existing: &[std::sync::Arc<ValkeyNode>],
    members: &[crate::engine::Member],
) -> Result<(), Error> {
    match action {
        Action::AllowRestart { member } => {
            allow_restart(api, desired, existing, members, member).await
        }
        Action::DeleteMember { member } => delete_node(api, member).await,
        _ => Ok(()),
    }
}

/// The members whose role this pass changed, or found changed: the node-controller is asked to
/// look at once, so their pods' role labels (and the Services) follow within a pass.
async fn poke_changed_roles(
    api: &Api<ValkeyNode>,
    decision: &Decision,
    recorded: Option<&str>,
    primary: Option<&str>,
) {
    let mut changed: Vec<&str> = match decision.action() {
        Some(Action::Promote { on }) | Some(Action::Follow { on, .. }) => vec![on.member.as_str()],
        _ => Vec::new(),
    };
    if recorded != primary {
        changed.extend(recorded);
        changed.extend(primary);
    }
    changed.sort_unstable();
    changed.dedup();
    let stamp = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {OBSERVE_ANNOTATION: stamp}}});
    let params = PatchParams {
        field_manager: Some(OBSERVE_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    for member in changed {
        // Best effort: without it the node-controller still re-reads within seconds.
        if let Err(error) = api.patch(member, &params, &Patch::Merge(&patch)).await {
            tracing::debug!(%member, %error, "could not ask the node-controller to look");
        }
    }
}

/// The PodDisruptionBudget, applied when it changed since this process last sent it, and every
/// few minutes in case someone edited or deleted it.
async fn apply_budget(
    ctx: &Context,
    replication: &ValkeyReplication,
    key: &ObjectKey,
) -> Result<(), Error> {
    let Some(budget) = services::budget(replication) else {
        return Ok(());
    };
    let fingerprint = serde_json::to_string(&budget).unwrap_or_default();
    if !ctx.budgets.outdated(key, &fingerprint) {
        return Ok(());
    }
    let name = budget.name_any();
    Api::<PodDisruptionBudget>::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    )
    .patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&budget),
    )
    .await
    .map_err(api_error(format!("applying PodDisruptionBudget {name}")))?;
    ctx.budgets.remember(key, fingerprint);
    Ok(())
}

/// The read/write and read-only Services, applied when they differ from what the cache holds.
async fn apply_services(
    ctx: &Context,
    replication: &ValkeyReplication,
    primary: Option<&str>,
) -> Result<(), Error> {
    let Some(wanted) = services::services(replication, primary) else {
        return Ok(());
    };
    let api: Api<Service> = Api::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    );
    for want in wanted {
        let name = want.name_any();
        if observe::service(&ctx.services, replication, &name)
            .is_some_and(|current| services::as_wanted(&current, &want))
        {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&want),
        )
        .await
        .map_err(api_error(format!("applying Service {name}")))?;
    }
    Ok(())
}
