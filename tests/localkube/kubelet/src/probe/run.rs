//! Running one probe against a running container.

use std::net::Ipv4Addr;
use std::time::Duration;

use redis::IntoConnectionInfo;

use super::Action;
use super::valkey_cli::CliCommand;
use crate::sandbox::{self, ExecOutcome, plan::Identity};

/// The running container a probe looks at.
#[derive(Debug, Clone)]
pub struct Target {
    pub pod_ip: Ipv4Addr,
    pub pid: u32,
    pub identity: Option<Identity>,
    pub env: Vec<(String, String)>,
}

/// Loopback inside the pod is the pod IP seen from the host.
fn host_of(host: &Option<String>, pod_ip: Ipv4Addr) -> String {
    match host.as_deref() {
        None | Some("" | "localhost" | "127.0.0.1" | "::1") => pod_ip.to_string(),
        Some(h) => h.to_string(),
    }
}

/// Runs the probe; the result and a message for failures.
pub async fn run(action: &Action, target: &Target, timeout: Duration) -> (bool, Option<String>) {
    match action {
        Action::Unsupported(why) => (false, Some(why.clone())),
        Action::Sleep(d) => {
            tokio::time::sleep(*d).await;
            (true, None)
        }
        Action::Tcp { host, port } => {
            let host = host_of(host, target.pod_ip);
            match tokio::time::timeout(
                timeout,
                tokio::net::TcpStream::connect((host.as_str(), *port)),
            )
            .await
            {
                Ok(Ok(_)) => (true, None),
                Ok(Err(e)) => (false, Some(format!("dial tcp {host}:{port}: {e}"))),
                Err(_) => (false, Some(format!("dial tcp {host}:{port}: i/o timeout"))),
            }
        }
        Action::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let host = host_of(host, target.pod_ip);
            if *https {
                // No TLS client here: an HTTPS endpoint that accepts connections counts as up.
                let connect = tokio::net::TcpStream::connect((host.as_str(), *port));
                return match tokio::time::timeout(timeout, connect).await {
                    Ok(Ok(_)) => (true, None),
                    _ => (
                        false,
                        Some(format!("HTTPS probe: cannot connect to {host}:{port}")),
                    ),
                };
            }
            match super::http::get(&host, *port, path, headers, timeout).await {
                Ok(code) if (200..400).contains(&code) => (true, None),
                Ok(code) => (
                    false,
                    Some(format!("HTTP probe failed with statuscode: {code}")),
                ),
                Err(e) => (
                    false,
                    Some(format!("Get \"http://{host}:{port}{path}\": {e}")),
                ),
            }
        }
        Action::Valkey(cli) => valkey(cli, target, timeout).await,
        Action::Exec(argv) => {
            match sandbox::exec_in(target.pid, &target.identity, argv, &target.env, timeout).await {
                Ok(ExecOutcome::Exited(status, _)) if status.success() => (true, None),
                Ok(ExecOutcome::Exited(status, output)) => (
                    false,
                    Some(format!(
                        "command {argv:?} exited with {status}: {}",
                        output.trim()
                    )),
                ),
                Ok(ExecOutcome::TimedOut) => (
                    false,
                    Some(format!("command {argv:?} timed out after {timeout:?}")),
                ),
                Err(e) => (false, Some(e.to_string())),
            }
        }
    }
}

async fn valkey(cli: &CliCommand, target: &Target, timeout: Duration) -> (bool, Option<String>) {
    let host = host_of(&cli.host, target.pod_ip);
    let attempt = async {
        let mut settings = redis::RedisConnectionInfo::default().set_db(cli.db);
        if let Some(user) = &cli.user {
            settings = settings.set_username(user);
        }
        if let Some(password) = &cli.password {
            settings = settings.set_password(password);
        }
        let info = redis::ConnectionAddr::Tcp(host.clone(), cli.port)
            .into_connection_info()?
            .set_redis_settings(settings);
        let client = redis::Client::open(info)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let (name, args) = cli
            .args
            .split_first()
            .map(|(n, a)| (n.clone(), a.to_vec()))
            .unwrap_or_default();
        redis::cmd(&name)
            .arg(args)
            .query_async::<redis::Value>(&mut conn)
            .await
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(redis::Value::ServerError(e))) => (false, Some(format!("{e:?}"))),
        Ok(Ok(_)) => (true, None),
        Ok(Err(e)) => (
            false,
            Some(format!("valkey-cli {}: {e}", cli.args.join(" "))),
        ),
        Err(_) => (
            false,
            Some(format!("valkey-cli to {host}:{}: timed out", cli.port)),
        ),
    }
}
