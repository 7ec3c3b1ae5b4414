//! One pass over a ValkeyReplication, stage by stage: claim (its Lease) → validate (the spec's
//! errors, before anything is applied) → prepare: the restore's plan (`spec.restoreFrom`,
//! [`crate::parent::restoring`]) → secrets (the shared stage) → TLS → desired (every member's
//! ValkeyNode, the first given its snapshot in a restore) → apply (member nodes) → then access
//! (every member's users, live) → the engine (observe Valkey, decide; the restore's end and
//! append-only file after it) → record a chosen primary → act (one Valkey command or Kubernetes
//! action) → the Services → report (Events and status).
//!
//! When the spec is invalid or a stage of `prepare` cannot go on (a Secret missing, the API
//! failing), the engine still runs its data-safety rules ([`protect`]), and the Services still
//! follow the primary.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use plumbing::{ObjectKey, Reconciler};
use valkey_api::contract::OBSERVE_ANNOTATION;
use valkey_api::contract::replication::REPLICATION_LABEL;
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use super::context::Context;

/// Time each command of the Sentinels' user sync may take.
const SENTINEL_SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
use super::status::PassConclusion;
use super::{desired, observe, report, restore, sentinels, services, validate};
use crate::access::rights::SENTINEL_USER;
use crate::client::RedisClient;
use crate::engine::{ActionOutcome, Carried, Pass, Scope};
use crate::parent::apply::{allow_restart, apply_members, delete_node};
use crate::parent::context::ParentMemory;
use crate::parent::error::{Error, api_error};
use crate::parent::labels::FIELD_MANAGER;
use crate::parent::pass::{after_step, claim_for, reported_generation, requeue_after};
use crate::parent::secrets::{self, Parent, Tools};
use crate::parent::stop::{Stop, stopped};
use crate::parent::{access, external, members, monitoring, tls};
use crate::replication::engine::sentinel::Login;
use crate::replication::engine::{Action, Asked, Decision, Engine, ReplicationMode, Spec};

/// The field manager of the annotation that asks the node-controller to look at once.
const OBSERVE_MANAGER: &str = "valkey-replication-controller-observe";

/// The Lease a cluster-controller holds while it drives the replication `name`.
pub fn claim_name(name: &str) -> String {
    format!("{name}-replication-controller")
}

