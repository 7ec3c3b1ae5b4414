//! The shared harness of the end-to-end tests.
//!
//! Tests run against the cluster named by `KUBECONFIG` (`make` starts the local control plane and
//! exports it); without it, `.localkube/kubeconfig` of this checkout is used when present. Tests
//! never start a cluster themselves. Each test works in a namespace of its own ([`TestNamespace`]),
//! deleted when the guard drops, so independent tests can run in parallel.

pub mod backup_bench;
pub mod backups;
pub mod bench;
pub mod chaos;
pub mod cluster;
pub mod faults;
pub mod fleet;
pub mod formation;
pub mod helm;
pub mod metrics;
pub mod node;
pub mod operator;
pub mod outside;
pub mod pool;
pub mod realnode;
pub mod record;
pub mod replication;
pub mod resharding;
pub mod side_by_side;
pub mod valkey_py;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio::io::AsyncWriteExt;

/// Label on every namespace a test creates, to find leftovers.
pub const TEST_LABEL: &str = "valkey-operator.e2e/test";

#[derive(Debug, thiserror::Error)]
pub enum E2eError {
    #[error("no cluster: set KUBECONFIG (make test does) or start one with `make localkube`")]
    NoCluster,
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("timed out after {after:?} waiting for {what}; last observed: {last}")]
    Timeout {
        what: String,
        after: Duration,
        last: String,
    },
    #[error("`kubectl {args}` failed ({status}): {stderr}")]
    Kubectl {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("running {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("valkey at {addr}: {source}")]
    Valkey {
        addr: String,
        source: redis::RedisError,
    },
    #[error("{0}")]
    Check(String),
}

pub type Result<T, E = E2eError> = std::result::Result<T, E>;

/// The checkout's root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The local control plane's directory of this checkout.
pub fn localkube_dir() -> PathBuf {
    repo_root().join(".localkube")
}

/// The kubeconfig the tests use: `KUBECONFIG`, else this checkout's local cluster.
pub fn kubeconfig_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let local = localkube_dir().join("kubeconfig");
    if local.exists() {
        return Ok(local);
    }
    Err(E2eError::NoCluster)
}

/// Whether the cluster is this checkout's local control plane (for localkube-only checks).
pub fn is_localkube() -> bool {
    let local = localkube_dir().join("kubeconfig");
    match (kubeconfig_path(), std::fs::canonicalize(&local)) {
        (Ok(path), Ok(local)) => std::fs::canonicalize(path).is_ok_and(|p| p == local),
        _ => false,
    }
}

/// A client for the test cluster.
pub async fn client() -> Result<kube::Client> {
    Ok(kube::Client::try_from(client_config().await?)?)
}

