//! Client traffic through a cluster-aware client that follows MOVED and ASK: keys written
//! before a change, a writer writing during it, and the check that every acknowledged write
//! reads back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::task::JoinHandle;

use super::servers::DEFAULT_PASSWORD;

pub async fn connect(nodes: &[SocketAddr]) -> ClusterConnection {
    let infos: Vec<_> = nodes
        .iter()
        .map(|a| {
            ConnectionAddr::Tcp(a.ip().to_string(), a.port())
                .into_connection_info()
                .expect("connection info")
        })
        .collect();
    let client = ClusterClient::builder(infos)
        // `AUTH default <password>`, which a default user without a password accepts too.
        .username("default")
        .password(DEFAULT_PASSWORD)
        .retries(8)
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
        .build()
        .expect("cluster client");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match client.get_async_connection().await {
            Ok(conn) => return conn,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("cluster client: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cluster client: {e}"),
        }
    }
}

/// Writes `count` keys `<prefix>:<n>` = `n`, returns them.
pub async fn write_keys(nodes: &[SocketAddr], prefix: &str, count: usize) -> Vec<(String, String)> {
    let conn = connect(nodes).await;
    let keys: Vec<(String, String)> = (0..count)
        .map(|n| (format!("{prefix}:{n}"), n.to_string()))
        .collect();
    futures::stream::iter(keys.clone())
        .for_each_concurrent(32, |(key, value)| {
            let mut conn = conn.clone();
            async move {
                let () = redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("SET {key}: {e}"));
            }
        })
        .await;
    keys
}

/// Reads every key back through a fresh cluster client and asserts its value.
pub async fn verify(nodes: &[SocketAddr], keys: &[(String, String)]) {
    let conn = connect(nodes).await;
    let wrong: Vec<String> = futures::stream::iter(keys.to_vec())
        .map(|(key, want)| {
            let mut conn = conn.clone();
            async move {
                let mut last = None;
                for _ in 0..20 {
                    match redis::cmd("GET")
                        .arg(&key)
                        .query_async::<Option<String>>(&mut conn)
                        .await
                    {
                        Ok(got) if got.as_deref() == Some(want.as_str()) => return None,
                        Ok(got) => return Some(format!("{key}: want {want}, got {got:?}")),
                        Err(e) => last = Some(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(format!("{key}: {}", last.unwrap_or_default()))
            }
        })
        .buffer_unordered(32)
        .filter_map(|x| async move { x })
        .collect()
        .await;
    assert!(
        wrong.is_empty(),
        "{} of {} keys lost or wrong, e.g. {:?}",
        wrong.len(),
        keys.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// A client writing `<prefix>:<n>` one after another, retrying each write until it is
/// acknowledged; only acknowledged writes count.
pub struct Writer {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<WriterReport>,
}

#[derive(Debug)]
pub struct WriterReport {
    pub acked: Vec<(String, String)>,
    pub failed_attempts: u64,
}

impl Writer {
    pub async fn start(nodes: &[SocketAddr], prefix: &str) -> Self {
        let mut conn = connect(nodes).await;
        let stop = Arc::new(AtomicBool::new(false));
        let prefix = prefix.to_owned();
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let mut report = WriterReport {
                acked: Vec::new(),
                failed_attempts: 0,
            };
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let key = format!("{prefix}:{n}");
                let value = format!("v{n}");
                let reply: redis::RedisResult<()> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .query_async(&mut conn)
                    .await;
                match reply {
                    Ok(()) => {
                        report.acked.push((key, value));
                        n += 1;
                    }
                    Err(_) => {
                        report.failed_attempts += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            report
        });
        Self { stop, handle }
    }

    pub async fn finish(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.await.expect("writer task")
    }
}
