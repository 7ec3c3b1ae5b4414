//! What Valkey itself says: PING and the replication role, asked over the pod IP.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
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

/// The outcome of asking Valkey.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `PING` answered `PONG`; `role` from `INFO replication` when it parsed.
    Pong { role: Option<Role> },
    /// Valkey did not answer as it should; the text says what happened (never a secret).
    Failed(String),
}

/// Asks the Valkey at `ip` for PING and its role.
pub async fn ask(ip: &str, credentials: Option<&Credentials>) -> Answer {
    match tokio::time::timeout(TIMEOUT * 2, ask_inner(ip, credentials)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Answer::Failed(describe(&e)),
        Err(_) => Answer::Failed(format!(
            "no answer from {ip}:{VALKEY_PORT} within {:?}",
            TIMEOUT * 2
        )),
    }
}

async fn ask_inner(ip: &str, credentials: Option<&Credentials>) -> redis::RedisResult<Answer> {
    let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(c) = credentials {
        settings = settings.set_username(&c.username).set_password(&c.password);
    }
    let info = ConnectionAddr::Tcp(ip.to_owned(), VALKEY_PORT)
        .into_connection_info()?
        .set_redis_settings(settings);
    let client = redis::Client::open(info)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let pong: String = redis::cmd("PING").query_async(&mut connection).await?;
    if pong != "PONG" {
        return Ok(Answer::Failed(format!("PING answered {pong:?}")));
    }
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut connection)
        .await?;
    Ok(Answer::Pong {
        role: parse_role(&info),
    })
}

/// `role:master` / `role:slave` in `INFO replication` (newer servers may say primary/replica).
pub fn parse_role(info: &str) -> Option<Role> {
    let role = info.lines().find_map(|l| l.trim().strip_prefix("role:"))?;
    match role {
        "master" | "primary" => Some(Role::Primary),
        "slave" | "replica" => Some(Role::Replica),
        _ => None,
    }
}

/// A redis error as a sentence; the redis crate never puts passwords in its errors.
fn describe(e: &redis::RedisError) -> String {
    let text = e.to_string();
    if text.contains("WRONGPASS") || text.contains("NOAUTH") || text.contains("NOPERM") {
        format!("Valkey refused the health user: {text}")
    } else {
        text
    }
}

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
