//! A clonable shutdown token that fires on SIGTERM or SIGINT, or when triggered by hand.
//!
//! A second signal after the first exits the process at once, so an operator stuck draining can
//! still be stopped with a second Ctrl-C.

use std::future::Future;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status used when a second signal cuts a graceful shutdown short (128 + SIGINT).
pub const FORCED_EXIT_CODE: i32 = 130;

#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("cannot install a handler for {signal}: {source}")]
    Install {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Fires once; every clone sees it.
#[derive(Clone, Debug)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
    receiver: watch::Receiver<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A token that fires only through [`Shutdown::trigger`] (tests, or composition).
    pub fn new() -> Self {
        let (sender, receiver) = watch::channel(false);
        Self {
            sender: Arc::new(sender),
            receiver,
        }
    }

    /// A token that fires on SIGTERM or SIGINT. Must run inside a tokio runtime.
    pub fn on_signals() -> Result<Self, ShutdownError> {
        let mut terminate =
            signal(SignalKind::terminate()).map_err(|source| ShutdownError::Install {
                signal: "SIGTERM",
                source,
            })?;
        let mut interrupt =
            signal(SignalKind::interrupt()).map_err(|source| ShutdownError::Install {
                signal: "SIGINT",
                source,
            })?;
        let token = Self::new();
        let trigger = token.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(
                signal = name,
                "shutting down gracefully; a second signal exits at once"
            );
            trigger.trigger();
            tokio::select! {
                _ = terminate.recv() => {},
                _ = interrupt.recv() => {},
            }
            tracing::warn!("second signal: exiting without finishing the graceful shutdown");
            std::process::exit(FORCED_EXIT_CODE);
        });
        Ok(token)
    }

    /// Fires the token; idempotent.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Resolves once the token has fired (at once if it already has).
    pub async fn wait(&self) {
        let mut receiver = self.receiver.clone();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|fired| *fired).await;
    }

    /// An owned future that resolves once the token has fired; fits APIs that want
    /// `impl Future<Output = ()> + Send + Sync + 'static`, such as kube's
    /// `Controller::graceful_shutdown_on`.
    pub fn wait_owned(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let token = self.clone();
        async move { token.wait().await }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DEADLINE: Duration = Duration::from_secs(5);

    fn assert_send_sync_static<T: Send + Sync + 'static>(_: &T) {}

    #[tokio::test]
    async fn clones_see_a_trigger() -> Result<(), tokio::time::error::Elapsed> {
        let token = Shutdown::new();
        let clone = token.clone();
        assert!(!clone.is_triggered());
        let waiter = tokio::spawn(clone.wait_owned());
        token.trigger();
        tokio::time::timeout(DEADLINE, waiter).await?.ok();
        assert!(clone.is_triggered());
        Ok(())
    }

    #[tokio::test]
    async fn wait_does_not_resolve_before_trigger() {
        let token = Shutdown::new();
        let early = tokio::time::timeout(Duration::from_millis(50), token.wait()).await;
        assert!(early.is_err(), "wait resolved without a trigger");
    }

    #[tokio::test]
    async fn wait_after_trigger_resolves_at_once() -> Result<(), tokio::time::error::Elapsed> {
        let token = Shutdown::new();
        token.trigger();
        token.trigger();
        tokio::time::timeout(DEADLINE, token.wait()).await
    }

    #[tokio::test]
    async fn sigterm_fires_the_token() -> Result<(), Box<dyn std::error::Error>> {
        let token = Shutdown::on_signals()?;
        assert!(!token.is_triggered());
        // The handler is installed before the signal is sent, so the default action (exit) cannot run.
        nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM)?;
        tokio::time::timeout(DEADLINE, token.wait()).await?;
        assert!(token.is_triggered());
        Ok(())
    }

    #[tokio::test]
    async fn owned_future_fits_graceful_shutdown_on() {
        let token = Shutdown::new();
        assert_send_sync_static(&token.wait_owned());
    }
}
