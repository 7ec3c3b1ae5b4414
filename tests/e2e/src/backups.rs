//! ValkeyBackups into localkube's object store, and their snapshots served again by a
//! valkey-server on the host: what the backup tests and the backup benchmark share.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use redis::AsyncCommands;
use valkey_api::v1alpha1::{BackupPhase, ValkeyBackup, ValkeyBackupStatus};

use crate::{E2eError, Poll, Result, TestNamespace, check, localkube_dir, wait_until};

/// localkube's object store, as the host reaches it (tests/localkube/README.md).
pub const STORE_URL: &str = "http://10.213.0.1:20070";
pub const STORE_BUCKET: &str = "backups";
pub const STORE_ACCESS_KEY: &str = "localkube";
pub const STORE_SECRET_KEY: &str = "localkube-objectstore-secret";
/// The folder of the bucket the tests' backups go under.
pub const PREFIX: &str = "e2e";

/// A client of localkube's store, under [`PREFIX`].
pub fn store() -> Result<backup::Store> {
    let mut config = backup::StoreConfig::s3_compatible(
        STORE_URL,
        STORE_BUCKET,
        STORE_ACCESS_KEY,
        STORE_SECRET_KEY,
    );
    config.prefix = PREFIX.to_owned();
    backup::Store::new(&config).map_err(|e| E2eError::Check(e.to_string()))
}

/// A ValkeyBackup of the `kind` `source` into `endpoint` with the credentials Secret `secret`.
pub fn backup_of(kind: &str, name: &str, source: &str, endpoint: &str, secret: &str) -> String {
    format!(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: {name}}}\nspec:\n  \
         source: {{kind: {kind}, name: {source}}}\n  \
         store: {{s3: {{endpoint: '{endpoint}', bucket: {STORE_BUCKET}, prefix: {PREFIX}, \
         credentials: {{secretName: {secret}}}}}}}\n"
    )
}

/// The store's credentials in `ns` as the Secret `store`, as a user would create them.
pub async fn credentials(ns: &TestNamespace) -> Result<()> {
    ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: store}}\nstringData: \
         {{AWS_ACCESS_KEY_ID: {STORE_ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: {STORE_SECRET_KEY}}}\n"
    ))
    .await
    .map(|_| ())
}

/// Waits until the backup `name` is Completed or Failed; returns its status.
pub async fn finished_in(
    ns: &TestNamespace,
    name: &str,
    within: Duration,
) -> Result<ValkeyBackupStatus> {
    let api = ns.api::<ValkeyBackup>();
    wait_until(
        within,
        &format!("ValkeyBackup {name} Completed or Failed"),
        || {
            let api = api.clone();
            async move {
                let status = api.get(name).await?.status.unwrap_or_default();
                Ok(match status.phase {
                    Some(BackupPhase::Completed | BackupPhase::Failed) => Poll::Ready(status),
                    phase => {
                        Poll::NotYet(format!("{phase:?}: {}", status.message.unwrap_or_default()))
                    }
                })
            }
        },
    )
    .await
}

/// Fails unless `status` is Completed, naming the backup and why.
pub fn completed(name: &str, status: &ValkeyBackupStatus) -> Result<()> {
    check(
        status.phase == Some(BackupPhase::Completed),
        format!(
            "{name} did not complete: {:?} {:?}",
            status.reason, status.message
        ),
    )
}

/// Backs up the `kind` `source` of `ns` as ValkeyBackup `name` (into localkube's store, with
/// the Secret `store`) and waits for it; its status, once Completed (anything else fails).
pub async fn completed_backup(
    ns: &TestNamespace,
    kind: &str,
    name: &str,
    source: &str,
    within: Duration,
) -> Result<ValkeyBackupStatus> {
    ns.apply(&backup_of(kind, name, source, STORE_URL, "store"))
        .await?;
    let status = finished_in(ns, name, within).await?;
    completed(name, &status)?;
    Ok(status)
}

/// Deletes every ValkeyBackup of `ns` (and so their objects), waiting until they are gone.
pub async fn delete_backups(ns: &TestNamespace) -> Result<()> {
    ns.kubectl(&[
        "delete",
        "valkeybackup",
        "--all",
        "--wait=true",
        "--timeout=60s",
    ])
    .await
    .map(|_| ())
}

