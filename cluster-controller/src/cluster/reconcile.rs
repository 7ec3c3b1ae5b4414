//! One pass over a ValkeyCluster, stage by stage: claim (its Lease) → observe (the cluster's
//! ValkeyNodes from the cache) → validate (the spec's errors, before anything is applied) →
//! prepare: secrets → tls (the certificate the members serve) → desired (every member's
//! ValkeyNode, built once) → apply (member nodes, policy, serving objects) → then access (every
//! member's users, live) → the engine (observe Valkey, decide, take a Valkey step) → apply (the
//! engine's Kubernetes step) → report (Events and status). Each stage is a module of its own.
//!
//! When the spec is invalid or a stage of `prepare` cannot go on (a Secret missing, the API
//! failing), the rest of the pass does not follow the spec, but the engine still runs its
//! data-safety rules ([`protect`]): a failure elsewhere never leaves a primary back without its
//! data serving, nor a failed primary without a takeover.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use plumbing::{ObjectKey, Reconciler};
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use super::status::PassConclusion;
use super::{
    apply, bus, desired, external, network, observe, report, restore, secrets, tls, validate,
};
use crate::engine::{Decision, Desired, Pass, Reason, Scope};
use crate::parent::conditions::Problem;
use crate::parent::context::ParentMemory;
use crate::parent::error::Error;
use crate::parent::external::lacking_names as external_names_lacking;
use crate::parent::node::DesiredMember;
use crate::parent::pass::{after_step, claim_for, reported_generation, requeue_after};
use crate::parent::secrets::Auth;
use crate::parent::stop::{Stop, stopped};
use crate::parent::{access, labels, monitoring};

/// What `prepare` gives the rest of a pass that follows the spec.
struct Prepared {
    auth: Auth,
    served: Option<crate::parent::tls::Served>,
    /// Every member's ValkeyNode as the spec wants it.
    desired: Vec<DesiredMember>,
    /// What the spec asks of the engine.
    engine_desired: Desired,
    /// What a person should know that stops nothing: an external address not given yet, a
    /// certificate of theirs that lacks an external name.
    notice: Option<Problem>,
    /// A member's ValkeyNode was created or its spec changed: the members this pass observed
    /// (`existing`) are as they were before, so its status cannot speak for the current
    /// generation ([`reported_generation`]).
    members_changed: bool,
    /// The cluster is restored at its backup's shard count, not the spec's yet (it reshards once
    /// the restore is served): Ready now would not be Ready for this generation.
    restoring_at_other_count: bool,
}

pub async fn pass(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &ObjectKey,
) -> Result<Requeue, Error> {
    let started = std::time::Instant::now();
    let memory = ctx.memory(key);
    if let Some(requeue) = claim(ctx, cluster, &memory).await? {
        return Ok(requeue);
    }
    let existing = observe::member_nodes(&ctx.nodes, cluster);
    let valid = match validate::spec(cluster, &existing) {
        Ok(valid) => valid,
        Err(problem) => {
            let stop = Stop::problem(problem);
            return protect(ctx, cluster, key, &memory, stop, &existing).await;
        }
    };
    let prepared = match prepare(ctx, cluster, key, &memory, &existing, valid).await {
        Ok(Some(prepared)) => prepared,
        // The bus port was just recorded: the next pass reads it back.
        Ok(None) => return Ok(Requeue::requeue(Duration::ZERO)),
        Err(stop) => return protect(ctx, cluster, key, &memory, stop, &existing).await,
    };
    ctx.stage_failures.succeeded(key);
    let Prepared {
        auth,
        served,
        desired,
        mut engine_desired,
        notice,
        members_changed,
        restoring_at_other_count,
    } = prepared;
    engine_desired.held_keys = memory.held_keys();
    engine_desired.steady_for = memory.steady_for();
    engine_desired.spread_after = ctx.settings.spread_after;
    engine_desired.slot_moves_held = ctx
        .backups
        .as_ref()
        .and_then(|b| observe::running_backup(b, key.namespace(), key.name()));

    let members = observe::engine_members(&existing, cluster);
    let trust = served.as_ref().map(|s| &s.trust);
    let engine = ctx.engine(key, &auth.credentials, trust);
    let refused = access::sync(&memory, engine.client(), &auth, &members, trust).await;
    let before_engine = started.elapsed();
    let pass = engine.pass(&engine_desired, &members).await;
    memory.note_keys(&pass.observation);
    restore::after_pass(ctx, cluster, &memory, engine.client(), &pass, &existing).await;
    let engine_took = started.elapsed() - before_engine;
    let (requeue, failing) = next_pass(ctx, key, &pass);
    if let Decision::Act { action, .. } = &pass.decision {
        apply::engine_action(ctx, cluster, action, &desired, &existing, &members).await?;
        ctx.metrics.action_taken(
            super::CONTROLLER,
            key.namespace(),
            key.name(),
            action.kind(),
        );
    }
    work_left(ctx, key, &pass);
    serve(ctx, cluster, key, &existing, &members, &pass).await;

    report::decision_events(ctx, cluster, &pass).await;
    let conclusion = report::conclusion(&pass, &existing, refused.or(failing).or(notice));
    let generation = reported_generation(
        cluster.metadata.generation,
        cluster.status.as_ref().and_then(|s| s.observed_generation),
        members_changed || restoring_at_other_count,
    );
    report::write_status(
        ctx,
        cluster,
        generation,
        &conclusion,
        auth.password_secret.as_deref(),
        Some(&pass.bindings),
        pass.spent_acknowledgement(),
    )
    .await?;
    let still_steady =
        memory.note_steady(matches!(pass.decision, Decision::Steady(_)) && pass.earlier.is_empty());
    let requeue = requeue_after(requeue, members_changed);
    trace(&pass, started.elapsed(), engine_took, requeue, still_steady);
    Ok(Requeue::requeue(requeue))
}

