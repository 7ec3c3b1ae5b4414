//! [`ValkeyClient`] with the `redis` crate: one multiplexed connection per address, made on
//! first use, kept while it works, and dropped after a connection error or a timeout so the
//! next command reconnects (a pod that restarted at the same address gets a fresh link).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use plumbing::valkey_tls::{self, Trust};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisConnectionInfo, RedisError, Value};

use super::credentials::Credentials;
use super::error::ClientError;
use super::valkey_client::{ValkeyClient, command_label};

/// How connections are made.
#[derive(Debug, Clone)]
pub struct RedisClientConfig {
    pub credentials: Credentials,
    /// With TLS: the CA the servers' certificates must chain to (plain TCP without).
    pub trust: Option<Trust>,
    /// How long establishing a connection (TCP and AUTH) may take.
    pub connect_timeout: Duration,
}

impl Default for RedisClientConfig {
    fn default() -> Self {
        Self {
            credentials: Credentials::none(),
            trust: None,
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// The real client. Cheap to clone; clones share the connection cache.
#[derive(Clone)]
pub struct RedisClient {
    config: Arc<RedisClientConfig>,
    connections: Arc<Mutex<HashMap<SocketAddr, MultiplexedConnection>>>,
}

impl RedisClient {
    pub fn new(config: RedisClientConfig) -> Self {
        Self {
            config: Arc::new(config),
            connections: Arc::default(),
        }
    }

    /// Forgets every cached connection (they close when the last command using them ends).
    pub fn disconnect_all(&self) {
        self.cache().clear();
    }

    /// How many connections are kept for the next command.
    pub fn open_connections(&self) -> usize {
        self.cache().len()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, MultiplexedConnection>> {
        // The map holds no invariant a panicking holder could break.
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn connection(&self, addr: SocketAddr) -> Result<MultiplexedConnection, ClientError> {
        if let Some(conn) = self.cache().get(&addr) {
            return Ok(conn.clone());
        }
        let connect_error = |e: RedisError| ClientError::Connect {
            addr,
            message: e.to_string(),
        };
        let mut redis_settings = RedisConnectionInfo::default();
        if let Some(username) = &self.config.credentials.username {
            redis_settings = redis_settings.set_username(username);
        }
        if let Some(password) = &self.config.credentials.password {
            redis_settings = redis_settings.set_password(password.expose());
        }
        let client = valkey_tls::client(
            &addr.ip().to_string(),
            addr.port(),
            self.config.trust.as_ref(),
            redis_settings,
        )
        .map_err(connect_error)?;
        // Each command carries its own timeout, so the connection itself has none.
        let settings = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout))
            .set_response_timeout(None);
        let conn = tokio::time::timeout(
            self.config.connect_timeout,
            client.get_multiplexed_async_connection_with_config(&settings),
        )
        .await
        .map_err(|_| ClientError::Connect {
            addr,
            message: format!("no connection within {:?}", self.config.connect_timeout),
        })?
        .map_err(connect_error)?;
        self.cache().insert(addr, conn.clone());
        Ok(conn)
    }

    fn drop_connection(&self, addr: SocketAddr) {
        self.cache().remove(&addr);
    }
}

impl fmt::Debug for RedisClient {
    /// The settings (whose password prints as `***`) and the addresses connected to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut connected: Vec<SocketAddr> = self.cache().keys().copied().collect();
        connected.sort();
        f.debug_struct("RedisClient")
            .field("config", &self.config)
            .field("connected", &connected)
            .finish()
    }
}

impl ValkeyClient for RedisClient {
    async fn command(
        &self,
        addr: SocketAddr,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let mut conn = self.connection(addr).await?;
        let command = command_label(cmd);
        match tokio::time::timeout(timeout, cmd.query_async::<Value>(&mut conn)).await {
            Err(_) => {
                self.drop_connection(addr);
                Err(ClientError::Timeout {
                    addr,
                    command,
                    timeout,
                })
            }
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.code().is_some() && !e.is_unrecoverable_error() => {
                Err(ClientError::Server {
                    addr,
                    command,
                    code: e.code().map(str::to_owned),
                    message: e.to_string(),
                })
            }
            Ok(Err(e)) => {
                self.drop_connection(addr);
                Err(ClientError::Io {
                    addr,
                    command,
                    message: e.to_string(),
                })
            }
        }
    }

    fn let_go(&self) {
        self.disconnect_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn neither_debug_nor_errors_show_the_password() {
        let client = RedisClient::new(RedisClientConfig {
            credentials: Credentials::user("operator", "hunter2"),
            connect_timeout: Duration::from_millis(200),
            ..RedisClientConfig::default()
        });
        assert!(!format!("{client:?}").contains("hunter2"));
        // Nothing listens on port 1 of loopback.
        let error = client
            .command(
                "127.0.0.1:1".parse().expect("address"),
                &redis::cmd("PING"),
                Duration::from_millis(200),
            )
            .await
            .expect_err("no server");
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }
}
