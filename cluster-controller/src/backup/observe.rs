//! What a backup reads before and while it captures: its source (from the watch caches), the
//! source's members, the operator's credentials for them, and what each member's server says.

use std::sync::Arc;
use std::time::Duration;
use valkey_api::v1alpha1::StatusReason;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use valkey_api::v1alpha1::{
    Auth, BackupSourceKind, ValkeyBackup, ValkeyCluster, ValkeyNode, ValkeyReplication,
};

use super::choose::Server;
use crate::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
use crate::engine::Member;
use crate::parent::auth;
use crate::parent::conditions::Problem;
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

    /// The members, from the ValkeyNode cache (its own, by label and owner uid).
    pub fn members(&self, nodes: &Store<ValkeyNode>) -> Vec<Member> {
        match self {
            Self::Cluster(c) => {
                let found = crate::cluster::observe::member_nodes(nodes, c);
                crate::cluster::observe::engine_members(&found, c)
            }
            Self::Replication(r) => {
                let found = crate::replication::controller::observe::member_nodes(nodes, r);
                crate::replication::controller::observe::engine_members(&found)
            }
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

/// The caches of the sources; `None` for a kind this controller does not reconcile.
#[derive(Clone)]
pub struct Sources {
    pub clusters: Option<Store<ValkeyCluster>>,
    pub replications: Option<Store<ValkeyReplication>>,
}

impl Sources {
    /// The backup's source, or why there is none to back up.
    pub fn find(&self, backup: &ValkeyBackup) -> Result<Source, Problem> {
        let namespace = backup.namespace().unwrap_or_default();
        let spec = &backup.spec.source;
        let kind = spec.kind.as_str();
        let found = match spec.kind {
            BackupSourceKind::ValkeyCluster => self.clusters.as_ref().map(|s| {
                s.get(&ObjectRef::new(&spec.name).within(&namespace))
                    .map(Source::Cluster)
            }),
            BackupSourceKind::ValkeyReplication => self.replications.as_ref().map(|s| {
                s.get(&ObjectRef::new(&spec.name).within(&namespace))
                    .map(Source::Replication)
            }),
        };
        match found {
            Some(Some(source)) => Ok(source),
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
