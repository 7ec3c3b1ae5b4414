//! The report stage: the pass as the ValkeyCluster's status (computed by [`super::status`]) and as
//! Events: what was done to which member, a cluster that needs a person, a cluster that became
//! Ready.

use std::collections::BTreeMap;
use std::sync::Arc;
use valkey_api::v1alpha1::StatusReason;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{ClusterState, ValkeyCluster, ValkeyClusterStatus, ValkeyNode};

use super::context::Context;
use super::status::{self, PassConclusion};
use crate::engine::{self, Action, Decision, Pass};
use crate::parent::apply::node_reference;
use crate::parent::conditions::Problem;
use crate::parent::error::Error;
use crate::parent::labels::FIELD_MANAGER;
use crate::parent::members;
use crate::valkey::cluster_nodes::NodeId;

/// Events for what the engine decided: the action taken, with the member it concerns, or what
/// blocks the cluster (once, when the reason first shows).
pub async fn decision_events(ctx: &Context, cluster: &ValkeyCluster, pass: &Pass) {
    // Every step the pass took, in order: the ones before its last decision succeeded.
    for step in &pass.earlier {
        action_event(ctx, cluster, &step.decision, false).await;
    }
    match &pass.decision {
        Decision::Act { .. } => {
            let failed = matches!(pass.outcome, Some(Err(_)));
            action_event(ctx, cluster, &pass.decision, failed).await;
        }
        Decision::Blocked { reason, message }
            if cluster.status.as_ref().and_then(|s| s.reason.as_deref())
                != Some(reason.as_str()) =>
        {
            ctx.events
                .warning(cluster, reason.as_str(), "Reconcile", message)
                .await;
        }
        _ => {}
    }
}

/// The Event of one step: what was done, on which member; a forced step (it overrides Valkey or
/// may lose data) is a Warning that says why.
async fn action_event(ctx: &Context, cluster: &ValkeyCluster, decision: &Decision, failed: bool) {
    let Decision::Act { action, reason, .. } = decision else {
        return;
    };
    let note = format!(
        "{action}{}",
        if failed { " (failed; retrying)" } else { "" }
    );
    let (type_, note) = if decision.is_forced() {
        (
            EventType::Warning,
            format!("{note}: {}", decision.message()),
        )
    } else {
        (EventType::Normal, note)
    };
    ctx.events
        .publish(
            &cluster.object_ref(&()),
            Some(node_reference(
                &cluster.namespace().unwrap_or_default(),
                action_member(action),
            )),
            type_,
            reason.as_str(),
            action_verb(action),
            &note,
        )
        .await;
}

/// What the status says of the pass: the engine's decision, unless something needs a person
/// more (a member whose pod cannot run, a slot move refused as unsafe, an action that keeps
/// failing).
pub fn conclusion<'a>(
    pass: &'a Pass,
    existing: &[Arc<ValkeyNode>],
    failing: Option<Problem>,
) -> PassConclusion<'a> {
    let decision = &pass.decision;
    // A member the node-controller cannot run (unschedulable, image, crash loop) stops progress:
    // say which and why, rather than "waiting for nodes" forever.
    let stuck = match decision {
        Decision::Steady(_) => None,
        _ => members::stuck_member(existing.iter().map(AsRef::as_ref)),
    };
    // A step the slot machine refused to take safely needs a person as much as a stuck member.
    let blocked_step = match &pass.outcome {
        Some(Ok(engine::ActionOutcome::Blocked(why))) => Some(Problem {
            reason: StatusReason::MigrationBlocked,
            message: format!("{why}; the operator will not move this slot until it is resolved."),
        }),
        _ => None,
    };
    // A config value Valkey refused changes nothing until it is corrected: a person must know.
    let refused = members::refused_config(existing.iter().map(AsRef::as_ref));
    match stuck.or(refused).or(blocked_step).or(failing) {
        Some(problem) => PassConclusion::Problem {
            problem,
            health: pass.health.clone(),
        },
        None => PassConclusion::Decided {
            decision,
            health: pass.health.clone(),
        },
    }
}

/// A problem found before the engine could run (a missing Secret), as the status.
pub async fn problem(
    ctx: &Context,
    cluster: &ValkeyCluster,
    problem: Problem,
) -> Result<(), Error> {
    let password_secret = cluster
        .status
        .as_ref()
        .and_then(|s| s.password_secret_name.clone());
    write_status(
        ctx,
        cluster,
        cluster.meta().generation,
        &PassConclusion::Problem {
            problem,
            health: None,
        },
        password_secret.as_deref(),
        None,
        false,
    )
    .await
}