/// What `prepare` gives the rest of a pass that follows the spec.
struct Prepared {
    auth: secrets::Auth,
    served: Option<tls::Served>,
    desired: Vec<crate::parent::node::DesiredMember>,
    /// The member that loads the restored backup and must become the first primary, while the
    /// restore runs (`spec.restoreFrom`, not yet served).
    restored: Option<String>,
    /// A member's ValkeyNode was created or its spec changed: the members this pass observed
    /// (`existing`) are as they were before, so its status cannot speak for the current
    /// generation ([`reported_generation`]).
    members_changed: bool,
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
    let recorded = recorded_primary(replication, &memory);
    let existing = observe::member_nodes(&ctx.nodes, replication);
    if let Err(problem) = validate::spec(replication) {
        let stop = Stop::problem(problem);
        return protect(ctx, replication, key, &memory, stop, &existing, recorded).await;
    }
    let api: Api<ValkeyNode> = Api::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    );
    let prepared = prepare(
        ctx,
        replication,
        key,
        &memory,
        &existing,
        &api,
        recorded.is_none(),
    );
    let Prepared {
        auth,
        served,
        desired,
        restored,
        members_changed,
    } = match prepared.await {
        Ok(prepared) => prepared,
        Err(stop) => {
            return protect(ctx, replication, key, &memory, stop, &existing, recorded).await;
        }
    };
    ctx.stage_failures.succeeded(key);
    let trust = served.as_ref().map(|s| &s.trust);

    let members = observe::engine_members(&existing);
    let engine = ctx.engine(key, &auth.credentials, trust);
    let refused = access::sync(&memory, engine.client(), &auth, &members, trust).await;
    let mut spec = Spec {
        restored,
        ..desired::spec(replication)
    };
    if let Some(watch) = spec.sentinel.as_mut() {
        // Sentinel logs in to the servers and its peers as the `sentinel` user.
        watch.login = Some(Login {
            user: SENTINEL_USER.to_owned(),
            password: auth.sentinel_password.expose().to_owned(),
        });
    }
    let sentinels = sentinel_addresses(ctx, replication, &spec);
    if !sentinels.is_empty() {
        // A changed clients' password reaches the running Sentinels (they read their file at
        // start only); one that missed it is tried again next pass.
        let addresses: Vec<std::net::SocketAddr> = sentinels.iter().map(|(_, a)| *a).collect();
        memory
            .sentinel_users
            .sync(
                engine.client(),
                &addresses,
                &auth.users,
                SENTINEL_SYNC_TIMEOUT,
            )
            .await;
    }
    let asked = Asked {
        spec,
        recorded_primary: recorded.clone(),
        sentinels,
    };
    let password = auth.password_secret.as_deref();
    let generation = reported_generation(
        replication.metadata.generation,
        replication
            .status
            .as_ref()
            .and_then(|s| s.observed_generation),
        members_changed,
    );
    let Stepped {
        pass,
        primary,
        current,
    } = look_and_step(
        ctx,
        &memory,
        &engine,
        Scope::Everything,
        &asked,
        &members,
        replication.clone(),
        generation,
        password,
    )
    .await?;
    let (decision, health) = (&pass.decision, &pass.health);
    restore::after_pass(
        ctx,
        replication,
        &memory,
        engine.client(),
        recorded.as_deref(),
        &pass.observation,
        &existing,
    )
    .await;
    let result = match decision.action() {
        Some(action) if action.is_kubernetes() => {
            kubernetes_action(&api, action, &desired, &existing, &members).await?;
            Some(Ok(ActionOutcome::Delegated))
        }
        _ => pass.outcome,
    };
    poke_changed_roles(&api, decision, recorded.as_deref(), primary.as_deref()).await;
    apply_services(ctx, replication, key, primary.as_deref()).await?;
    // The budget serves drains, not the replication itself: a failure to apply it is logged and
    // the pass goes on.
    // No member may go while a wanted replica does not hold the primary's data (or the primary
    // is unknown: the replicas may hold the only copies).
    let held = health.primary.is_none() || health.replicas_in_step < health.replicas_wanted;
    if let Err(error) = apply_budget(ctx, replication, key, held).await {
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
    let requeue = match decision {
        Decision::Act { .. } => Duration::from_millis(500),
        Decision::Wait { .. } => Duration::from_secs(1),
        Decision::Blocked { .. } => Duration::from_secs(5),
        Decision::Steady(()) => Duration::from_secs(5),
    };
    let step_failed = failed.is_some();
    let (requeue, failing) = after_step(&ctx.action_failures, key, failed, requeue);
    report::decision_events(ctx, &current, decision, step_failed).await;

    let stuck = match decision {
        Decision::Steady(()) => None,
        _ => members::stuck_member(existing.iter().map(AsRef::as_ref)),
    };
    let refused_config = members::refused_config(existing.iter().map(AsRef::as_ref));
    let conclusion = match stuck.or(refused_config).or(refused).or(failing) {
        Some(problem) => PassConclusion::Problem {
            problem,
            health: Some(health),
        },
        None => PassConclusion::Decided { decision, health },
    };
    let new = report::status_of(
        &current,
        generation,
        &conclusion,
        primary.as_deref(),
        password,
    );
    report::write_status(ctx, &memory, &current, new).await?;
    Ok(Requeue::requeue(requeue_after(requeue, members_changed)))
}