/// The stages that bring Kubernetes in step with the spec before the engine runs: Secrets, TLS,
/// the bus port, the NetworkPolicy, the member nodes and the objects that serve clients. The
/// first that cannot go on stops them (what follows needs it). `Ok(None)`: the bus port was
/// recorded, and the pass ends there.
async fn prepare(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &ObjectKey,
    memory: &ParentMemory,
    existing: &[Arc<ValkeyNode>],
    valid: validate::Valid,
) -> Result<Option<Prepared>, Stop> {
    let failures = &ctx.stage_failures;
    // Before anything is made: a restore that cannot be done creates no member empty.
    let restoring = restore::restoring(cluster);
    let plan = crate::parent::restoring::plan(&ctx.client, failures, &restoring, key, memory);
    let plan = plan.await?;
    let auth = stopped(secrets::ensure(ctx, cluster, memory).await, failures, key)?;
    let served = stopped(tls::ensure(ctx, cluster, memory).await, failures, key)?;
    if let Some(served) = &served {
        memory.remember_trust(&served.trust);
    }
    let mut node_auth = auth.node.clone();
    node_auth.tls = served.as_ref().map(|s| s.node.clone());
    match bus::check(cluster, existing) {
        bus::Check::Recorded(_) => {}
        bus::Check::Record(port) => {
            // Recorded before any member or policy names it.
            return match bus::record(ctx, cluster, port).await {
                Ok(()) => Ok(None),
                Err(error) => {
                    let problem = bus::not_recorded(port, &error);
                    let mut stop = Stop::error(error, failures, key);
                    stop.problem = Some(problem);
                    Err(stop)
                }
            };
        }
        // Found by the validation stage first, from the same object and nodes; kept so that the
        // check stays whole where the port is recorded.
        bus::Check::Changed(problem) => return Err(Stop::problem(problem)),
    }
    let applied = network::ensure(ctx, cluster, key).await;
    applied.map_err(|error| Stop::error(error, failures, key))?;
    let plan = plan.as_deref().map(Vec::as_slice);
    let shards = restore::shards_now(cluster, plan.map(<[_]>::len));
    let mut desired = desired::members_of(cluster, &node_auth, shards);
    crate::parent::restoring::shape_members(&restoring, plan, memory, &mut desired, existing);
    let announced = external::ensure(ctx, cluster, key, &mut desired, existing).await;
    let pending = announced.map_err(|error| Stop::error(error, failures, key))?;
    let lacking = served.as_ref().map(|s| s.lacking_names.as_slice());
    let notice = pending.or_else(|| external_names_lacking(lacking.unwrap_or_default()));
    let applied = apply::member_nodes(ctx, cluster, &desired, existing).await;
    let members_changed = applied.map_err(|error| Stop::error(error, failures, key))?;
    if let Some(parent) = monitoring::Parent::of(cluster, "cluster", labels::CLUSTER_LABEL) {
        let desired = monitoring::desired(&parent, &cluster.spec.metrics);
        let monitored =
            monitoring::ensure(&ctx.client, &ctx.pod_monitors, &parent, desired, memory).await;
        if let Err(error) = monitored {
            tracing::warn!(%error, "the PodMonitor could not be applied");
        }
    }
    let engine_desired = Desired {
        shards,
        restore: restore::slots(plan),
        ..valid.engine_desired
    };
    let restoring_at_other_count = shards != restore::shards_now(cluster, None);
    Ok(Some(Prepared {
        auth,
        served,
        desired,
        engine_desired,
        notice,
        members_changed,
        restoring_at_other_count,
    }))
}

