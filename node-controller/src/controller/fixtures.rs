//! Test fixtures: a sample ValkeyNode, and a context whose Kubernetes API is a script
//! ([`plumbing::testing`]) and whose caches are empty, so the glue of each stage runs in
//! milliseconds without a cluster.

use kube::runtime::reflector;
use plumbing::events::EventPublisher;
use plumbing::testing::{ApiServer, mock_client};
use valkey_api::v1alpha1::ValkeyNode;

use super::context::{Context, Stores};

pub const NODE: &str = r#"
apiVersion: valkey.io/v1alpha1
kind: ValkeyNode
metadata: {name: cache-0-0, namespace: prod, uid: 0000-2, generation: 1}
spec:
  image: valkey/valkey:9.1
  config: {cluster-enabled: "yes"}
"#;

pub fn node(yaml: &str) -> ValkeyNode {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// A context whose client talks to the returned script, with empty caches.
pub fn context() -> (Context, ApiServer) {
    let (client, api) = mock_client();
    let events = EventPublisher::new(client.clone(), "test-controller", Some("test".into()));
    let stores = Stores {
        pods: reflector::store().0,
        pods_by_node: plumbing::index::LabelIndex::new(crate::names::NODE_LABEL),
        stateful_sets: reflector::store().0,
        deployments: reflector::store().0,
        config_maps: reflector::store().0,
        pvcs: reflector::store().0,
        secrets: plumbing::secret_cache::SecretCache::unwatched(client.clone()),
    };
    (Context::new(client, events, stores), api)
}