/// The stages that bring Kubernetes in step with the spec before the engine runs: Secrets, TLS
/// and the member nodes (without restart gates before the first primary is chosen: there is no
/// data to protect yet). The first that cannot go on stops them.
async fn prepare(
    ctx: &Context,
    replication: &ValkeyReplication,
    key: &ObjectKey,
    memory: &ParentMemory,
    existing: &[std::sync::Arc<ValkeyNode>],
    api: &Api<ValkeyNode>,
    forming: bool,
) -> Result<Prepared, Stop> {
    let failures = &ctx.stage_failures;
    // Before anything is made: a restore that cannot be done creates no member empty.
    let restoring = restore::restoring(replication);
    let plan = crate::parent::restoring::plan(&ctx.client, failures, &restoring, key, memory);
    let plan = plan.await?;
    let plan = plan.as_deref().map(Vec::as_slice);
    let tools = Tools {
        client: &ctx.client,
        secrets: &ctx.secrets,
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
        sentinel: super::sentinels::watch(replication).is_some(),
        reason: status.and_then(|s| s.reason.as_deref()),
        message: status.and_then(|s| s.message.as_deref()),
    };
    let auth = stopped(
        secrets::ensure_for(&tools, &parent, memory).await,
        failures,
        key,
    )?;
    // TLS as for a cluster: the same Secrets, certificate and CA (see `parent::tls`); a setting
    // this version does not serve was refused by the validation stage.
    let served = tls::ensure_for(
        &tools,
        &parent,
        &replication.spec.tls,
        tls::DEFAULT_CERTIFICATE_LIFETIME,
        memory,
        &external_names(ctx, replication),
    )
    .await;
    let served = stopped(served, failures, key)?;
    if let Some(served) = &served {
        memory.remember_trust(&served.trust);
    }
    let mut node_auth = auth.node.clone();
    node_auth.tls = served.as_ref().map(|s| s.node.clone());
    let mut desired = desired::members(replication, &node_auth);
    crate::parent::restoring::shape_members(&restoring, plan, memory, &mut desired, existing);
    let members_changed = apply_members(api, &ctx.events, replication, &desired, existing, forming)
        .await
        .map_err(|error| Stop::error(error, failures, key))?;
    apply_sentinels(ctx, replication, api, &node_auth)
        .await
        .map_err(|error| Stop::error(error, failures, key))?;
    Ok(Prepared {
        auth,
        served,
        desired,
        restored: restore::restored_member(replication, plan),
        members_changed,
    })
}

/// The Sentinels' nodes as `spec.sentinel` wants them, and those it no longer wants deleted.
/// A new spec restarts them one at a time (each gated at its running revision, and released by
/// [`sentinels::next_to_restart`] once the replication is Ready again): a restarted Sentinel
/// starts clean and is told again what to watch by the engine.
async fn apply_sentinels(
    ctx: &Context,
    replication: &ValkeyReplication,
    api: &Api<ValkeyNode>,
    auth: &crate::parent::node::NodeAuth,
) -> Result<(), Error> {
    let existing = observe::sentinel_nodes(&ctx.nodes, replication);
    let wanted = sentinels::desired(replication, auth);
    apply_members(api, &ctx.events, replication, &wanted, &existing, false).await?;
    let settled = replication.status.as_ref().is_some_and(|s| {
        s.state == Some(valkey_api::v1alpha1::ReplicationState::Ready)
            && s.observed_generation == replication.metadata.generation
    });
    if let Some((name, revision)) = sentinels::next_to_restart(&existing, settled)
        && let Some(sentinel) = wanted.iter().find(|w| w.name == name)
    {
        crate::parent::apply::apply_node(api, &sentinel.gated(Some(revision))).await?;
    }
    for gone in existing
        .iter()
        .filter(|n| !wanted.iter().any(|w| w.name == n.name_any()))
    {
        delete_node(api, &gone.name_any()).await?;
    }
    Ok(())
}