/// A pass that could not get in step with the spec: the engine applies only the rules that
/// protect data ([`Scope::Safety`]), with the operator's credentials and CA as last known, and
/// the status says what stopped the rest. Without credentials it can reach no server: then
/// nothing is at stake either, since a server that restarted without its data takes no client
/// before the engine admits it.
async fn protect(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &ObjectKey,
    memory: &ParentMemory,
    stop: Stop,
    existing: &[Arc<ValkeyNode>],
) -> Result<Requeue, Error> {
    stop.announce(&ctx.metrics, super::CONTROLLER);
    // Not in step with the spec: not steady either, whatever the safety rules find.
    memory.note_steady(false);
    let members = observe::engine_members(existing, cluster);
    let pass = match memory.last_login(cluster.spec.tls.enabled) {
        Some((credentials, trust)) => {
            let engine = ctx.engine(key, &credentials, trust.as_ref());
            let engine_desired = Desired {
                held_keys: memory.held_keys(),
                ..desired::for_engine_or_safest(cluster)
            };
            let pass = engine
                .pass_in(Scope::Safety, &engine_desired, &members)
                .await;
            memory.note_keys(&pass.observation);
            tracing::info!(decision = %pass.decision.reason(), "safety pass");
            Some(pass)
        }
        None => {
            tracing::warn!("no credentials known yet: not even the data-safety rules can run");
            None
        }
    };
    let mut requeue = stop.requeue;
    if let Some(pass) = &pass {
        serve(ctx, cluster, key, existing, &members, pass).await;
        report::decision_events(ctx, cluster, pass).await;
        if let Decision::Act { action, .. } = &pass.decision {
            ctx.metrics.action_taken(
                super::CONTROLLER,
                key.namespace(),
                key.name(),
                action.kind(),
            );
            requeue = requeue.min(Duration::from_millis(500));
        }
    }
    if let Some(problem) = stop.problem {
        let password_secret = cluster
            .status
            .as_ref()
            .and_then(|s| s.password_secret_name.clone());
        let conclusion = PassConclusion::Problem {
            problem,
            health: pass.as_ref().and_then(|p| p.health.clone()),
        };
        report::write_status(
            ctx,
            cluster,
            cluster.metadata.generation,
            &conclusion,
            password_secret.as_deref(),
            pass.as_ref().map(|p| &p.bindings),
            pass.as_ref().is_some_and(Pass::spent_acknowledgement),
        )
        .await?;
    }
    Ok(Requeue::requeue(requeue))
}

/// The objects that serve clients and drains, from what this pass saw: the client Services, and
/// a disruption budget per shard that lets no member go while one of its replicas does not hold
/// the primary's data yet. They serve clients and drains, not the cluster itself: a failure to
/// apply them (a chart without their RBAC) is logged and retried, and holds nothing else back.
async fn serve(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &ObjectKey,
    existing: &[Arc<ValkeyNode>],
    members: &[crate::engine::Member],
    pass: &Pass,
) {
    let held = super::serving::shards_out_of_sync(members, &pass.observation);
    if let Err(error) = apply::serving_objects(ctx, cluster, key, existing, &held).await {
        tracing::warn!(%error, "the client Services or disruption budgets could not be applied");
    }
}

