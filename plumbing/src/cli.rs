//! Command-line flags shared by every controller binary.
//!
//! Each binary flattens [`CommonArgs`] into its own `clap::Parser` and adds its own flags:
//!
//! ```
//! # use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     common: plumbing::cli::CommonArgs,
//! }
//! let cli = Cli::parse_from(["node-controller", "--leader-elect"]);
//! assert_eq!(cli.common.lease_name("valkey-node-controller"), "valkey-node-controller");
//! ```

use std::net::SocketAddr;

use clap::{Args, ValueEnum};

/// Namespace used for the Lease when nothing more specific is known.
pub const FALLBACK_NAMESPACE: &str = "default";

/// Environment variable the Downward API fills with the pod's own namespace.
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object a line, for log collectors.
    Json,
    /// Human-readable lines.
    #[default]
    Text,
}

/// Flags both controller binaries share.
#[derive(Clone, Debug, Args)]
pub struct CommonArgs {
    /// Watch only this namespace; all namespaces when absent or empty.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// Address of the HTTP server for /metrics, /live and /ready.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Run Lease-based leader election so that only one replica reconciles.
    #[arg(long, default_value_t = false)]
    pub leader_elect: bool,

    /// Namespace of the Lease [default: the watched namespace, else $POD_NAMESPACE, else default].
    #[arg(long)]
    pub leader_election_namespace: Option<String>,

    /// Name of the Lease [default: chosen by each binary].
    #[arg(long)]
    pub leader_election_id: Option<String>,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter in EnvFilter syntax (e.g. `info,plumbing=debug`); RUST_LOG wins when set.
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

impl CommonArgs {
    /// The namespace to watch, `None` meaning all namespaces.
    ///
    /// An empty value counts as absent because a Downward API or Helm value often renders as `""`.
    pub fn watch_namespace(&self) -> Option<&str> {
        non_empty(self.namespace.as_deref())
    }

    /// The Lease name: `--leader-election-id` when given, else the binary's own default.
    pub fn lease_name<'a>(&'a self, binary_default: &'a str) -> &'a str {
        non_empty(self.leader_election_id.as_deref()).unwrap_or(binary_default)
    }

    /// The Lease namespace, resolved from the flags and `$POD_NAMESPACE`.
    pub fn lease_namespace(&self) -> String {
        let pod_namespace = std::env::var(POD_NAMESPACE_ENV).ok();
        resolve_lease_namespace(
            self.leader_election_namespace.as_deref(),
            self.watch_namespace(),
            pod_namespace.as_deref(),
        )
    }
}

/// Picks the Lease namespace: the explicit flag, else the watched namespace, else the pod's own
/// namespace, else [`FALLBACK_NAMESPACE`]. Empty strings are skipped at every step.
pub fn resolve_lease_namespace(
    explicit: Option<&str>,
    watched: Option<&str>,
    pod_namespace: Option<&str>,
) -> String {
    non_empty(explicit)
        .or(non_empty(watched))
        .or(non_empty(pod_namespace))
        .unwrap_or(FALLBACK_NAMESPACE)
        .to_owned()
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct TestCli {
        #[command(flatten)]
        common: CommonArgs,
    }

    // Parses without consulting the process environment, so tests do not depend on WATCH_NAMESPACE.
    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        let mut command = <TestCli as clap::CommandFactory>::command();
        command = command.mut_arg("namespace", |a| a.env(None::<&str>));
        let matches =
            command.try_get_matches_from(std::iter::once("test").chain(args.iter().copied()))?;
        <TestCli as clap::FromArgMatches>::from_arg_matches(&matches).map(|c| c.common)
    }

    #[test]
    fn defaults() -> Result<(), clap::Error> {
        let args = parse(&[])?;
        assert_eq!(args.watch_namespace(), None);
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
        assert!(!args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.log_level, "info");
        assert_eq!(
            args.lease_name("valkey-node-controller"),
            "valkey-node-controller"
        );
        Ok(())
    }

    #[test]
    fn every_flag_parses() -> Result<(), clap::Error> {
        let args = parse(&[
            "--namespace",
            "team-a",
            "--metrics-addr",
            "127.0.0.1:9000",
            "--leader-elect",
            "--leader-election-namespace",
            "ops",
            "--leader-election-id",
            "my-lease",
            "--log-format",
            "json",
            "--log-level",
            "debug,kube=info",
        ])?;
        assert_eq!(args.watch_namespace(), Some("team-a"));
        assert_eq!(args.metrics_addr.port(), 9000);
        assert!(args.leader_elect);
        assert_eq!(args.leader_election_namespace.as_deref(), Some("ops"));
        assert_eq!(args.lease_name("ignored"), "my-lease");
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.log_level, "debug,kube=info");
        Ok(())
    }

    #[test]
    fn rejects_unknown_log_format_and_bad_address() {
        assert!(parse(&["--log-format", "xml"]).is_err());
        assert!(parse(&["--metrics-addr", "not-an-address"]).is_err());
    }

    #[test]
    fn empty_namespace_means_all() -> Result<(), clap::Error> {
        let args = parse(&["--namespace", ""])?;
        assert_eq!(args.watch_namespace(), None);
        Ok(())
    }

    #[test]
    fn lease_namespace_precedence() {
        assert_eq!(
            resolve_lease_namespace(Some("x"), Some("w"), Some("p")),
            "x"
        );
        assert_eq!(resolve_lease_namespace(None, Some("w"), Some("p")), "w");
        assert_eq!(resolve_lease_namespace(Some(""), None, Some("p")), "p");
        assert_eq!(
            resolve_lease_namespace(None, Some(" "), Some("")),
            "default"
        );
        assert_eq!(resolve_lease_namespace(None, None, None), "default");
    }
}
