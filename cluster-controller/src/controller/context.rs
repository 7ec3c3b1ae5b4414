//! What every pass of the ValkeyCluster controller shares, and what it keeps per cluster between
//! passes (forgotten when the cluster goes).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::Store;
use plumbing::backoff::Backoff;
use plumbing::events::EventPublisher;
use plumbing::{ObjectKey, Reconciler};
use valkey_api::v1alpha1::{ValkeyCluster, ValkeyNode};

use super::auth;
use super::error::Error;
use super::reconcile;
use crate::client::{Credentials, RedisClient, RedisClientConfig};
use crate::engine::{Engine, EngineConfig};

pub struct Context {
    pub client: Client,
    pub events: EventPublisher,
    /// The ValkeyNodes of every cluster (those with the cluster label), from a watch cache.
    pub nodes: Store<ValkeyNode>,
    /// One engine per cluster and operator password: it keeps Valkey connections between passes.
    engines: Mutex<HashMap<ObjectKey, (String, Engine<RedisClient>)>>,
    /// Valkey actions that failed in a row, per cluster: each retry waits longer.
    pub action_failures: Backoff,
}

impl Context {
    pub fn new(client: Client, events: EventPublisher, nodes: Store<ValkeyNode>) -> Self {
        Self {
            client,
            events,
            nodes,
            engines: Mutex::new(HashMap::new()),
            action_failures: Backoff::default(),
        }
    }

    /// The cluster's engine, made anew when the operator's password changed.
    pub fn engine(&self, key: &ObjectKey, credentials: &Credentials) -> Engine<RedisClient> {
        let fingerprint = credentials
            .password
            .as_ref()
            .map(|p| auth::fingerprint(p.expose()))
            .unwrap_or_default();
        let mut engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, engine)) = engines.get(key)
            && *known == fingerprint
        {
            return engine.clone();
        }
        let client = RedisClient::new(RedisClientConfig {
            credentials: credentials.clone(),
            ..RedisClientConfig::default()
        });
        // With authentication the replication user is fenced (off in the ACL file at every start).
        let config = EngineConfig {
            fence_user: credentials
                .username
                .as_ref()
                .map(|_| auth::REPLICATION_USER.to_owned()),
            ..EngineConfig::for_credentials(credentials)
        };
        let engine = Engine::new(client, config);
        engines.insert(key.clone(), (fingerprint, engine.clone()));
        engine
    }

    /// How many clusters have an engine: what `forget` must bring down.
    #[cfg(test)]
    pub fn engines(&self) -> usize {
        self.engines.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Reconciler for Context {
    type Object = ValkeyCluster;
    type Error = Error;

    async fn reconcile(&self, cluster: &ValkeyCluster, key: &ObjectKey) -> Result<Requeue, Error> {
        reconcile::pass(self, cluster, key).await
    }

    fn forget(&self, key: &ObjectKey) {
        self.engines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.action_failures.succeeded(key);
    }
}