/// Writes the status when it changed, and announces a cluster that became Ready. `generation`:
/// the cluster's generation the status speaks for (see
/// [`crate::parent::pass::reported_generation`]). `bindings`: the node each member is bound to
/// after the pass, kept in `status.nodeIds` for the next one.
pub async fn write_status(
    ctx: &Context,
    cluster: &ValkeyCluster,
    generation: Option<i64>,
    conclusion: &PassConclusion<'_>,
    password_secret: Option<&str>,
    bindings: Option<&BTreeMap<String, NodeId>>,
    spent_acknowledgement: bool,
) -> Result<(), Error> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous: Option<&ValkeyClusterStatus> = cluster.status.as_ref();
    let mut new = status::compute(previous, generation, conclusion, password_secret, &now);
    let steady = matches!(
        conclusion,
        PassConclusion::Decided {
            decision: Decision::Steady(_),
            ..
        }
    );
    new.accepted_loss = status::accepted_loss(
        previous.and_then(|s| s.accepted_loss.as_ref()),
        cluster.spec.accept_lost_slots.as_deref(),
        spent_acknowledgement,
        steady,
    );
    if let Some(bindings) = bindings.filter(|b| !b.is_empty()) {
        new.node_ids = Some(
            bindings
                .iter()
                .map(|(member, id)| (member.clone(), id.to_string()))
                .collect(),
        );
    }
    // lastSuccessfulBackup is the backup controller's (never in `new`): not a change of ours.
    let ours = previous.map(|p| ValkeyClusterStatus {
        last_successful_backup: None,
        ..p.clone()
    });
    if ours.as_ref() == Some(&new) {
        return Ok(());
    }
    plumbing::conditions::log_status_change(
        previous.map(|p| (p.reason.as_deref(), p.message.as_deref())),
        &new.state,
        new.reason.as_deref(),
        new.message.as_deref(),
    );
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let name = cluster.name_any();
    match plumbing::apply::apply_status(&api, FIELD_MANAGER, &name, &new).await {
        Ok(_) => {}
        // A CRD older than the controller (Helm never upgrades the CRDs it installed) refuses the
        // bindings: the cluster is still served and reported, without them.
        Err(error) if new.node_ids.is_some() && refuses_node_ids(&error) => {
            tracing::warn!(
                %error,
                "the ValkeyCluster CRD has no status.nodeIds: apply the chart's CRDs; members are \
                 not bound to their nodes until then"
            );
            new.node_ids = None;
            plumbing::apply::apply_status(&api, FIELD_MANAGER, &name, &new)
                .await
                .map_err(Error::Status)?;
        }
        Err(error) => return Err(Error::Status(error)),
    }
    let became = |state| new.state == Some(state) && previous.and_then(|p| p.state) != Some(state);
    if became(ClusterState::Ready) {
        ctx.events
            .normal(
                cluster,
                "ClusterReady",
                "Reconcile",
                new.message.as_deref().unwrap_or_default(),
            )
            .await;
    }
    Ok(())
}