/// With Sentinel on, its Sentinels by node name, at their pod IPs and the Sentinel port (none
/// with Sentinel off).
fn sentinel_addresses(
    ctx: &Context,
    replication: &ValkeyReplication,
    spec: &Spec,
) -> Vec<(String, std::net::SocketAddr)> {
    if spec.sentinel.is_none() {
        return Vec::new();
    }
    observe::sentinel_addresses(&observe::sentinel_nodes(&ctx.nodes, replication))
}

/// The primary the last pass recorded: this controller's own last write of `status.primary` when
/// it made one (the cache may not have seen it yet, and a pass that read the older record would
/// take the primary it just promoted for a stranger and promote another), else the status as
/// cached.
fn recorded_primary(replication: &ValkeyReplication, memory: &ParentMemory) -> Option<String> {
    memory
        .primary_written()
        .or_else(|| replication.status.as_ref().and_then(|s| s.primary.clone()))
}

/// A pass that could not get in step with the spec: the engine applies only the rules that
/// protect data ([`Scope::Safety`]: a lost or emptied primary replaced, the primary admitted,
/// members told to follow it), with the credentials and CA last known; the Services follow the
/// primary, and the status says what stopped the rest.
async fn protect(
    ctx: &Context,
    replication: &ValkeyReplication,
    key: &ObjectKey,
    memory: &ParentMemory,
    stop: Stop,
    existing: &[std::sync::Arc<ValkeyNode>],
    recorded: Option<String>,
) -> Result<Requeue, Error> {
    stop.announce(&ctx.metrics, super::CONTROLLER);
    let password = replication
        .status
        .as_ref()
        .and_then(|s| s.password_secret_name.clone());
    let mut requeue = stop.requeue;
    let mut current = replication.clone();
    let mut primary = recorded.clone();
    let mut health = None;
    if let Some((credentials, trust)) = memory.last_login(replication.spec.tls.enabled) {
        let engine = ctx.engine(key, &credentials, trust.as_ref());
        let members = observe::engine_members(existing);
        let spec = desired::spec(replication);
        let asked = Asked {
            sentinels: sentinel_addresses(ctx, replication, &spec),
            spec,
            recorded_primary: recorded.clone(),
        };
        // Recorded before the command runs, as in a full pass.
        let stepped = look_and_step(
            ctx,
            memory,
            &engine,
            Scope::Safety,
            &asked,
            &members,
            current,
            replication.metadata.generation,
            password.as_deref(),
        )
        .await?;
        let Stepped {
            pass,
            primary: chosen,
            current: written,
        } = stepped;
        (primary, current) = (chosen, written);
        let decision = &pass.decision;
        let result = match decision.action() {
            Some(action) if !action.is_kubernetes() => pass.outcome,
            _ => None,
        };
        let api: Api<ValkeyNode> = Api::namespaced(
            ctx.client.clone(),
            &replication.namespace().unwrap_or_default(),
        );
        poke_changed_roles(&api, decision, recorded.as_deref(), primary.as_deref()).await;
        report::decision_events(ctx, &current, decision, matches!(result, Some(Err(_)))).await;
        if decision.action().is_some() {
            requeue = requeue.min(Duration::from_millis(500));
        }
        health = Some(pass.health);
    }
    // The Services follow the primary whatever else fails: a client must never reach an old one.
    if let Err(error) = apply_services(ctx, replication, key, primary.as_deref()).await {
        tracing::warn!(%error, "the Services could not be applied");
    }
    if let Some(problem) = stop.problem {
        let conclusion = PassConclusion::Problem {
            problem,
            health: health.as_ref(),
        };
        let new = report::status_of(
            &current,
            replication.metadata.generation,
            &conclusion,
            primary.as_deref(),
            password.as_deref(),
        );
        report::write_status(ctx, memory, &current, new).await?;
    }
    Ok(Requeue::requeue(requeue))
}

