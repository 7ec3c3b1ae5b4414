//! What Valkey itself says: PING and the replication role, asked over the pod IP.

use std::time::Duration;

use plumbing::valkey_tls::{self, Trust};
use redis::RedisConnectionInfo;
use valkey_api::contract::VALKEY_PORT;
use valkey_api::v1alpha1::Role;

const TIMEOUT: Duration = Duration::from_secs(3);

/// Credentials for the node-controller's own connection. Debug never shows the password.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// What Valkey answered the probe.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `PING` answered `PONG`; `role`, `version` and `run_id` from INFO when they parsed.
    Pong { role: Option<Role>, server: Server },
    /// Valkey did not answer as it should; the text says what happened (never a secret).
    Failed(String),
}

/// How an answer that refused the node-controller's credentials begins.
const REFUSED: &str = "Valkey refused the health user";

impl Answer {
    /// Whether Valkey refused the credentials (a wrong password, an unknown user): what reading
    /// the Secret again may mend. A server that does not answer at all is not such a refusal.
    pub fn refused_credentials(&self) -> bool {
        matches!(self, Self::Failed(why) if why.starts_with(REFUSED))
    }
}

/// What INFO says of the server process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Server {
    /// `valkey_version` (or `redis_version` of an older server).
    pub version: Option<String>,
    /// Changes with every start of the server process.
    pub run_id: Option<String>,
}

/// Asks the Valkey (or Sentinel) at `ip`:`port` for PING and its role (over TLS, verified
/// against `trust`, when the node serves TLS).
pub async fn ask(
    ip: &str,
    port: u16,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
) -> Answer {
    match tokio::time::timeout(TIMEOUT * 2, ask_inner(ip, port, credentials, trust)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Answer::Failed(describe_at(ip, port, &e)),
        Err(_) => Answer::Failed(no_answer_at(ip, port)),
    }
}

/// The one sentence for a server that cannot be reached. A connection to an address where
/// nothing answers ends either in the connect timeout or in the kernel's "No route to host"
/// (its neighbour lookup gives up after about as long), whichever comes first; quoting either
/// would change the status on every look, a write each time for nothing a person can use.
pub fn no_answer(ip: &str) -> String {
    no_answer_at(ip, VALKEY_PORT)
}

fn no_answer_at(ip: &str, port: u16) -> String {
    format!("no answer from {ip}:{port} (the connection timed out or the host is unreachable)")
}

async fn ask_inner(
    ip: &str,
    port: u16,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
) -> redis::RedisResult<Answer> {
    let mut connection = connect_at(ip, port, credentials, trust).await?;
    let pong: String = redis::cmd("PING").query_async(&mut connection).await?;
    if pong != "PONG" {
        return Ok(Answer::Failed(format!("PING answered {pong:?}")));
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("replication")
        .query_async(&mut connection)
        .await?;
    Ok(Answer::Pong {
        role: parse_role(&info),
        server: parse_server(&info),
    })
}

/// A connection to the Valkey at `ip` (TLS verified against `trust`, when given), authenticated as `credentials`. AUTH is sent as a command
/// of its own rather than by the client library's handshake, which would replace Valkey's words
/// (`WRONGPASS ...`) with its own; those words are what the Ready condition quotes.
pub async fn connect(
    ip: &str,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    connect_at(ip, VALKEY_PORT, credentials, trust).await
}

async fn connect_at(
    ip: &str,
    port: u16,
    credentials: Option<&Credentials>,
    trust: Option<&Trust>,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    let client = valkey_tls::client(ip, port, trust, settings)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    if let Some(c) = credentials {
        let () = redis::cmd("AUTH")
            .arg(&c.username)
            .arg(&c.password)
            .query_async(&mut connection)
            .await?;
    }
    Ok(connection)
}

/// `role:master` / `role:slave` in `INFO replication` (newer servers may say primary/replica);
/// a Sentinel says `redis_mode:sentinel` (and `server_mode:sentinel` from Valkey 8) in
/// `INFO server`, and has no replication section.
pub fn parse_role(info: &str) -> Option<Role> {
    let field = |name: &str| info.lines().find_map(|l| l.trim().strip_prefix(name));
    if field("server_mode:").or_else(|| field("redis_mode:")) == Some("sentinel") {
        return Some(Role::Sentinel);
    }
    let role = field("role:")?;
    match role {
        "master" | "primary" => Some(Role::Primary),
        "slave" | "replica" => Some(Role::Replica),
        _ => None,
    }
}

/// The server's version and run id from `INFO server`.
pub fn parse_server(info: &str) -> Server {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(str::to_owned)
    };
    Server {
        version: field("valkey_version:").or_else(|| field("redis_version:")),
        run_id: field("run_id:"),
    }
}