/// True when the API server refused the status because its schema has no `nodeIds`.
fn refuses_node_ids(error: &plumbing::apply::ApplyError) -> bool {
    matches!(error, plumbing::apply::ApplyError::Kube { source: kube::Error::Api(status), .. }
        if status.message.contains(".status.nodeIds") && status.message.contains("not declared"))
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
        Action::Failover { on_replica, .. }
        | Action::ForcedFailover { on_replica, .. }
        | Action::Takeover { on_replica, .. } => &on_replica.member,
        Action::AllowRestart { member } | Action::DeleteMember { member } => member,
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
        Action::Failover { .. } | Action::ForcedFailover { .. } => "Failover",
        Action::Takeover { .. } => "Takeover",
        Action::AdmitReplication { .. } => "AdmitReplication",
        Action::AllowRestart { .. } => "AllowRestart",
        Action::DeleteMember { .. } => "DeleteNode",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::{CLUSTER, cluster, context};
    use crate::engine::Health;
    use http::Method;

    fn steady() -> Decision {
        Decision::Steady(Health {
            shards: 3,
            ready_shards: 3,
            slots_assigned: 16384,
            replicas_wanted: 3,
            replicas_in_sync: 3,
            nodes: 6,
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn a_cluster_that_becomes_ready_gets_its_status_and_one_event() {
        let (ctx, mut api, _nodes) = context();
        let stored = serde_json::to_value(cluster(CLUSTER)).unwrap_or_default();
        let script = tokio::spawn(async move {
            let status = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyclusters/cache/status?",
                )
                .await;
            assert!(
                status
                    .uri
                    .contains("fieldManager=valkey-cluster-controller")
            );
            assert_eq!(status.body["apiVersion"], "valkey.io/v1alpha1");
            assert_eq!(status.body["kind"], "ValkeyCluster");
            assert_eq!(status.body["status"]["state"], "Ready");
            assert_eq!(
                status.body["status"]["passwordSecretName"],
                "cache-password"
            );
            let written = status.body["status"].clone();
            status.with_status_of(&stored);
            let event = api.event().await;
            assert_eq!(event["reason"], "ClusterReady");
            api.done().await;
            written
        });
        let cache = cluster(CLUSTER);
        let decision = steady();
        let conclusion = PassConclusion::Decided {
            decision: &decision,
            health: None,
        };
        write_status(
            &ctx,
            &cache,
            cache.metadata.generation,
            &conclusion,
            Some("cache-password"),
            None,
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let written = script.await.unwrap_or_else(|e| panic!("{e}"));

        // The next pass finds the same status: no write, no event.
        let (ctx, api, _nodes) = context();
        let mut again = cache.clone();
        again.status = serde_json::from_value(written).ok();
        write_status(
            &ctx,
            &again,
            again.metadata.generation,
            &conclusion,
            Some("cache-password"),
            None,
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        api.done().await;
    }

    #[tokio::test]
    async fn a_blocked_cluster_is_announced_once() {
        let blocked = Decision::Blocked {
            reason: crate::engine::Reason::DrainBlocked,
            message: "cannot drain".into(),
        };
        let pass = Pass {
            earlier: Vec::new(),
            observation: Default::default(),
            decision: blocked,
            health: None,
            bindings: Default::default(),
            outcome: None,
            timing: Default::default(),
        };
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            let event = api.event().await;
            assert_eq!(
                (event["type"].as_str(), event["reason"].as_str()),
                (Some("Warning"), Some("DrainBlocked"))
            );
            api.done().await;
        });
        let mut cache = cluster(CLUSTER);
        decision_events(&ctx, &cache, &pass).await;
        script.await.unwrap_or_else(|e| panic!("{e}"));

        let (ctx, api, _nodes) = context();
        cache.status = serde_json::from_value(serde_json::json!({"reason": "DrainBlocked"})).ok();
        decision_events(&ctx, &cache, &pass).await;
        api.done().await;
    }

    /// A step that overrides Valkey or may lose data is announced as a Warning that says why;
    /// the same action taken in the ordinary way is a Normal event.
    #[tokio::test]
    async fn a_forced_step_is_a_warning_that_says_why() {
        let on = crate::engine::NodeRef {
            member: "cache-0-1".into(),
            address: "10.0.0.2:6379".parse().unwrap_or_else(|e| panic!("{e}")),
            id: crate::valkey::cluster_nodes::NodeId::parse(&"a".repeat(40))
                .unwrap_or_else(|| panic!("id")),
        };
        let takeover = crate::engine::Action::Takeover {
            on_replica: on.clone(),
            failed: on.id.clone(),
        };
        for (forced, want) in [(true, "Warning"), (false, "Normal")] {
            let decision = Decision::Act {
                action: takeover.clone(),
                reason: crate::engine::Reason::FailingOver,
                message: "no election can happen; writes it had not received are lost".into(),
                forced,
                acknowledged: false,
            };
            let pass = Pass {
                earlier: Vec::new(),
                observation: Default::default(),
                decision,
                health: None,
                bindings: Default::default(),
                outcome: None,
                timing: Default::default(),
            };
            let (ctx, mut api, _nodes) = context();
            let script = tokio::spawn(async move {
                let event = api.event().await;
                assert_eq!(event["type"].as_str(), Some(want));
                assert_eq!(event["related"]["name"].as_str(), Some("cache-0-1"));
                let note = event["note"].as_str().unwrap_or_default().to_owned();
                assert!(note.contains("TAKEOVER"), "{note}");
                assert_eq!(note.contains("writes it had not received are lost"), forced);
                api.done().await;
            });
            decision_events(&ctx, &cluster(CLUSTER), &pass).await;
            script.await.unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// The members' bindings are written to status.nodeIds; a CRD that predates the field
    /// refuses them, and the status is written without them rather than not at all.
    #[tokio::test]
    async fn bindings_are_kept_in_status_and_dropped_for_an_older_crd() {
        let id = crate::valkey::cluster_nodes::NodeId::parse(&"b".repeat(40))
            .unwrap_or_else(|| panic!("id"));
        let bindings = BTreeMap::from([("cache-0-0".to_owned(), id)]);
        let decision = Decision::Wait {
            reason: crate::engine::Reason::Converging,
            message: "converging".into(),
        };
        let conclusion = PassConclusion::Decided {
            decision: &decision,
            health: None,
        };
        let (ctx, mut api, _nodes) = context();
        let stored = serde_json::to_value(cluster(CLUSTER)).unwrap_or_default();
        let script = tokio::spawn(async move {
            let path = "/apis/valkey.io/v1alpha1/namespaces/prod/valkeyclusters/cache/status?";
            let first = api.expect(Method::PATCH, path).await;
            assert_eq!(first.body["status"]["nodeIds"]["cache-0-0"], "b".repeat(40));
            first.answer(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                &serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                    "message": "failed to create typed patch object (/cache; valkey.io/v1alpha1, Kind=ValkeyCluster): .status.nodeIds: field not declared in schema"
                }),
            );
            let again = api.expect(Method::PATCH, path).await;
            assert!(again.body["status"].get("nodeIds").is_none());
            assert_eq!(again.body["status"]["reason"], "Converging");
            again.with_status_of(&stored);
            api.done().await;
        });
        write_status(
            &ctx,
            &cluster(CLUSTER),
            Some(1),
            &conclusion,
            None,
            Some(&bindings),
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