/// What the engine's look and step came to.
struct Stepped {
    pass: Pass<ReplicationMode>,
    /// The primary after this pass: the one a promotion chooses, else the one the engine sees.
    primary: Option<String>,
    /// The object as last written (with the status that records a new primary).
    current: ValkeyReplication,
}

/// The engine's look in `scope` and its Valkey step. A promotion is the step the Kubernetes side
/// records first ([`crate::engine::Carrier::ValkeyOnceRecorded`]): the new primary is written
/// to the status before the command that makes it one runs, so a controller that dies between
/// the two finds the member it chose, never an unrecorded primary it might take for an old one.
#[allow(clippy::too_many_arguments)]
async fn look_and_step(
    ctx: &Context,
    memory: &ParentMemory,
    engine: &Engine<RedisClient>,
    scope: Scope,
    asked: &Asked,
    members: &[crate::engine::Member],
    mut current: ValkeyReplication,
    generation: Option<i64>,
    password: Option<&str>,
) -> Result<Stepped, Error> {
    let mut pass = engine.pass_in(scope, asked, members).await;
    let promoted = match pass.decision.action() {
        Some(Action::Promote { on }) => Some(on.member.clone()),
        _ => None,
    };
    let primary = promoted.clone().or_else(|| pass.health.primary.clone());
    if promoted.is_some() {
        if primary != asked.recorded_primary {
            let conclusion = PassConclusion::Decided {
                decision: &pass.decision,
                health: &pass.health,
            };
            let intent = report::status_of(
                &current,
                generation,
                &conclusion,
                primary.as_deref(),
                password,
            );
            current = report::write_status(ctx, memory, &current, intent).await?;
        }
        pass.outcome = Some(engine.act(&pass.decision).await);
    }
    Ok(Stepped {
        pass,
        primary,
        current,
    })
}

async fn kubernetes_action(
    api: &Api<ValkeyNode>,
    action: &Action,
    desired: &[crate::parent::node::DesiredMember],
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
    held: bool,
) -> Result<(), Error> {
    let Some(budget) = services::budget(replication, held) else {
        return Ok(());
    };
    ctx.applier
        .apply(&ctx.client, key, &ctx.budgets, &budget)
        .await?;
    Ok(())
}

/// What an operator-issued certificate names for clients outside: the external Services'
/// addresses and `externalAccess.tlsNames`.
fn external_names(ctx: &Context, replication: &ValkeyReplication) -> Vec<String> {
    let services = observe::external_services(&ctx.services, replication)
        .into_iter()
        .filter_map(|s| Some((s.metadata.name.clone()?, (*s).clone())))
        .collect();
    external::certificate_names(
        replication.spec.external_access.as_ref(),
        &services,
        &observe::member_nodes(&ctx.nodes, replication),
    )
}

/// The read/write and read-only Services, applied when they differ from what the cache holds.
async fn apply_services(
    ctx: &Context,
    replication: &ValkeyReplication,
    key: &ObjectKey,
    primary: Option<&str>,
) -> Result<(), Error> {
    let Some(mut wanted) = services::services(replication, primary) else {
        return Ok(());
    };
    wanted.extend(sentinels::service(replication));
    let api: Api<Service> = Api::namespaced(
        ctx.client.clone(),
        &replication.namespace().unwrap_or_default(),
    );
    for want in &wanted {
        let name = want.name_any();
        if observe::service(&ctx.services, replication, &name)
            .is_some_and(|current| crate::parent::serving::service_as_wanted(&current, want))
        {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(want),
        )
        .await
        .map_err(api_error(format!("applying Service {name}")))?;
    }
    // External Services the spec no longer asks for (external access turned off).
    for stale in observe::external_services(&ctx.services, replication)
        .iter()
        .filter(|s| !wanted.iter().any(|w| w.metadata.name == s.metadata.name))
    {
        let name = stale.name_any();
        ctx.applier
            .delete(&ctx.client, key, &ctx.services, &name)
            .await?;
    }
    Ok(())
}

