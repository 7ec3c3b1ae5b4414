//! A minimal HTTP/1.1 GET for httpGet probes: success is a status from 200 to 399.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("request: {0}")]
    Io(std::io::Error),
    #[error("malformed status line {0:?}")]
    Malformed(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// The request bytes, with the headers a kubelet sends.
pub fn request(host: &str, port: u16, path: &str, headers: &[(String, String)]) -> String {
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {host}:{port}\r\n"));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        req.push_str("User-Agent: kube-probe/1.36\r\n");
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
    {
        req.push_str("Accept: */*\r\n");
    }
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    req
}

/// The status code of a response's first line.
pub fn status_code(head: &str) -> Result<u16, HttpError> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|c| c.parse().ok())) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
        _ => Err(HttpError::Malformed(line.to_string())),
    }
}

pub async fn get(
    source: std::net::Ipv4Addr,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<u16, HttpError> {
    let attempt = async {
        let mut stream = super::dial::from_node(source, host, port, timeout)
            .await
            .map_err(HttpError::Connect)?;
        stream
            .write_all(request(host, port, path, headers).as_bytes())
            .await
            .map_err(HttpError::Io)?;
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await.map_err(HttpError::Io)?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        status_code(&String::from_utf8_lossy(&head))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| HttpError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_has_host_and_custom_headers() {
        let r = request("10.0.0.2", 8080, "healthz", &[("X-A".into(), "b".into())]);
        assert!(r.starts_with("GET /healthz HTTP/1.1\r\n"));
        assert!(r.contains("Host: 10.0.0.2:8080\r\n"));
        assert!(r.contains("X-A: b\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
    }

    #[test]
    fn status_line_parsing() {
        assert_eq!(status_code("HTTP/1.1 204 No Content\r\n").ok(), Some(204));
        assert!(status_code("garbage").is_err());
    }

    #[tokio::test]
    async fn get_reads_the_status_of_a_local_server() -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let server = tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 503 Unavailable\r\n\r\n").await;
            }
        });
        let loopback = std::net::Ipv4Addr::LOCALHOST;
        let code = get(
            loopback,
            "127.0.0.1",
            port,
            "/",
            &[],
            Duration::from_secs(5),
        )
        .await?;
        assert_eq!(code, 503);
        server.await?;
        Ok(())
    }
}