/// A client that does not retry what the API server refuses for now (429): a refused eviction
/// reaches the test as it came, instead of being retried until a disruption budget allows it.
pub async fn client_without_retries() -> Result<kube::Client> {
    let mut config = client_config().await?;
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

async fn client_config() -> Result<kube::Config> {
    let path = kubeconfig_path()?;
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&path).map_err(|e| E2eError::Kubeconfig {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| E2eError::Kubeconfig {
            path,
            message: e.to_string(),
        })?;
    Ok(config)
}

/// A namespace for one test, deleted (without waiting) when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: kube::Client,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<random>`.
    pub async fn create(prefix: &str) -> Result<Self> {
        let client = client().await?;
        let suffix = random_letters(6);
        // A namespace name is at most 63 characters: long prefixes (the chaos scenarios') are
        // cut to fit beside "e2e-" and the suffix, and the label keeps the same cut prefix.
        let prefix =
            prefix[..prefix.len().min(52)].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        let name = format!("e2e-{prefix}-{suffix}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_LABEL.to_string(), prefix.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        // Pods need the namespace's default ServiceAccount (created by the controller manager).
        let sa_api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        wait_until(
            Duration::from_secs(60),
            "the default ServiceAccount",
            || {
                let sa_api = sa_api.clone();
                async move {
                    Ok(match sa_api.get_opt("default").await? {
                        Some(_) => Poll::Ready(()),
                        None => Poll::NotYet("not created yet".into()),
                    })
                }
            },
        )
        .await?;
        Ok(Self { name, client })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates or replaces the Secret `name` holding `password` under the key `password` (the
    /// shape `spec.auth.passwordSecret` and users' Secrets take by default).
    pub async fn put_password(&self, name: &str, password: &str) -> Result<()> {
        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            data: Some(
                [(
                    "password".to_owned(),
                    k8s_openapi::ByteString(password.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        self.api::<k8s_openapi::api::core::v1::Secret>()
            .patch(
                name,
                &kube::api::PatchParams::apply("e2e-test").force(),
                &kube::api::Patch::Apply(&secret),
            )
            .await?;
        Ok(())
    }

    /// `kubectl apply` of a YAML manifest in this namespace.
    pub async fn apply(&self, manifest: &str) -> Result<String> {
        kubectl_stdin(&["apply", "-n", &self.name, "-f", "-"], manifest).await
    }

    /// `kubectl ... -n <ns>`.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        kubectl(&all).await
    }

    /// The namespace's Events, one line each: `<type> <reason> <note>`.
    pub async fn events(&self) -> Result<String> {
        self.kubectl(&[
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.type} {.reason} {.note}{\"\\n\"}{end}",
        ])
        .await
    }

    /// `kubectl get ...` in this namespace as its header and its rows, split into columns.
    pub async fn table(&self, args: &[&str]) -> Result<(Vec<String>, Vec<Vec<String>>)> {
        let out = self.kubectl(args).await?;
        let mut lines = out.lines();
        let header = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        let rows = lines
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        Ok((header, rows))
    }

    pub async fn pod(&self, name: &str) -> Result<Pod> {
        Ok(self.api::<Pod>().get(name).await?)
    }

    /// Waits until the pod is Running with condition Ready=True; returns it.
    pub async fn wait_pod_ready(&self, name: &str, within: Duration) -> Result<Pod> {
        let api = self.api::<Pod>();
        wait_until(within, &format!("pod {}/{name} Ready", self.name), || {
            let api = api.clone();
            async move {
                let Some(pod) = api.get_opt(name).await? else {
                    return Ok(Poll::NotYet("no such pod".into()));
                };
                Ok(if pod_ready(&pod) {
                    Poll::Ready(pod)
                } else {
                    Poll::NotYet(describe_pod(&pod))
                })
            }
        })
        .await
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("E2E_KEEP_NAMESPACES").is_some() {
            eprintln!("keeping namespace {} (E2E_KEEP_NAMESPACES)", self.name);
            return;
        }
        // Drop cannot await: kubectl deletes in the background while the next test runs.
        let _ = std::process::Command::new(kubectl_program())
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .env("KUBECONFIG", kubeconfig_path().unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `n` random lowercase letters.
pub fn random_letters(n: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// Prints how long the test took when it ends, pass or fail.
pub struct Took(&'static str, std::time::Instant);

impl Took {
    pub fn start(test: &'static str) -> Self {
        Self(test, std::time::Instant::now())
    }
}

impl Drop for Took {
    fn drop(&mut self) {
        eprintln!("{} took {:?}", self.0, self.1.elapsed());
    }
}

/// The result of one look at the condition being waited for.
pub enum Poll<T> {
    Ready(T),
    /// Not yet; the text says what was seen, for the timeout message.
    NotYet(String),
}

/// Polls `check` every half second until it is ready or `within` has passed; fails with the
/// last observed state. API errors count as "not yet" (with their text), so a restarting
/// component does not fail a test that would otherwise pass.
pub async fn wait_until<T, F, Fut>(within: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Poll<T>>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = match check().await {
            Ok(Poll::Ready(value)) => return Ok(value),
            Ok(Poll::NotYet(seen)) => seen,
            Err(e) => format!("error: {e}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: what.to_string(),
                after: within,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `api` finds `name` and `check` holds for it; returns it.
pub async fn wait_object<K, F>(
    api: &Api<K>,
    name: &str,
    within: Duration,
    what: &str,
    check: F,
) -> Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    wait_object_described(api, name, within, what, check, |_| {
        "present, not yet as expected".into()
    })
    .await
}

/// [`wait_object`], whose timeout says what `describe` makes of the object last seen.
pub async fn wait_object_described<K, F, D>(
    api: &Api<K>,
    name: &str,
    within: Duration,
    what: &str,
    check: F,
    describe: D,
) -> Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
    D: Fn(&K) -> String,
{
    wait_until(within, &format!("{name}: {what}"), || async {
        Ok(match api.get_opt(name).await? {
            None => Poll::NotYet("not found".into()),
            Some(object) if check(&object) => Poll::Ready(object),
            Some(object) => Poll::NotYet(describe(&object)),
        })
    })
    .await
}

/// Waits until `name` no longer exists.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, within: Duration) -> Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_until(within, &format!("{name} deleted"), || async {
        Ok(match api.get_opt(name).await? {
            Some(_) => Poll::NotYet("still there".into()),
            None => Poll::Ready(()),
        })
    })
    .await
}

/// An object's UID (empty before the API server has given it one).
pub fn uid<K: kube::Resource>(object: &K) -> String {
    object.meta().uid.clone().unwrap_or_default()
}

/// An object's resourceVersion (empty before the API server has given it one).
pub fn resource_version<K: kube::Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap_or_default()
}

pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether `members` are `wanted` many, each ready on its desired revision: none is still to
/// come, to go or to restart, so a scaling or a roll is over.
pub fn members_rolled(members: &[valkey_api::v1alpha1::ValkeyNode], wanted: usize) -> bool {
    members.len() == wanted
        && members.iter().all(|m| {
            // A status of an earlier spec says nothing of the roll the latest one asks for.
            m.status.as_ref().is_some_and(|s| {
                s.observed_generation == m.metadata.generation
                    && s.ready
                    && s.current_revision.is_some()
                    && s.current_revision == s.desired_revision
            })
        })
}

/// A one-line summary of a pod for wait messages.
pub fn describe_pod(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<String> = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| {
            let state = c.state.clone().unwrap_or_default();
            let s = if let Some(w) = state.waiting {
                format!(
                    "waiting {} {}",
                    w.reason.unwrap_or_default(),
                    w.message.unwrap_or_default()
                )
            } else if let Some(t) = state.terminated {
                format!(
                    "terminated {} ({})",
                    t.exit_code,
                    t.reason.unwrap_or_default()
                )
            } else if state.running.is_some() {
                "running".to_string()
            } else {
                "unknown".to_string()
            };
            format!(
                "{}: {s}, ready={}, restarts={}",
                c.name, c.ready, c.restart_count
            )
        })
        .collect();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}{}",
                c.type_,
                c.status,
                c.reason
                    .as_ref()
                    .map(|r| format!("({r})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    format!(
        "phase={} node={} ip={} conditions=[{}] containers=[{}] message={}",
        status.phase.unwrap_or_default(),
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        status.pod_ip.unwrap_or_default(),
        conditions.join(" "),
        containers.join("; "),
        status.message.unwrap_or_default()
    )
}

/// The pod's IP once it has one.
pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// kubectl to use: `$KUBECTL`, else the local control plane's, else `kubectl` on PATH.
pub fn kubectl_program() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL").filter(|k| !k.is_empty()) {
        return PathBuf::from(k);
    }
    let local = localkube_dir().join("bin/kubectl");
    if local.exists() {
        return local;
    }
    PathBuf::from("kubectl")
}

async fn run_kubectl(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let program = kubectl_program();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig_path()?)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let spawn_err = |source| E2eError::Spawn {
        program: program.display().to_string(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_err)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).await.map_err(spawn_err)?;
        drop(pipe);
    }
    let out = child.wait_with_output().await.map_err(spawn_err)?;
    if !out.status.success() {
        return Err(E2eError::Kubectl {
            args: args.join(" "),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs kubectl against the test cluster; returns stdout.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    run_kubectl(args, None).await
}

/// Runs kubectl with `input` on stdin (`-f -`).
pub async fn kubectl_stdin(args: &[&str], input: &str) -> Result<String> {
    run_kubectl(args, Some(input)).await
}

/// The CA (`ca.crt`, PEM) of the certificate Secret `name`: what a kind's servers' certificates
/// chain to, and what its clients verify against.
pub async fn ca_of(ns: &TestNamespace, name: &str) -> Result<Vec<u8>> {
    let secret = ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get(name)
        .await?;
    secret
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .map(|v| v.0)
        .ok_or_else(|| E2eError::Check(format!("Secret {name} has no ca.crt")))
}

/// A Valkey connection to `ip:port` from the host.
pub async fn valkey(ip: &str, port: u16) -> Result<redis::aio::MultiplexedConnection> {
    let addr = format!("{ip}:{port}");
    let err = |source| E2eError::Valkey {
        addr: addr.clone(),
        source,
    };
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(err)?;
    let connect = client.get_multiplexed_async_connection();
    match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(conn) => conn.map_err(err),
        Err(_) => Err(E2eError::Check(format!(
            "connecting to valkey at {addr} timed out"
        ))),
    }
}

/// A connection to `ip:6379` as the Valkey ACL user `user`.
pub async fn valkey_as(
    ip: &str,
    user: &str,
    password: &str,
) -> Result<redis::aio::MultiplexedConnection> {
    use redis::IntoConnectionInfo;
    let err = |source| E2eError::Valkey {
        addr: ip.to_owned(),
        source,
    };
    let info = redis::ConnectionAddr::Tcp(ip.to_owned(), 6379)
        .into_connection_info()
        .map_err(err)?
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_username(user)
                .set_password(password),
        );
    let client = redis::Client::open(info).map_err(err)?;
    match tokio::time::timeout(
        Duration::from_secs(10),
        client.get_multiplexed_async_connection(),
    )
    .await
    {
        Ok(conn) => conn.map_err(err),
        Err(_) => Err(E2eError::Check(format!("connecting to {ip} timed out"))),
    }
}

/// Runs one Valkey command and returns its reply as a string.
pub async fn valkey_cmd(
    conn: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> Result<String> {
    let (name, rest) = args
        .split_first()
        .ok_or_else(|| E2eError::Check("empty valkey command".into()))?;
    let reply: redis::Value =
        redis::cmd(name)
            .arg(rest)
            .query_async(conn)
            .await
            .map_err(|source| E2eError::Valkey {
                addr: "connection".into(),
                source,
            })?;
    Ok(match reply {
        redis::Value::SimpleString(s) => s,
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::Int(i) => i.to_string(),
        redis::Value::Okay => "OK".into(),
        redis::Value::Nil => String::new(),
        other => format!("{other:?}"),
    })
}

/// Fails the test unless `ok`, with `message`.
pub fn check(ok: bool, message: impl Into<String>) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(E2eError::Check(message.into()))
    }
}

/// The local kubelet's files (logs, pid records) of a pod, when the cluster is localkube.
pub fn localkube_kubelet_dir() -> PathBuf {
    localkube_dir().join("kubelet")
}

/// The local kubelet's log of a container (its latest run), for diagnostics on localkube.
pub fn localkube_container_log(pod: &Pod, container: &str) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    let uid = pod.metadata.uid.as_deref()?;
    let dir = localkube_kubelet_dir()
        .join("logs")
        .join(format!("{ns}_{name}_{uid}"))
        .join(container);
    let mut logs: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let n = p.file_stem()?.to_str()?.parse().ok()?;
            Some((n, p))
        })
        .collect();
    logs.sort();
    std::fs::read_to_string(&logs.last()?.1).ok()
}

/// Waits until every ValkeyNode's status describes its current spec with ConfigApplied True:
/// the running server has every live setting the new release's cluster-controller asked for.
pub async fn wait_live_settings_applied(ns: &TestNamespace) -> Result<()> {
    wait_until(
        Duration::from_secs(90),
        "every ValkeyNode's live settings applied to its running server",
        || async move {
            let nodes = ns
                .api::<valkey_api::v1alpha1::ValkeyNode>()
                .list(&kube::api::ListParams::default())
                .await?;
            let behind: Vec<String> = nodes
                .items
                .iter()
                .filter_map(|n| {
                    let status = n.status.clone().unwrap_or_default();
                    let applied = node::condition(n, "ConfigApplied")
                        .map(|c| (c.status.clone(), c.message.clone()));
                    let current = status.observed_generation == n.metadata.generation;
                    (!current || applied.as_ref().is_none_or(|(s, _)| s != "True")).then(|| {
                        format!(
                            "{}: generation {:?} observed {:?}, ConfigApplied {applied:?}",
                            kube::ResourceExt::name_any(n),
                            n.metadata.generation,
                            status.observed_generation
                        )
                    })
                })
                .collect();
            Ok(if behind.is_empty() {
                Poll::Ready(())
            } else {
                Poll::NotYet(behind.join("; "))
            })
        },
    )
    .await
}
