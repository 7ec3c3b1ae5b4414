//! Running one probe against a running container.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::Action;
use super::dial;
use super::valkey_cli::CliCommand;
use crate::sandbox::{self, ExecOutcome, plan::Identity};

/// The running container a probe looks at.
#[derive(Debug, Clone)]
pub struct Target {
    pub pod_ip: Ipv4Addr,
    /// The node's address: the source of tcpSocket and httpGet probes.
    pub node_ip: Ipv4Addr,
    /// The pod's network namespace, where exec probes connect from.
    pub netns: PathBuf,
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

/// The address `valkey-cli -h` names, as seen from inside the pod: the default and `localhost`
/// are the pod's loopback, and the pod's own name is its IP (its /etc/hosts says so).
fn cli_address(host: &Option<String>, target: &Target) -> Result<IpAddr, String> {
    match host.as_deref() {
        None | Some("" | "localhost") => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        Some(h) => h.parse::<IpAddr>().or_else(|_| {
            let own_name = target.env.iter().any(|(k, v)| k == "HOSTNAME" && v == h);
            if own_name {
                Ok(IpAddr::V4(target.pod_ip))
            } else {
                Err(format!("valkey-cli -h {h}: only addresses, localhost and the pod's own name resolve here"))
            }
        }),
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
            match dial::from_node(target.node_ip, &host, *port, timeout).await {
                Ok(_) => (true, None),
                Err(e) => (false, Some(format!("dial tcp {host}:{port}: {e}"))),
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
                return match dial::from_node(target.node_ip, &host, *port, timeout).await {
                    Ok(_) => (true, None),
                    Err(_) => (
                        false,
                        Some(format!("HTTPS probe: cannot connect to {host}:{port}")),
                    ),
                };
            }
            match super::http::get(target.node_ip, &host, *port, path, headers, timeout).await {
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
    let ip = match cli_address(&cli.host, target) {
        Ok(ip) => ip,
        Err(e) => return (false, Some(e)),
    };
    let addr = SocketAddr::new(ip, cli.port);
    let attempt = async {
        let stream = dial::in_pod(&target.netns, addr, timeout)
            .await
            .map_err(redis::RedisError::from)?;
        let mut settings = redis::RedisConnectionInfo::default().set_db(cli.db);
        if let Some(user) = &cli.user {
            settings = settings.set_username(user);
        }
        if let Some(password) = &cli.password {
            settings = settings.set_password(password);
        }
        // The probe's own timeout bounds it all, not the client's shorter defaults.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let (mut conn, driver) =
            redis::aio::MultiplexedConnection::new_with_config(&settings, stream, config).await?;
        // The driver ends with the connection, at the end of this probe.
        tokio::spawn(driver);
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
        Err(_) => (false, Some(format!("valkey-cli to {addr}: timed out"))),
    }
}
