//! What every pass of the ValkeyCluster controller shares, and what it keeps per cluster between
//! passes (forgotten when the cluster goes), on the floor's [`crate::parent::context`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use plumbing::ObjectKey;
use plumbing::backoff::Backoff;
use plumbing::events::EventPublisher;
use plumbing::leader::Claims;
use plumbing::valkey_tls::Trust;
use valkey_api::v1alpha1::{ValkeyBackup, ValkeyNode};

use crate::access::rights::REPLICATION_USER;
use crate::client::{Credentials, RedisClient, RedisClientConfig};
use crate::engine::{Engine, EngineConfig};
use crate::parent::applier::Applier;
use crate::parent::context::{Kept, ParentMemory, Settings, engine_fingerprint};
use crate::parent::monitoring::KindPresence;
use crate::parent::secret_cache::SecretCache;

/// What the controller reads from watches: the clusters' children (each kind by the cluster
/// label), and their Secrets.
pub struct Watched {
    pub nodes: Store<ValkeyNode>,
    pub services: Store<Service>,
    pub budgets: Store<PodDisruptionBudget>,
    pub policies: Store<NetworkPolicy>,
    pub secrets: SecretCache,
}

pub struct Context {
    pub client: Client,
    pub events: EventPublisher,
    /// Per-cluster action counts and work left, beside the reconcile metrics.
    pub metrics: plumbing::Metrics,
    /// The ValkeyNodes of every cluster (those with the cluster label), from a watch cache.
    pub nodes: Store<ValkeyNode>,
    /// Per cluster: one engine per operator password and CA (it keeps Valkey connections between
    /// passes), and the memory (its servers' users, the operator's passwords).
    pub(super) kept: Kept<Engine<RedisClient>>,
    /// Valkey actions that failed in a row, per cluster: each retry waits longer.
    pub action_failures: Backoff,
    /// Kubernetes stages that failed in a row, per cluster (see [`crate::parent::stop`]).
    pub stage_failures: Backoff,
    pub settings: Settings,
    /// The Secrets its parents read (see [`crate::parent::secret_cache`]).
    pub secrets: SecretCache,
    /// One Lease per cluster: a cluster another controller holds is left alone.
    pub claims: Claims,
    /// The clusters' Services (client and external, see [`super::external`]), disruption budgets
    /// and NetworkPolicies (those with the cluster label), from watch caches: what the applier
    /// compares with.
    pub services: Store<Service>,
    pub budgets: Store<PodDisruptionBudget>,
    pub policies: Store<NetworkPolicy>,
    /// What this controller last wrote of each of those children.
    pub applier: Applier,
    /// Whether the PodMonitor kind exists, as last found out.
    pub pod_monitors: KindPresence,
    /// The ValkeyBackups, from the backup controller's cache (none when the API serves none):
    /// no slot move starts while one of the cluster is captured.
    pub backups: Option<Store<DeserializeGuard<ValkeyBackup>>>,
}

impl Context {
    pub fn new(
        client: Client,
        events: EventPublisher,
        metrics: plumbing::Metrics,
        watched: Watched,
        settings: Settings,
        claims: Claims,
    ) -> Self {
        let Watched {
            nodes,
            services,
            budgets,
            policies,
            secrets,
        } = watched;
        Self {
            claims,
            client,
            events,
            metrics,
            nodes,
            kept: Kept::default(),
            action_failures: Backoff::default(),
            stage_failures: Backoff::default(),
            settings,
            secrets,
            services,
            budgets,
            policies,
            applier: Applier::default(),
            pod_monitors: KindPresence::default(),
            backups: None,
        }
    }

    /// What the controller remembers of the cluster `key`.
    pub fn memory(&self, key: &ObjectKey) -> Arc<ParentMemory> {
        self.kept.memory(key)
    }

    /// The cluster's engine, made anew when the operator's password or the CA it verifies the
    /// servers against (`trust`, with TLS) changed.
    pub fn engine(
        &self,
        key: &ObjectKey,
        credentials: &Credentials,
        trust: Option<&Trust>,
    ) -> Engine<RedisClient> {
        self.kept
            .engine(key, engine_fingerprint(credentials, trust), || {
                let client = RedisClient::new(RedisClientConfig {
                    credentials: credentials.clone(),
                    trust: trust.cloned(),
                    ..RedisClientConfig::default()
                });
                // The replication user is fenced (off in the ACL file at every start), with the
                // clients' authentication on or off.
                let config = EngineConfig {
                    fence_user: Some(REPLICATION_USER.to_owned()),
                    ..EngineConfig::for_credentials(credentials)
                };
                Engine::new(client, config)
            })
    }

    /// How many clusters have an engine: what `forget` must bring down.
    #[cfg(test)]
    pub fn engines(&self) -> usize {
        self.kept.engines()
    }
}
