//! Process-wide `tracing` subscriber: JSON or text lines on stderr, filtered by an EnvFilter.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// Environment variable that overrides `--log-level` when set and not empty.
pub const RUST_LOG_ENV: &str = "RUST_LOG";

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter {directives:?}: {source}")]
    Filter {
        directives: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
}

/// Installs the global subscriber. Call once, early in `main`.
pub fn init(format: LogFormat, log_level: &str) -> Result<(), TelemetryError> {
    let directives = filter_directives(std::env::var(RUST_LOG_ENV).ok().as_deref(), log_level);
    let filter = EnvFilter::try_new(&directives).map_err(|source| TelemetryError::Filter {
        directives: directives.clone(),
        source,
    })?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
        LogFormat::Text => registry
            // Colour codes only for a person at a terminal, never into log files.
            .with(
                fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
    }
    Ok(())
}

/// The filter in force: `RUST_LOG` when it holds something, else the `--log-level` flag.
pub fn filter_directives(rust_log: Option<&str>, flag: &str) -> String {
    rust_log
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or(flag)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_when_set() {
        assert_eq!(filter_directives(Some("debug"), "info"), "debug");
        assert_eq!(filter_directives(Some("  "), "info"), "info");
        assert_eq!(
            filter_directives(None, "warn,kube=debug"),
            "warn,kube=debug"
        );
    }

    #[test]
    fn invalid_filter_is_an_error_not_a_panic() {
        // EnvFilter rejects a directive whose level is not a level.
        assert!(EnvFilter::try_new("kube=loud").is_err());
    }
}
