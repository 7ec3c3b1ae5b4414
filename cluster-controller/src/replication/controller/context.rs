//! What every pass of the ValkeyReplication controller shares, and what it keeps per replication
//! between passes (forgotten when the replication goes).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::runtime::reflector::Store;
use plumbing::ObjectKey;
use plumbing::backoff::Backoff;
use plumbing::events::EventPublisher;
use plumbing::leader::Claims;
use plumbing::valkey_tls::Trust;
use valkey_api::v1alpha1::ValkeyNode;

use crate::client::{Credentials, RedisClient, RedisClientConfig};
use crate::parent::applier::Applier;
use crate::parent::context::{Kept, ParentMemory, Settings, engine_fingerprint};
use crate::parent::monitoring::KindPresence;
use crate::parent::secret_cache::SecretCache;
use crate::replication::engine::Engine;

pub struct Context {
    pub client: Client,
    pub events: EventPublisher,
    /// The ValkeyNodes of every replication (those with the replication label).
    pub nodes: Store<ValkeyNode>,
    /// The Services of every replication.
    pub services: Store<Service>,
    pub settings: Settings,
    /// The Secrets its parents read (see [`crate::parent::secret_cache`]).
    pub secrets: SecretCache,
    /// One Lease per replication: one another controller holds is left alone.
    pub claims: Claims,
    /// Valkey actions that failed in a row, per replication.
    pub action_failures: Backoff,
    /// Kubernetes stages that failed in a row, per replication (see `parent::stop`).
    pub stage_failures: Backoff,
    /// Reconcile and action metrics, beside the shell's.
    pub metrics: plumbing::Metrics,
    /// Per replication: one engine per operator password (it keeps connections between passes),
    /// and the memory (its servers' users, the operator's passwords, the other holder).
    pub(super) kept: Kept<Engine<RedisClient>>,
    /// Whether the PodMonitor kind exists, as last found out.
    pub pod_monitors: KindPresence,
    /// The disruption budget of every replication, from a watch cache.
    pub budgets: Store<PodDisruptionBudget>,
    /// What this controller last wrote of each replication's budget.
    pub applier: Applier,
}

/// What the controller reads from watches: the replications' children, and their Secrets.
pub struct Watched {
    pub nodes: Store<ValkeyNode>,
    pub services: Store<Service>,
    pub budgets: Store<PodDisruptionBudget>,
    pub secrets: SecretCache,
}

impl Context {
    pub fn new(
        client: Client,
        events: EventPublisher,
        watched: Watched,
        settings: Settings,
        claims: Claims,
        metrics: plumbing::Metrics,
    ) -> Self {
        let Watched {
            nodes,
            services,
            budgets,
            secrets,
        } = watched;
        Self {
            client,
            events,
            nodes,
            services,
            settings,
            secrets,
            claims,
            action_failures: Backoff::default(),
            stage_failures: Backoff::default(),
            metrics,
            kept: Kept::default(),
            pod_monitors: KindPresence::default(),
            budgets,
            applier: Applier::default(),
        }
    }

    pub fn memory(&self, key: &ObjectKey) -> Arc<ParentMemory> {
        self.kept.memory(key)
    }

    /// The replication's engine, made anew when the operator's password or the CA it verifies
    /// the servers against (`trust`, with TLS) changed.
    pub fn engine(
        &self,
        key: &ObjectKey,
        credentials: &Credentials,
        trust: Option<&Trust>,
    ) -> Engine<RedisClient> {
        self.kept
            .engine(key, engine_fingerprint(credentials, trust), || {
                crate::replication::engine::engine(RedisClient::new(RedisClientConfig {
                    credentials: credentials.clone(),
                    trust: trust.cloned(),
                    ..RedisClientConfig::default()
                }))
            })
    }
}
