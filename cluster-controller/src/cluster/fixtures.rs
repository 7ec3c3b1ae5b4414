//! Test fixtures: a sample ValkeyCluster, and a context whose Kubernetes API is a script
//! ([`plumbing::testing`]), so the glue of each stage runs in milliseconds without a cluster.

use kube::runtime::reflector;
use plumbing::events::EventPublisher;
use plumbing::testing::{ApiServer, mock_client};
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::context::Context;

pub const CLUSTER: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {name: cache, namespace: prod, uid: 0000-1, generation: 1}
spec:
  shards: 3
  replicas: 1
  config: {maxmemory: 100mb, cluster-node-timeout: "2000"}
  podLabels: {team: data, valkey.io/shard: "99"}
"#;

pub fn cluster(yaml: &str) -> ValkeyCluster {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// A context whose client talks to the returned script, with an empty node cache (fill it with
/// the returned writer).
pub fn context() -> (Context, ApiServer, reflector::store::Writer<ValkeyNode>) {
    let (client, api) = mock_client();
    let events = EventPublisher::new(client.clone(), "test-controller", Some("test".into()));
    let (store, writer) = reflector::store();
    let claims = plumbing::leader::Claims::new(client.clone(), "test/prod".into(), "cluster");
    let ctx = Context::new(
        client.clone(),
        events,
        plumbing::Metrics::default(),
        super::context::Watched {
            nodes: store,
            services: reflector::store().0,
            budgets: reflector::store().0,
            policies: reflector::store().0,
            secrets: crate::parent::secret_cache::SecretCache::unwatched(client.clone()),
        },
        Default::default(),
        claims,
    );
    // No PodMonitor kind: scripted passes make no discovery request (see `monitoring`).
    ctx.pod_monitors.assume(false);
    (ctx, api, writer)
}

/// The first claim of a scripted pass of the cluster controller: see [`expect_heartbeat_of`].
pub async fn expect_heartbeat(api: &mut ApiServer) {
    expect_heartbeat_of(api, "cluster").await;
}

/// The first claim of a scripted pass of the `kind` controller (`cluster`, `replication`): its
/// heartbeat in the namespace, created (see [`plumbing::leader::Claims`]); the object's own Lease
/// follows.
pub async fn expect_heartbeat_of(api: &mut ApiServer, kind: &str) {
    let name = plumbing::leader::heartbeat_name(kind, "test/prod");
    let leases = "/apis/coordination.k8s.io/v1/namespaces/prod/leases";
    api.expect(http::Method::GET, &format!("{leases}/{name}"))
        .await
        .not_found();
    let beat = api.expect(http::Method::POST, leases).await;
    assert_eq!(beat.body["metadata"]["name"], name.as_str());
    beat.echo();
}