/// The work a pass left, as metrics.
fn work_left(ctx: &Context, key: &ObjectKey, pass: &Pass) {
    if let Some(health) = pass.health.as_ref().filter(|h| h.nodes > 0) {
        let slots = health.slots_to_move.map(|left| ("slots_to_move", left));
        for (work, left) in slots
            .into_iter()
            .chain([("members_to_restart", health.members_to_restart)])
        {
            ctx.metrics.set_work_left(
                super::CONTROLLER,
                key.namespace(),
                key.name(),
                work,
                i64::try_from(left).unwrap_or(i64::MAX),
            );
        }
    }
}

/// One line per pass that did or awaited something, and the first steady one after (steady
/// passes after that only at debug): where its time went, Kubernetes side (`kube_ms`: Secrets,
/// member objects, status) and Valkey side (the engine's looks), and when the next pass comes
/// unless a watch event brings it sooner. Read by `make bench`'s formation trace; what a person
/// reads when a change seems slow.
fn trace(pass: &Pass, took: Duration, engine_took: Duration, requeue: Duration, quiet: bool) {
    let t = &pass.timing;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let steps = pass.earlier.len() + usize::from(pass.outcome.is_some());
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                steps,
                looks = t.looks,
                total_ms = ms(took),
                kube_ms = ms(took.saturating_sub(engine_took)),
                observe_ms = ms(t.observe),
                decide_ms = ms(t.decide),
                act_ms = ms(t.act),
                settle_ms = ms(t.settle),
                requeue_ms = ms(requeue),
                decision = %pass.decision.reason(),
                "pass"
            )
        };
    }
    if quiet {
        line!(debug);
    } else {
        line!(info);
    }
}

/// Holds the cluster's Lease, or leaves the cluster alone (`Some(when to look again)`) while
/// another cluster-controller holds it: two releases whose watch scopes overlap must never both
/// drive one cluster. The first time, a Warning Event names the holder.
async fn claim(
    ctx: &Context,
    cluster: &ValkeyCluster,
    memory: &ParentMemory,
) -> Result<Option<Requeue>, Error> {
    claim_for(
        &ctx.claims,
        &ctx.events,
        cluster,
        claim_name(&cluster.name_any()),
        memory,
    )
    .await
}

/// The Lease a cluster-controller holds while it drives the cluster `cluster`.
pub fn claim_name(cluster: &str) -> String {
    format!("{cluster}-cluster-controller")
}

/// When to look again, by what was decided. A Valkey action that fails again and again is
/// retried ever more slowly, and from the third failure in a row the status says what Valkey
/// answered (the problem returned); any other pass clears the count.
fn next_pass(ctx: &Context, key: &ObjectKey, pass: &Pass) -> (Duration, Option<Problem>) {
    let requeue = match &pass.decision {
        Decision::Act { .. } => Duration::from_millis(500),
        // Migration jobs the pass watched: it ends as soon as one of them lands (so the status
        // shows it), and the others, started together, land moments later; what follows them
        // (a leaving shard's removal, the next job) is taken by the next look, at once.
        Decision::Wait {
            reason: Reason::MigratingSlots,
            ..
        } => Duration::from_millis(200),
        // A short wait (a handshake, a replica's first sync, cluster_state turning ok once
        // Valkey's rejoin delay is over) the pass watched for a moment may end any time: looked
        // at sooner than other waits.
        Decision::Wait { reason, .. }
            if <crate::engine::ClusterMode as crate::engine::Mode>::settles_soon(*reason) =>
        {
            Duration::from_secs(1)
        }
        Decision::Wait { .. } => Duration::from_secs(2),
        Decision::Steady(_) => Duration::from_secs(15),
        Decision::Blocked { .. } => Duration::from_secs(10),
    };
    let failed = match (&pass.outcome, &pass.decision) {
        (Some(Err(error)), Decision::Act { action, .. }) => {
            Some((action as &(dyn Display + Sync), error))
        }
        _ => None,
    };
    after_step(&ctx.action_failures, key, failed, requeue)
}

/// The controller's side of the runtime: a pass per object, and what is dropped when one goes.
impl Reconciler for Context {
    type Object = ValkeyCluster;
    type Error = Error;

    async fn reconcile(&self, cluster: &ValkeyCluster, key: &ObjectKey) -> Result<Requeue, Error> {
        pass(self, cluster, key).await
    }

