//! Test fixtures: a sample ValkeyReplication, and a context whose Kubernetes API is a script.

use kube::runtime::reflector;
use plumbing::events::EventPublisher;
use plumbing::testing::{ApiServer, mock_client};
use valkey_api::v1alpha1::{ValkeyNode, ValkeyReplication};

use super::context::Context;

pub const REPLICATION: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyReplication
metadata: {name: orders, namespace: prod, uid: 0000-7, generation: 1}
spec:
  replicas: 2
  config: {maxmemory: 64mb}
"#;

pub fn replication(yaml: &str) -> ValkeyReplication {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// A context whose client talks to the returned script, with empty caches.
pub fn context() -> (Context, ApiServer, reflector::store::Writer<ValkeyNode>) {
    let (client, api) = mock_client();
    let events = EventPublisher::new(client.clone(), "test-controller", Some("test".into()));
    let (nodes, writer) = reflector::store();
    let (services, _) = reflector::store();
    let (budgets, _) = reflector::store();
    let claims = plumbing::leader::Claims::new(client.clone(), "test/prod".into(), "replication");
    let ctx = Context::new(
        client.clone(),
        events,
        super::context::Watched {
            nodes,
            services,
            budgets,
            secrets: crate::parent::secret_cache::SecretCache::unwatched(client.clone()),
        },
        Default::default(),
        claims,
        plumbing::Metrics::default(),
    );
    // No PodMonitor kind: scripted passes make no discovery request (see `monitoring`).
    ctx.pod_monitors.assume(false);
    (ctx, api, writer)
}
