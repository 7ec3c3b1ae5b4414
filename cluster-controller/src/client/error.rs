//! What can go wrong running a command. Messages name the address and the command (never its
//! arguments, which may hold a password).

use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    /// No connection could be made (refused, unreachable, authentication failed).
    #[error("connecting to {addr}: {message}")]
    Connect { addr: SocketAddr, message: String },
    /// The server did not answer within the command's timeout.
    #[error("{command} on {addr}: no reply within {timeout:?}")]
    Timeout {
        addr: SocketAddr,
        command: String,
        timeout: Duration,
    },
    /// The connection broke while the command was in flight.
    #[error("{command} on {addr}: {message}")]
    Io {
        addr: SocketAddr,
        command: String,
        message: String,
    },
    /// The server answered with an error reply (`ERR ...`, `LOADING ...`).
    #[error("{command} on {addr}: {message}")]
    Server {
        addr: SocketAddr,
        command: String,
        /// The error code, e.g. `ERR`, `LOADING`, `NOAUTH`.
        code: Option<String>,
        message: String,
    },
}

impl ClientError {
    /// True when the server itself refused the command (as opposed to not being reachable).
    pub fn is_server_reply(&self) -> bool {
        matches!(self, Self::Server { .. })
    }

    /// The server's error text, when it answered with one.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            Self::Server { message, .. } => Some(message),
            _ => None,
        }
    }
}
