//! What a backup reads before and while it captures: its source (from the watch caches), the
//! source's members, the operator's credentials for them, and what each member's server says.

use std::sync::Arc;
use std::time::Duration;
use valkey_api::v1alpha1::StatusReason;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{
    Auth, BackupSourceKind, ValkeyBackup, ValkeyCluster, ValkeyReplication,
};

use super::choose::Server;
use crate::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
use crate::engine::Member;
use crate::parent::auth;
use crate::parent::conditions::Problem;
use crate::parent::kind_caches::KindCaches;
use crate::valkey::commands::{self, InfoSection};
use crate::valkey::info::{self, LinkStatus, Role};
use crate::valkey::{cluster_nodes, slot_migrations, value};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// The source of a backup, as the caches hold it.
#[derive(Clone)]
pub enum Source {
    Cluster(Arc<ValkeyCluster>),
    Replication(Arc<ValkeyReplication>),
}

impl Source {
    pub fn name(&self) -> String {
        match self {
            Self::Cluster(c) => c.name_any(),
            Self::Replication(r) => r.name_any(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cluster(_) => "ValkeyCluster",
            Self::Replication(_) => "ValkeyReplication",
        }
    }

    pub fn uid(&self) -> String {
        match self {
            Self::Cluster(c) => c.meta().uid.clone(),
            Self::Replication(r) => r.meta().uid.clone(),
        }
        .unwrap_or_default()
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// How many shards it has: one snapshot each.
    pub fn shards(&self) -> u32 {
        match self {
            Self::Cluster(c) => u32::try_from(c.spec.shards).unwrap_or(0),
            Self::Replication(_) => 1,
        }
    }

    pub fn tls(&self) -> bool {
        match self {
            Self::Cluster(c) => c.spec.tls.enabled,
            Self::Replication(r) => r.spec.tls.enabled,
        }
    }

    fn auth(&self) -> &Auth {
        match self {
            Self::Cluster(c) => &c.spec.auth,
            Self::Replication(r) => &r.spec.auth,
        }
    }

    /// The users its servers hold, by reference, for the manifest (never a password).
    pub fn users(&self) -> Vec<backup::manifest::UserRef> {
        let auth = self.auth();
        let mut users = vec![backup::manifest::UserRef {
            name: crate::access::rights::DEFAULT_USER.to_owned(),
            secret: auth.enabled.then(|| match &auth.password_secret {
                Some(reference) => format!("{}/{}", reference.name, reference.key),
                None => format!(
                    "{}/{}",
                    auth::generated_password_secret_name(&self.name()),
                    auth::CLIENT_PASSWORD_KEY
                ),
            }),
        }];
        users.extend(
            auth.users
                .iter()
                .flatten()
                .map(|u| backup::manifest::UserRef {
                    name: u.name.clone(),
                    secret: Some(format!(
                        "{}/{}",
                        u.password_secret.name, u.password_secret.key
                    )),
                }),
        );
        users
    }
}

/// The caches of the sources, filled by their own kinds' controllers; `None` for a kind this
/// process does not reconcile.
#[derive(Clone)]
pub struct Sources {
    pub clusters: Option<KindCaches<ValkeyCluster>>,
    pub replications: Option<KindCaches<ValkeyReplication>>,
}

impl Sources {
    /// The backup's source, or why there is none to back up.
    pub fn find(&self, backup: &ValkeyBackup) -> Result<Source, Problem> {
        let namespace = backup.namespace().unwrap_or_default();
        let spec = &backup.spec.source;
        let kind = spec.kind.as_str();
        let found = match spec.kind {
            BackupSourceKind::ValkeyCluster => self.clusters.as_ref().map(|c| {
                c.parents
                    .get(&ObjectRef::new(&spec.name).within(&namespace))
                    .map(|guard| readable(&guard.0).map(Source::Cluster))
            }),
            BackupSourceKind::ValkeyReplication => self.replications.as_ref().map(|c| {
                c.parents
                    .get(&ObjectRef::new(&spec.name).within(&namespace))
                    .map(|guard| readable(&guard.0).map(Source::Replication))
            }),
        };
        match found {
            Some(Some(Ok(source))) => Ok(source),
            Some(Some(Err(error))) => Err(Problem {
                reason: StatusReason::SourceUnreadable,
                message: format!(
                    "{kind} {} cannot be read ({error}): its own status says what to correct; create a new ValkeyBackup once it is corrected.",
                    spec.name
                ),
            }),
            Some(None) => Err(Problem {
                reason: StatusReason::SourceNotFound,
                message: format!(
                    "{kind} {} is not in namespace {namespace}: a backup is of an existing {kind} of its own namespace; create a new ValkeyBackup once it exists.",
                    spec.name
                ),
            }),
            None => Err(Problem {
                reason: StatusReason::SourceKindNotReconciled,
                message: format!(
                    "This operator does not reconcile {kind}s (the chart's clusterController.kinds), so it cannot back one up."
                ),
            }),
        }
    }

    /// The source's members, from its kind's ValkeyNode cache (by label and owner uid).
    pub fn members(&self, source: &Source) -> Vec<Member> {
        match source {
            Source::Cluster(c) => self.clusters.as_ref().map_or_else(Vec::new, |caches| {
                let found = crate::cluster::observe::member_nodes(&caches.nodes, c);
                crate::cluster::observe::engine_members(&found, c)
            }),
            Source::Replication(r) => self.replications.as_ref().map_or_else(Vec::new, |caches| {
                let found = crate::replication::controller::observe::member_nodes(&caches.nodes, r);
                crate::replication::controller::observe::engine_members(&found)
            }),
        }
    }
}

/// The object a guard holds, as a source of its own (the backup keeps it while it captures).
fn readable<K: Clone>(
    object: &Result<K, kube::core::error_boundary::InvalidObject>,
) -> Result<Arc<K>, String> {
    match object {
        Ok(object) => Ok(Arc::new(object.clone())),
        Err(invalid) => Err(invalid.error.clone()),
    }
}

/// The operator's logins on the source's servers: its own user (INFO, CLUSTER NODES) and the
/// backup user (the capture).
#[derive(Clone)]
pub struct Logins {
    pub operator: Credentials,
    pub backup_password: String,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Logins(***)")
    }
}

/// What reading the operator's Secret of the source can end in.
pub enum LoginsRead {
    Found(Logins),
    /// Not yet (the source's controller has not written it, or not with the backup user).
    Wait(Problem),
    /// The API failed: retry.
    Error(kube::Error),
}

/// The operator's passwords for `source`, from `<source>-operator` (only when the operator
/// made it for this very source).
pub async fn logins(client: &kube::Client, namespace: &str, source: &Source) -> LoginsRead {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = auth::operator_secret_name(&source.name());
    let secret = match secrets.get_opt(&name).await {
        Ok(secret) => secret,
        Err(error) => return LoginsRead::Error(error),
    };
    let found = secret
        .filter(|s| auth::owned_by(s, &source.uid()))
        .and_then(|s| {
            Some(Logins {
                operator: Credentials::user(
                    auth::OPERATOR_USER,
                    auth::secret_string(&s, auth::OPERATOR_PASSWORD_KEY)?,
                ),
                backup_password: auth::secret_string(&s, auth::BACKUP_PASSWORD_KEY)?,
            })
        });
    match found {
        Some(logins) => LoginsRead::Found(logins),
        None => LoginsRead::Wait(Problem {
            reason: StatusReason::BackupUserNotReady,
            message: format!(
                "Secret {name}, where the operator keeps the backup user's password for {} {}, does not hold it yet: the backup starts once the {} has been reconciled with it.",
                source.kind(),
                source.name(),
                source.kind()
            ),
        }),
    }
}

/// A client that reaches the source's servers as the operator.
pub fn client(logins: &Logins) -> RedisClient {
    RedisClient::new(RedisClientConfig {
        credentials: logins.operator.clone(),
        ..RedisClientConfig::default()
    })
}

/// What every reachable member says; the names of those that did not answer.
pub async fn servers(
    client: &RedisClient,
    members: &[Member],
    cluster: bool,
) -> (Vec<Server>, Vec<String>) {
    let reads = futures::future::join_all(members.iter().map(|m| server(client, m, cluster))).await;
    let mut servers = Vec::new();
    let mut unanswered = Vec::new();
    for (member, read) in members.iter().zip(reads) {
        match read {
            Ok(server) => servers.push(server),
            Err(error) => {
                tracing::debug!(member = %member.name, %error, "member did not answer");
                unanswered.push(member.name.clone());
            }
        }
    }
    (servers, unanswered)
}

/// `cmd`'s text reply; `what` names the command in errors.
async fn run(
    client: &RedisClient,
    member: &Member,
    cmd: &redis::Cmd,
    what: &str,
) -> Result<String, String> {
    let address = member
        .address
        .ok_or_else(|| format!("{} has no address yet", member.name))?;
    let reply = client
        .command(address, cmd, COMMAND_TIMEOUT)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    value::text(&reply).ok_or_else(|| format!("{what}: {}", value::describe(&reply)))
}

/// What `member`'s server says (its INFO, and in cluster mode its node and slots).
pub async fn server(
    client: &RedisClient,
    member: &Member,
    cluster: bool,
) -> Result<Server, String> {
    let address = member
        .address
        .ok_or_else(|| format!("{} has no address yet", member.name))?;
    let info = commands::info(&[
        InfoSection::Server,
        InfoSection::Replication,
        InfoSection::Persistence,
        InfoSection::Keyspace,
    ]);
    let text = run(
        client,
        member,
        &info,
        "INFO server replication persistence keyspace",
    )
    .await?;
    let info = info::parse(&text).map_err(|e| e.to_string())?;
    let primary = info.role().map_err(|e| e.to_string())? == Role::Primary;
    let offset = if primary {
        info.master_repl_offset().map_err(|e| e.to_string())?
    } else {
        info.slave_repl_offset()
            .map_err(|e| e.to_string())?
            .unwrap_or(0)
    };
    let link_up = info.master_link_status().ok().flatten() == Some(LinkStatus::Up);
    let syncing = info.master_sync_in_progress().ok().flatten() == Some(true);
    let loading = info.loading().unwrap_or(true);
    let version = info.server_version().map_err(|e| e.to_string())?;
    let mut server = Server {
        member: member.name.clone(),
        shard: member.shard,
        address,
        ready: member.ready,
        primary,
        primary_host: info.get("master_host").map(str::to_owned),
        in_step: link_up && !syncing && !loading,
        offset,
        history: ["master_replid", "master_replid2"]
            .iter()
            .filter_map(|field| info.get(field))
            .filter(|id| !id.is_empty() && !id.bytes().all(|b| b == b'0'))
            .map(str::to_owned)
            .collect(),
        keys: keys(&info),
        version: version.to_string(),
        node_id: None,
        slots: Default::default(),
        slots_moving: false,
    };
    if cluster {
        let text = run(client, member, &commands::cluster_nodes(), "CLUSTER NODES").await?;
        let nodes = cluster_nodes::parse(&text).map_err(|e| e.to_string())?;
        let myself = nodes.myself().map_err(|e| e.to_string())?;
        server.node_id = Some(myself.id.to_string());
        server.slots = myself.slots.clone();
        server.slots_moving = nodes
            .nodes()
            .iter()
            .any(|n| !n.migrating.is_empty() || !n.importing.is_empty());
        if version.major >= 9 && primary {
            let reply = client
                .command(
                    address,
                    &commands::cluster_getslotmigrations(),
                    COMMAND_TIMEOUT,
                )
                .await
                .map_err(|e| format!("CLUSTER GETSLOTMIGRATIONS: {e}"))?;
            let jobs = slot_migrations::parse(&reply).map_err(|e| e.to_string())?;
            server.slots_moving |= jobs.iter().any(|j| !j.state.is_finished());
        }
    }
    Ok(server)
}

/// The keys of database 0, from `INFO keyspace` (`db0:keys=12,expires=0,...`).
fn keys(info: &info::Info) -> u64 {
    info.get("db0")
        .and_then(|line| line.split(',').find_map(|f| f.strip_prefix("keys=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use kube::core::DeserializeGuard;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use valkey_api::v1alpha1::ValkeyNode;

    use super::*;

    /// A kind's caches holding `objects` (as JSON, read through the guard as a controller reads
    /// them) and `nodes`.
    fn caches<K>(objects: &[serde_json::Value], nodes: &[serde_json::Value]) -> KindCaches<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + 'static,
    {
        let (parents, mut writer) = reflector::store::<DeserializeGuard<K>>();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            let guard: DeserializeGuard<K> =
                serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{e}"));
            writer.apply_watcher_event(&Event::InitApply(guard));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let (node_store, mut writer) = reflector::store::<ValkeyNode>();
        writer.apply_watcher_event(&Event::Init);
        for node in nodes {
            let node = serde_json::from_value(node.clone()).unwrap_or_else(|e| panic!("{e}"));
            writer.apply_watcher_event(&Event::InitApply(node));
        }
        writer.apply_watcher_event(&Event::InitDone);
        KindCaches {
            parents,
            nodes: node_store,
        }
    }

    fn cluster(name: &str, shards: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"shards": shards}
        })
    }

    fn member(name: &str, cluster: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyNode",
            "metadata": {
                "name": name, "namespace": "ns",
                "labels": {"valkey.io/cluster": cluster, "valkey.io/shard": "0", "valkey.io/index": "0"},
                "ownerReferences": [{"apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyCluster",
                    "name": cluster, "uid": format!("uid-{cluster}"), "controller": true}]
            },
            "spec": {"image": "valkey/valkey:9.1"}
        })
    }

    fn backup_of(kind: &str, name: &str) -> ValkeyBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyBackup",
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {
                "source": {"kind": kind, "name": name},
                "store": {"s3": {"bucket": "bb", "endpoint": "http://store:9000",
                    "credentials": {"secretName": "s"}}}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn reason(found: Result<Source, Problem>) -> Option<StatusReason> {
        found.err().map(|p| p.reason)
    }

    #[test]
    fn a_source_is_read_from_its_kinds_own_caches() {
        let sources = Sources {
            clusters: Some(caches::<ValkeyCluster>(
                &[
                    cluster("orders", serde_json::json!(1)),
                    cluster("broken", serde_json::json!("three")),
                ],
                &[member("orders-0-0", "orders"), member("other-0-0", "other")],
            )),
            replications: None,
        };
        let found = sources.find(&backup_of("ValkeyCluster", "orders"));
        let source = found.unwrap_or_else(|p| panic!("{}", p.message));
        assert_eq!(source.name(), "orders");
        let members = sources.members(&source);
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["orders-0-0"], "only the cluster's own members");

        let broken = sources.find(&backup_of("ValkeyCluster", "broken"));
        assert_eq!(reason(broken), Some(StatusReason::SourceUnreadable));
        let missing = sources.find(&backup_of("ValkeyCluster", "gone"));
        assert_eq!(reason(missing), Some(StatusReason::SourceNotFound));
        let other_kind = sources.find(&backup_of("ValkeyReplication", "orders"));
        assert_eq!(
            reason(other_kind),
            Some(StatusReason::SourceKindNotReconciled)
        );
    }
}
