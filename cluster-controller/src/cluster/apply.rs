//! The apply stage of a ValkeyCluster: member ValkeyNodes as the spec wants them, its Services and
//! budgets, and the Kubernetes actions the engine decides (release a member's restart, delete a
//! drained member), on the floor's [`crate::parent::apply`].

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;
use crate::engine::{Action, Member};
use crate::parent::apply::{allow_restart, apply_members, delete_node};
use crate::parent::error::Error;
use crate::parent::node::DesiredMember;

/// Every member the spec wants exists with the spec it should have; true when a node was
/// created or changed (its status then still speaks for its previous spec). Members the spec no
/// longer wants stay as they are until the engine has drained and forgotten them.
pub async fn member_nodes(
    ctx: &Context,
    cluster: &ValkeyCluster,
    desired: &[DesiredMember],
    existing: &[Arc<ValkeyNode>],
) -> Result<bool, Error> {
    // Before the cluster first forms it holds no data, so nothing needs a restart gate: a
    // corrected spec (a placement that could not be met) reaches every member at once.
    // (`status.shards` counts the shards that served slots when a member last answered.)
    let forming = cluster.status.as_ref().is_none_or(|s| s.shards == 0);
    apply_members(
        &nodes_api(ctx, cluster),
        &ctx.events,
        cluster,
        desired,
        existing,
        forming,
    )
    .await
}

/// The cluster's client Services and its PodDisruptionBudgets (one per shard that is wanted or
/// still has members; those in `held` let no member go), as [`super::serving`] builds them;
/// budgets of shards that are gone are deleted. Each sent only when it changed or the live one
/// moved (see [`crate::parent::applier`]).
pub async fn serving_objects(
    ctx: &Context,
    cluster: &ValkeyCluster,
    key: &plumbing::ObjectKey,
    existing: &[Arc<ValkeyNode>],
    held: &std::collections::BTreeSet<u32>,
) -> Result<(), Error> {
    let wanted = u32::try_from(cluster.spec.shards.max(1)).unwrap_or(1);
    let mut shards: std::collections::BTreeSet<u32> = (0..wanted).collect();
    shards.extend(
        existing
            .iter()
            .filter_map(|n| crate::parent::labels::position(n.metadata.labels.as_ref()))
            .map(|(shard, _)| shard),
    );
    let Some((services, budgets)) = super::serving::cluster_objects(cluster, shards, held) else {
        return Ok(());
    };
    let applier = &ctx.applier;
    for service in &services {
        applier
            .apply(&ctx.client, key, &ctx.services, service)
            .await?;
    }
    for budget in &budgets {
        applier
            .apply(&ctx.client, key, &ctx.budgets, budget)
            .await?;
    }
    let wanted: Vec<String> = budgets.iter().map(ResourceExt::name_any).collect();
    let name = cluster.name_any();
    applier
        .delete_unwanted(
            &ctx.client,
            key,
            &ctx.budgets,
            (crate::parent::labels::CLUSTER_LABEL, &name),
            &wanted,
        )
        .await?;
    Ok(())
}

/// Carries out the engine's Kubernetes actions; Valkey actions the engine took itself.
pub async fn engine_action(
    ctx: &Context,
    cluster: &ValkeyCluster,
    action: &Action,
    desired: &[DesiredMember],
    existing: &[Arc<ValkeyNode>],
    members: &[Member],
) -> Result<(), Error> {
    let api = nodes_api(ctx, cluster);
    match action {
        Action::AllowRestart { member } => {
            allow_restart(&api, desired, existing, members, member).await
        }
        Action::DeleteMember { member } => delete_node(&api, member).await,
        _ => Ok(()),
    }
}

pub(crate) fn nodes_api(ctx: &Context, cluster: &ValkeyCluster) -> Api<ValkeyNode> {
    Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::desired::members;
    use crate::cluster::fixtures::{CLUSTER, cluster, context};
    use crate::parent::node::NodeAuth;
    use http::Method;

    #[tokio::test]
    async fn a_forming_cluster_creates_every_member_ungated_and_says_so() {
        let (ctx, mut api, _nodes) = context();
        let cache = cluster(CLUSTER);
        let desired = members(&cache, &NodeAuth::of("cache"));
        let names: Vec<String> = desired.iter().map(|m| m.name.clone()).collect();
        let script = tokio::spawn(async move {
            let mut applied = Vec::new();
            for name in names {
                let path = format!("/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/{name}?");
                let node = api.expect(Method::PATCH, &path).await;
                assert!(node.uri.contains("fieldManager=valkey-cluster-controller"));
                assert!(
                    node.body["spec"]["allowedRevision"].is_null(),
                    "forming: no gate"
                );
                let body: ValkeyNode =
                    serde_json::from_value(node.body.clone()).unwrap_or_else(|e| panic!("{e}"));
                node.echo();
                let event = api.event().await;
                assert_eq!(event["reason"], "NodeCreated");
                assert_eq!(event["related"]["name"], name.as_str());
                applied.push(body);
            }
            api.done().await;
            applied
        });
        member_nodes(&ctx, &cache, &desired, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let applied = script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(applied.len(), 6);

        // A second pass that finds them as it wants them sends nothing.
        let (ctx, api, _nodes) = context();
        let existing: Vec<Arc<ValkeyNode>> = applied.into_iter().map(Arc::new).collect();
        member_nodes(&ctx, &cache, &desired, &existing)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        api.done().await;
    }

    #[tokio::test]
    async fn a_formed_cluster_pins_an_existing_node_to_the_revision_it_runs() {
        let (ctx, mut api, _nodes) = context();
        let mut cache = cluster(CLUSTER);
        cache.status = serde_json::from_value(serde_json::json!({"shards": 3})).ok();
        let desired = members(&cache, &NodeAuth::of("cache"));
        let mut running = desired[0].node.clone();
        running.spec.image = "valkey/valkey:8.0".into();
        running.status =
            serde_json::from_value(serde_json::json!({"ready": true, "currentRevision": "r1"}))
                .ok();
        let existing = vec![Arc::new(running)];
        let script = tokio::spawn(async move {
            let node = api
                .expect(
                    Method::PATCH,
                    "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-0-0?",
                )
                .await;
            assert_eq!(node.body["spec"]["allowedRevision"], "r1");
            node.echo();
            // The other five are new: created, each with its Event.
            for _ in 0..5 {
                api.expect(Method::PATCH, "/apis/valkey.io/v1alpha1/")
                    .await
                    .echo();
                api.event().await;
            }
            api.done().await;
        });
        member_nodes(&ctx, &cache, &desired[..], &existing)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn deleting_a_member_that_is_already_gone_is_done() {
        let (ctx, mut api, _nodes) = context();
        let script = tokio::spawn(async move {
            api.expect(
                Method::DELETE,
                "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-2-1",
            )
            .await
            .not_found();
            api.done().await;
        });
        let action = Action::DeleteMember {
            member: "cache-2-1".into(),
        };
        engine_action(&ctx, &cluster(CLUSTER), &action, &[], &[], &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