    fn forget(&self, key: &ObjectKey) {
        self.kept.forget(key);
        self.action_failures.succeeded(key);
        self.stage_failures.succeeded(key);
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
    use crate::cluster::fixtures::{CLUSTER, cluster, context, expect_heartbeat};
    use crate::engine::Action;
    use crate::engine::EngineError;
    use crate::parent::pass::{MAX_ACTION_RETRY, failing_problem};
    use http::Method;
    use plumbing::Reconciler;

    /// A Valkey action that keeps failing is retried ever more slowly, never faster than the
    /// back-off, and reported in the same words each time, so that its status is written once
    /// and does not wake the controller again.
    #[test]
    fn a_failing_action_backs_off_and_is_reported_in_unchanging_words() {
        let failures = plumbing::backoff::Backoff::default();
        let key = ObjectKey::new("prod", "cache");
        let retries: Vec<u64> = (0..8)
            .map(|_| failures.failed(&key).min(MAX_ACTION_RETRY).as_secs())
            .collect();
        assert_eq!(retries, [1, 2, 4, 8, 16, 30, 30, 30]);

        let action = Action::DeleteMember {
            member: "cache-2-0".into(),
        };
        let error = EngineError::UnexpectedReply {
            command: "CLUSTER MEET".into(),
            reply: "NOPERM".into(),
        };
        assert_eq!(
            failing_problem(&action, &error, 2),
            None,
            "two failures are noise"
        );
        let third = failing_problem(&action, &error, 3);
        assert!(
            third
                .as_ref()
                .is_some_and(|p| p.reason.as_str() == "ActionFailing"
                    && p.message.contains("CLUSTER MEET")
                    && p.message.contains("NOPERM"))
        );
        assert_eq!(
            third,
            failing_problem(&action, &error, 9),
            "the words do not count"
        );

        // The status computed from the same problem twice is the same status: no second write.
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        let conclusion = |problem: Problem| crate::cluster::status::PassConclusion::Problem {
            problem,
            health: None,
        };
        let first = crate::cluster::status::compute(
            None,
            Some(1),
            &conclusion(third.clone().unwrap_or_else(|| panic!("no problem"))),
            None,
            &now,
        );
        let again = crate::cluster::status::compute(
            Some(&first),
            Some(1),
            &conclusion(
                failing_problem(&action, &error, 4).unwrap_or_else(|| panic!("no problem")),
            ),
            None,
            &now,
        );
        assert_eq!(first, again);
    }

    /// A spec error is found before anything is applied: right after the claim the pass reports
    /// it, naming the field, and creates or changes no Secret, policy or member (with no
    /// credentials known yet, not even the safety rules have a server to look at).
    #[tokio::test]
    async fn an_invalid_spec_makes_nothing_and_names_the_field() {
        let (ctx, mut api, _nodes) = context();
        // 20000 passes the CRD's pattern but is no slot.
        let yaml = format!("{CLUSTER}  acceptLostSlots: \"0-20000\"\n");
        let recorded = || {
            let mut c = cluster(&yaml);
            c.annotations_mut()
                .insert(bus::ANNOTATION.into(), "23456".into());
            c
        };
        let stored = serde_json::to_value(recorded()).unwrap_or_default();
        let script = tokio::spawn(async move {
            expect_heartbeat(&mut api).await;
            api.expect(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases/cache-cluster-controller",
            )
            .await
            .not_found();
            api.expect(
                Method::POST,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases",
            )
            .await
            .echo();
            // Nothing but the status: no Secret read or written, no policy, no member.
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyclusters/cache/status?",
                )
                .await;
            assert_eq!(status.body["status"]["reason"], "InvalidSpec");
            assert_eq!(status.body["status"]["state"], "Degraded");
            let message = status.body["status"]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(message.contains("spec.acceptLostSlots"), "{message}");
            status.with_status_of(&stored);
            api.done().await;
        });
        let c = recorded();
        let key = ObjectKey::of(&c);
        let requeue = ctx
            .reconcile(&c, &key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            requeue,
            Requeue::requeue(crate::parent::stop::RETRY_PROBLEM)
        );
    }