/// A redis error as a sentence; the redis crate never puts passwords in its errors. A server
/// that cannot be reached gets one sentence however the attempt ended (see [`no_answer`]).
pub fn describe(ip: &str, e: &redis::RedisError) -> String {
    describe_at(ip, VALKEY_PORT, e)
}

fn describe_at(ip: &str, port: u16, e: &redis::RedisError) -> String {
    let text = e.to_string();
    if text.contains("WRONGPASS") || text.contains("NOAUTH") || text.contains("NOPERM") {
        format!("{REFUSED}: {text}")
    } else if e.is_timeout() || UNREACHABLE.iter().any(|words| text.contains(words)) {
        no_answer_at(ip, port)
    } else {
        text
    }
}

/// The operating system's words for an address no packet reaches.
const UNREACHABLE: [&str; 2] = ["No route to host", "Network is unreachable"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_as_valkey_spells_them() {
        assert_eq!(
            parse_role("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
            Some(Role::Primary)
        );
        assert_eq!(
            parse_role("# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\n"),
            Some(Role::Replica)
        );
        assert_eq!(parse_role("# Replication\r\nconnected_slaves:0\r\n"), None);
        assert_eq!(parse_role("role:sentinel"), None);
    }

    #[test]
    fn version_and_run_id_from_info() {
        let info = "# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\nrun_id:abc123\r\n# Replication\r\nrole:master\r\n";
        assert_eq!(
            parse_server(info),
            Server {
                version: Some("9.1.2".into()),
                run_id: Some("abc123".into())
            }
        );
        assert_eq!(
            parse_server("redis_version:7.2.4\r\n").version.as_deref(),
            Some("7.2.4")
        );
    }

    /// The same unreachable server, whichever way the attempt ended, is said the same way, so
    /// the status does not change from one look to the next.
    #[test]
    fn an_unreachable_server_is_said_one_way() {
        let ip = "10.0.0.9";
        let timed_out = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let no_route = redis::RedisError::from(std::io::Error::from_raw_os_error(113));
        assert!(
            no_route.to_string().contains("No route to host"),
            "{no_route}"
        );
        assert_eq!(describe(ip, &timed_out), no_answer(ip));
        assert_eq!(describe(ip, &no_route), no_answer(ip));
        // A refusal says something else a person can act on: nothing listens there.
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_ne!(describe(ip, &refused), no_answer(ip));
    }

    #[test]
    fn only_a_refusal_of_the_credentials_is_one() {
        let ip = "10.0.0.9";
        let wrong = redis::RedisError::from(std::io::Error::other(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ));
        let timed_out = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(Answer::Failed(describe(ip, &wrong)).refused_credentials());
        assert!(!Answer::Failed(describe(ip, &timed_out)).refused_credentials());
        assert!(!Answer::Failed("PING answered \"nope\"".into()).refused_credentials());
    }

    #[test]
    fn debug_hides_the_password() {
        let c = Credentials {
            username: "healthcheck".into(),
            password: "s3cret-value".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("healthcheck") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