/// Waits until no member of the `kind` (`cluster`, `replication`) `name` has initialData left
/// and each runs its revision, ready: a restored object has let its snapshots go.
pub async fn members_let_go(
    ns: &TestNamespace,
    kind: &str,
    name: &str,
    within: Duration,
) -> Result<()> {
    let nodes = ns.api::<valkey_api::v1alpha1::ValkeyNode>();
    let selector = format!("valkey.io/{kind}={name}");
    wait_until(
        within,
        &format!("{name}'s members without initialData, each on its revision"),
        || {
            let (nodes, selector) = (nodes.clone(), selector.clone());
            async move {
                let left: Vec<String> = nodes
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await?
                    .items
                    .into_iter()
                    .filter(|n| {
                        let status = n.status.clone().unwrap_or_default();
                        n.spec.initial_data.is_some()
                            || status.desired_revision.is_none()
                            || status.current_revision != status.desired_revision
                            || !status.ready
                    })
                    .map(|n| n.name_any())
                    .collect();
                Ok(if left.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("with initialData or not restarted: {left:?}"))
                })
            }
        },
    )
    .await
}

/// A folder of the test's own under the system's temporary folder, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/<tag>-<pid>`, created empty.
    pub fn new(tag: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| E2eError::Check(format!("{}: {e}", dir.display())))?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Valkey 9.1 programs of localkube's image, as the host runs them (`bin/<name>`, with the
/// image's `lib` on `LD_LIBRARY_PATH`).
pub fn valkey_program(name: &str) -> tokio::process::Command {
    let image = localkube_dir().join("images/valkey-9.1");
    let mut command = tokio::process::Command::new(image.join("bin").join(name));
    command.env("LD_LIBRARY_PATH", image.join("lib"));
    command
}

/// A valkey-server of the test that loaded a snapshot and serves it on loopback; killed when
/// dropped, its folder removed.
pub struct Loaded {
    child: tokio::process::Child,
    pub port: u16,
    _dir: TempDir,
}

/// Loads `rdb` into a valkey-server of the test (see [`serve`]).
pub async fn load(rdb: &[u8], tag: &str) -> Result<Loaded> {
    let dir = TempDir::new(&format!("e2e-backup-{tag}"))?;
    std::fs::write(dir.path().join("dump.rdb"), rdb).map_err(|e| E2eError::Check(e.to_string()))?;
    serve(dir, Duration::from_secs(60)).await
}

/// Starts the Valkey 9.1 server of localkube's image on `dir/dump.rdb` (no saving, no
/// append-only file) and returns once it answers PING rather than `-LOADING`, asked every 10 ms,
/// or fails after `within`.
pub async fn serve(dir: TempDir, within: Duration) -> Result<Loaded> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| E2eError::Check(e.to_string()))?
        .port();
    let child = valkey_program("valkey-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--dir",
            &dir.path().display().to_string(),
            "--dbfilename",
            "dump.rdb",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| E2eError::Check(format!("valkey-server: {e}")))?;
    let mut loaded = Loaded {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + within;
    let mut last = String::from("not started");
    loop {
        if let Ok(Some(exit)) = loaded.child.try_wait() {
            return Err(E2eError::Check(format!(
                "valkey-server on {} exited: {exit}",
                loaded._dir.path().display()
            )));
        }
        if let Ok(mut conn) = crate::valkey("127.0.0.1", port).await {
            match redis::cmd("PING").query_async::<String>(&mut conn).await {
                Ok(_) => return Ok(loaded),
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: "the loaded snapshot to answer PING".into(),
                after: within,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl Loaded {
    async fn connection(&self) -> Result<redis::aio::MultiplexedConnection> {
        crate::valkey("127.0.0.1", self.port).await
    }

    fn error(&self, source: redis::RedisError) -> E2eError {
        E2eError::Valkey {
            addr: format!("127.0.0.1:{}", self.port),
            source,
        }
    }

    /// Its DBSIZE.
    pub async fn keys(&self) -> Result<u64> {
        let mut conn = self.connection().await?;
        redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(e))
    }

    /// Every key it holds with its value (strings only).
    pub async fn contents(&self) -> Result<BTreeMap<String, String>> {
        let mut conn = self.connection().await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(e))?;
        let mut out = BTreeMap::new();
        for chunk in keys.chunks(500) {
            let values: Vec<String> = conn.mget(chunk).await.map_err(|e| self.error(e))?;
            out.extend(chunk.iter().cloned().zip(values));
        }
        Ok(out)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