    /// A restore from a backup that is not there stops the pass before anything is made: the
    /// backup is looked for with a list by name (the role may list, not get), and the status
    /// names it; no Secret, policy or member is applied.
    #[tokio::test]
    async fn a_restore_from_a_missing_backup_makes_nothing_and_names_it() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  restoreFrom: {{backup: nightly}}\n");
        let stored = serde_json::to_value(cluster(&yaml)).unwrap_or_default();
        let script = tokio::spawn(async move {
            expect_heartbeat(&mut api).await;
            api.expect(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases/cache-cluster-controller",
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
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyclusters/cache/status?",
                )
                .await;
            crate::parent::restoring::script::names_missing_backup(&status, "nightly");
            status.with_status_of(&stored);
            api.done().await;
        });
        let c = cluster(&yaml);
        let key = ObjectKey::of(&c);
        let requeue = ctx
            .reconcile(&c, &key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            requeue,
            Requeue::requeue(crate::parent::stop::RETRY_PROBLEM)
        );
    }

    #[tokio::test]
    async fn a_new_open_cluster_gets_its_members_and_waits_for_them() {
        let (ctx, mut api, _nodes) = context();
        let yaml = format!("{CLUSTER}  auth: {{enabled: false}}\n");
        // Its bus port recorded (the first pass of all records it, and looks again).
        let recorded = || {
            let mut c = cluster(&yaml);
            c.annotations_mut()
                .insert(bus::ANNOTATION.into(), "23456".into());
            c
        };
        let stored = serde_json::to_value(recorded()).unwrap_or_default();
        let script = tokio::spawn(async move {
            // The controller's heartbeat, then the cluster's Lease: no other controller holds
            // it, so this one takes it.
            expect_heartbeat(&mut api).await;
            api.expect(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/prod/leases/cache-cluster-controller",
            )
            .await
            .not_found();
            let lease = api
                .expect(
                    Method::POST,
                    "/apis/coordination.k8s.io/v1/namespaces/prod/leases",
                )
                .await;
            assert_eq!(lease.body["spec"]["holderIdentity"], "test/prod");
            assert_eq!(
                lease.body["metadata"]["ownerReferences"][0]["uid"],
                "0000-1"
            );
            lease.echo();
            // The operator's users exist in an open cluster too: its two Secrets come first.
            for secret in ["cache-acl", "cache-operator"] {
                api.expect(
                    Method::GET,
                    &format!("/api/v1/namespaces/prod/secrets/{secret}"),
                )
                .await
                .not_found();
            }
            for secret in ["cache-acl", "cache-operator"] {
                api.expect(
                    Method::PATCH,
                    &format!("/api/v1/namespaces/prod/secrets/{secret}?"),
                )
                .await
                .echo();
            }
            // The cluster's NetworkPolicy, on by default.
            api.expect(
                Method::PATCH,
                "/apis/networking.k8s.io/v1/namespaces/prod/networkpolicies/cache-valkey?",
            )
            .await
            .echo();
            for _ in 0..6 {
                api.expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/",
                )
                .await
                .echo();
                assert_eq!(api.event().await["reason"], "NodeCreated");
            }
            // The client Services and a disruption budget per shard.
            for path in [
                "/api/v1/namespaces/prod/services/cache?",
                "/api/v1/namespaces/prod/services/cache-headless?",
                "/apis/policy/v1/namespaces/prod/poddisruptionbudgets/cache-shard-0?",
                "/apis/policy/v1/namespaces/prod/poddisruptionbudgets/cache-shard-1?",
                "/apis/policy/v1/namespaces/prod/poddisruptionbudgets/cache-shard-2?",
            ] {
                api.expect(Method::PATCH, path).await.echo();
            }
            // Budgets of shards gone are found in the watch cache: no list.
            // No member is in the cache yet, so the engine waits; the status says so.
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyclusters/cache/status?",
                )
                .await;
            assert_eq!(status.body["status"]["state"], "Initializing");
            assert_eq!(status.body["status"]["reason"], "WaitingForNodes");
            // The members were just created: this pass speaks for no generation yet.
            assert!(status.body["status"]["observedGeneration"].is_null());
            status.with_status_of(&stored);
            api.done().await;
        });
        let cache = recorded();
        let key = ObjectKey::of(&cache);
        let requeue = ctx
            .reconcile(&cache, &key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        // The engine waits (2s), but the members' specs just changed: the next pass, which reads
        // them back, comes sooner.
        assert_eq!(
            requeue,
            Requeue::requeue(crate::parent::pass::AFTER_MEMBER_CHANGE)
        );

        // The cluster goes: its engine goes with it.
        assert_eq!(ctx.engines(), 1);
        ctx.forget(&key);
        assert_eq!(ctx.engines(), 0);
    }
}
