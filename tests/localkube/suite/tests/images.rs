//! The image table's images do what their upstream images do: Valkey 9.1 and 8.0 serve TLS with
//! their own valkey-cli, and the Redis exporter serves Valkey's metrics.

use std::path::Path;
use std::time::Duration;

use e2e::{E2eError, Poll, Result, TestNamespace, check, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{POD_READY, host, skip};

/// A CA and a server certificate for `ip` (openssl on the host), in the cert-manager shape.
async fn certificates(dir: &Path, ip: &str) -> Result<()> {
    let d = |f: &str| dir.join(f).display().to_string();
    host(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            &d("ca.key"),
            "-out",
            &d("ca.crt"),
        ],
    )
    .await?;
    host(
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=valkey",
            "-keyout",
            &d("tls.key"),
            "-out",
            &d("tls.csr"),
        ],
    )
    .await?;
    std::fs::write(
        dir.join("san.ext"),
        format!("subjectAltName=IP:{ip},IP:127.0.0.1\n"),
    )
    .map_err(|e| E2eError::Check(format!("writing san.ext: {e}")))?;
    host(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &d("tls.csr"),
            "-CA",
            &d("ca.crt"),
            "-CAkey",
            &d("ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &d("san.ext"),
            "-out",
            &d("tls.crt"),
        ],
    )
    .await
    .map(|_| ())
}

/// A Valkey of `image` with only a TLS port: Ready by an exec probe of the image's own
/// `valkey-cli --tls`, then PINGed over TLS from the host, and refusing plain text.
async fn serves_tls(image: &str, prefix: &str) -> Result<()> {
    let cli = e2e::localkube_dir().join(format!(
        "images/valkey-{}/bin/valkey-cli",
        image.rsplit(':').next().unwrap_or_default()
    ));
    if !cli.exists() {
        return skip(&format!("no {} in the image table", cli.display()));
    }
    let ns = TestNamespace::create(prefix).await?;
    // The pod's IP is only known once it runs: the certificate names the loopback (valkey-cli
    // verifies the chain against the CA, not the name).
    let dir = std::env::temp_dir().join(format!("lk-tls-{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| E2eError::Check(format!("{}: {e}", dir.display())))?;
    certificates(&dir, "127.0.0.1").await?;
    let files: Vec<String> = ["tls.crt", "tls.key", "ca.crt"]
        .iter()
        .map(|f| format!("--from-file={f}={}", dir.join(f).display()))
        .collect();
    let mut args = vec!["create", "secret", "generic", "tls"];
    args.extend(files.iter().map(String::as_str));
    ns.kubectl(&args).await?;
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: tls}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: valkey
    image: {image}
    command: [valkey-server, --port, "0", --tls-port, "6380", --protected-mode, "no",
      --tls-cert-file, /tls/tls.crt, --tls-key-file, /tls/tls.key, --tls-ca-cert-file, /tls/ca.crt,
      --tls-auth-clients, "no"]
    readinessProbe:
      exec: {{command: [valkey-cli, --tls, --cacert, /tls/ca.crt, -p, "6380", ping]}}
      periodSeconds: 1
    volumeMounts: [{{name: tls, mountPath: /tls, readOnly: true}}]
  volumes: [{{name: tls, secret: {{secretName: tls}}}}]
"#
    ))
    .await?;
    let pod = ns.wait_pod_ready("tls", POD_READY).await?;
    let ip = e2e::pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let ca = dir.join("ca.crt").display().to_string();
    let cli = cli.display().to_string();
    let over_tls = host(
        &cli,
        &["--tls", "--cacert", &ca, "-h", &ip, "-p", "6380", "ping"],
    )
    .await?;
    let plain = host(&cli, &["-h", &ip, "-p", "6380", "ping"]).await;
    let _ = std::fs::remove_dir_all(&dir);
    check(
        over_tls.trim() == "PONG",
        format!("PING over TLS from the host: {over_tls:?}"),
    )?;
    check(
        !matches!(&plain, Ok(out) if out.trim() == "PONG"),
        format!("the TLS port answered plain text: {plain:?}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_9_1_serves_tls() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("checks localkube's image table");
    }
    serves_tls("valkey/valkey:9.1", "tls91").await
}

#[tokio::test(flavor = "multi_thread")]
async fn valkey_8_0_serves_tls() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("checks localkube's image table");
    }
    serves_tls("valkey/valkey:8.0", "tls80").await
}

/// GET http://ip:port/path from the host; the body.
async fn http_get(ip: &str, port: u16, path: &str) -> Result<String> {
    let err = |e: std::io::Error| E2eError::Check(format!("GET http://{ip}:{port}{path}: {e}"));
    let mut stream = tokio::net::TcpStream::connect((ip, port))
        .await
        .map_err(err)?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .await
        .map_err(err)?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.map_err(err)?;
    Ok(body)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_redis_exporter_image_serves_valkey_metrics() -> Result<()> {
    if !e2e::is_localkube() {
        return skip("checks localkube's image table");
    }
    let ns = TestNamespace::create("exporter").await?;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: exported}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: valkey
    image: valkey/valkey:9.1
    command: [valkey-server, --save, "", --appendonly, "no"]
  - name: exporter
    image: oliver006/redis_exporter:v1.45.0
    args: [--redis.addr=redis://localhost:6379]
    ports: [{name: metrics, containerPort: 9121}]
    readinessProbe:
      httpGet: {path: /metrics, port: metrics}
      periodSeconds: 1
"#,
    )
    .await?;
    let pod = ns.wait_pod_ready("exported", POD_READY).await?;
    let ip = e2e::pod_ip(&pod).ok_or_else(|| E2eError::Check("no pod IP".into()))?;
    let metrics = wait_until(Duration::from_secs(30), "redis_up 1 on /metrics", || {
        let ip = ip.clone();
        async move {
            let body = http_get(&ip, 9121, "/metrics").await?;
            Ok(if body.lines().any(|l| l.trim() == "redis_up 1") {
                Poll::Ready(body)
            } else {
                Poll::NotYet(body.lines().filter(|l| l.starts_with("redis_up")).collect())
            })
        }
    })
    .await?;
    check(
        metrics.contains("redis_connected_slaves") || metrics.contains("redis_connected_replicas"),
        "no replication metric on /metrics",
    )
}
