//! The one trait the engine talks to Valkey through, and the password-free name of a command.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use redis::{Cmd, Value};

use super::error::ClientError;

/// Runs one command on the Valkey server at an address.
pub trait ValkeyClient: Send + Sync {
    /// Sends `cmd` to `addr` and returns the reply, or an error when the server cannot be
    /// reached, refuses the command, or does not answer within `timeout`.
    fn command(
        &self,
        addr: SocketAddr,
        cmd: &Cmd,
        timeout: Duration,
    ) -> impl Future<Output = Result<Value, ClientError>> + Send;

    /// Closes the connections kept for later commands (the next command connects again). A
    /// client that keeps none has nothing to do.
    fn let_go(&self) {}
}

/// A short, password-free name for a command in errors and logs: its first word, and the
/// subcommand for container commands such as `CLUSTER SETSLOT`.
pub fn command_label(cmd: &Cmd) -> String {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).to_ascii_uppercase()),
        _ => None,
    });
    let first = args.next().unwrap_or_default();
    match first.as_str() {
        "CLUSTER" | "CONFIG" | "CLIENT" | "ACL" => match args.next() {
            Some(sub) => format!("{first} {sub}"),
            None => first,
        },
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_never_carry_arguments() {
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("10.0.0.1")
            .arg(6379)
            .arg("AUTH2")
            .arg("op")
            .arg("s3cret");
        assert_eq!(command_label(&migrate), "MIGRATE");
        let mut setslot = redis::cmd("cluster");
        setslot.arg("setslot").arg(7).arg("STABLE");
        assert_eq!(command_label(&setslot), "CLUSTER SETSLOT");
    }
}