/// The controller's side of the runtime: a pass per object, and what is dropped when one goes.
impl Reconciler for Context {
    type Object = ValkeyReplication;
    type Error = Error;

    async fn reconcile(
        &self,
        replication: &ValkeyReplication,
        key: &ObjectKey,
    ) -> Result<Requeue, Error> {
        pass(self, replication, key).await
    }

    fn forget(&self, key: &ObjectKey) {
        self.kept.forget(key);
        self.action_failures.succeeded(key);
        self.applier.forget(key);
        self.secrets.forget(
            key.namespace(),
            &crate::parent::secret_cache::named_after(key.name()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass after a promotion may read the replication from a cache that has not seen the new
    /// `status.primary` yet; it must go by the controller's own last write, or it would take the
    /// primary it just promoted for a stranger and promote another (two primaries, writes on
    /// the first dropped).
    #[test]
    fn the_recorded_primary_is_never_older_than_this_controllers_last_write() {
        let mut cached: ValkeyReplication = serde_yaml::from_str(
            "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\n\
             metadata: {name: orders, namespace: prod, uid: u}\nspec: {replicas: 2}\n\
             status: {primary: orders-0}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let memory = ParentMemory::default();
        assert_eq!(
            recorded_primary(&cached, &memory).as_deref(),
            Some("orders-0")
        );
        memory.note_primary_written(Some("orders-1"));
        assert_eq!(
            recorded_primary(&cached, &memory).as_deref(),
            Some("orders-1"),
            "the cache still says orders-0"
        );
        if let Some(status) = cached.status.as_mut() {
            status.primary = Some("orders-1".into());
        }
        assert_eq!(
            recorded_primary(&cached, &memory).as_deref(),
            Some("orders-1")
        );
        // Another controller held it meanwhile: what it recorded is newer.
        memory.note_holder(Some("other/all-namespaces"));
        if let Some(status) = cached.status.as_mut() {
            status.primary = Some("orders-2".into());
        }
        assert_eq!(
            recorded_primary(&cached, &memory).as_deref(),
            Some("orders-2")
        );
    }
}

#[cfg(test)]
mod scripted {
    use http::Method;
    use kube::runtime::controller::Action as Requeue;
    use plumbing::{ObjectKey, Reconciler};

    use crate::replication::controller::fixtures::{REPLICATION, context, replication};

    /// A restore from a backup that is not there stops the pass before anything is made, as for
    /// a cluster: the backup is looked for with a list by name, no Secret or member is applied,
    /// and the status names it (the Services, which follow the primary whatever else fails,
    /// still apply).
    #[tokio::test]
    async fn a_restore_from_a_missing_backup_makes_no_member_and_names_it() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{REPLICATION}  restoreFrom: {{backup: nightly}}\n");
        let stored = serde_json::to_value(replication(&yaml)).unwrap_or_default();
        let script = tokio::spawn(async move {
            crate::cluster::fixtures::expect_heartbeat_of(&mut api, "replication").await;
            api.expect(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases/orders-replication-controller",
            )
            .await
            .not_found();
            api.expect(
                Method::POST,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases",
            )
            .await
            .echo();
            crate::parent::restoring::script::no_backup(&mut api, "prod", "nightly").await;
            for service in ["orders", "orders-replicas"] {
                api.expect(
                    Method::PATCH,
                    &format!("/api/v1/namespaces/prod/services/{service}?"),
                )
                .await
                .echo();
            }
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyreplications/orders/status?",
                )
                .await;
            crate::parent::restoring::script::names_missing_backup(&status, "nightly");
            status.with_status_of(&stored);
            api.done().await;
        });
        let r = replication(&yaml);
        let key = ObjectKey::of(&r);
        let requeue = ctx
            .reconcile(&r, &key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            requeue,
            Requeue::requeue(crate::parent::stop::RETRY_PROBLEM)
        );
    }
}
