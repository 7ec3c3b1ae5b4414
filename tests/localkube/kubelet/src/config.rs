//! Flags and the node table derived from them.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "localkube-kubelet",
    about = "Runs the pods bound to the local nodes as processes"
)]
pub struct Args {
    /// Kubeconfig with the kubelet's credentials.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Pod directories, provisioned volumes and logs.
    #[arg(long, default_value = ".localkube/kubelet")]
    pub state_dir: PathBuf,
    /// The image table: `<name>-<tag>/bin`, `<name>/bin`.
    #[arg(long, default_value = ".localkube/images")]
    pub images_dir: PathBuf,
    /// The bridge pods' veths join; it carries 10.213.0.1/16.
    #[arg(long, default_value = "lkbr0")]
    pub bridge: String,
    /// The API server's address as pods reach it (KUBERNETES_SERVICE_HOST/PORT).
    #[arg(long, default_value = "https://10.213.0.1:6443")]
    pub api_server: String,
    /// How many nodes (localkube-a, -b, ...); at most 26 with the fault-test nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u8,
    /// Nodes after those, each in a zone of its own, tainted so that only pods that tolerate
    /// `localkube.io/fault-tests` run there: localkube's own fault tests stop and partition them
    /// while other tests keep the first nodes.
    #[arg(long, default_value_t = 0)]
    pub fault_nodes: u8,
    /// Cap of the restart back-off in seconds (a kubelet uses 300).
    #[arg(long, default_value_t = 300)]
    pub backoff_cap_seconds: u64,
    /// Seconds between node status heartbeats.
    #[arg(long, default_value_t = 60)]
    pub node_status_seconds: u64,
    /// The cluster DNS Service's address, the nameserver of pods with dnsPolicy ClusterFirst (as a
    /// kubelet's --cluster-dns); without it their resolv.conf has no nameserver, so lookups fail
    /// at once.
    #[arg(long)]
    pub cluster_dns: Option<Ipv4Addr>,
    /// The cluster's DNS domain (search domains `<ns>.svc.<domain> svc.<domain> <domain>`).
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Another network pods reach through their gateway, besides the pod network (the service
    /// CIDR, a network of clients outside the cluster); repeatable.
    #[arg(long = "pod-route", value_name = "CIDR")]
    pub pod_routes: Vec<String>,
}

/// The taint (and label) of the fault-test nodes.
pub const FAULT_TESTS_KEY: &str = "localkube.io/fault-tests";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--nodes must be at least 1 and --nodes plus --fault-nodes at most 26, got {0} and {1}"
    )]
    NodeCount(u8, u8),
    #[error("--api-server {0:?} is not https://HOST:PORT")]
    ApiServer(String),
    #[error("--pod-route {0:?} is not an IPv4 CIDR (a.b.c.d/n)")]
    PodRoute(String),
    #[error("state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// 1 for localkube-a.
    pub index: u8,
    pub ip: Ipv4Addr,
    pub zone: String,
    /// Reserved for fault tests (tainted `FAULT_TESTS_KEY`).
    pub for_fault_tests: bool,
}

pub fn nodes(count: u8, fault_nodes: u8) -> Result<Vec<NodeInfo>, ConfigError> {
    let total = u16::from(count) + u16::from(fault_nodes);
    if count == 0 || total > 26 {
        return Err(ConfigError::NodeCount(count, fault_nodes));
    }
    Ok((1..=count + fault_nodes)
        .map(|index| {
            let letter = char::from(b'a' + index - 1);
            NodeInfo {
                name: format!("localkube-{letter}"),
                index,
                ip: Ipv4Addr::new(10, 213, index, 1),
                zone: format!("zone-{letter}"),
                for_fault_tests: index > count,
            }
        })
        .collect())
}

/// Host and port of an `https://host:port` URL.
pub fn host_port(url: &str) -> Result<(String, String), ConfigError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| ConfigError::ApiServer(url.to_string()))?;
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => {
            Ok((h.to_string(), p.to_string()))
        }
        _ if !rest.is_empty() && !rest.contains('/') => Ok((rest.to_string(), "443".into())),
        _ => Err(ConfigError::ApiServer(url.to_string())),
    }
}

/// Settings every part of the kubelet reads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub images_dir: PathBuf,
    pub bridge: String,
    pub api_host: String,
    pub api_port: String,
    pub nodes: Vec<NodeInfo>,
    pub backoff_cap: Duration,
    pub node_status_period: Duration,
    pub cluster_dns: Option<Ipv4Addr>,
    pub cluster_domain: String,
    /// CIDRs routed through the pod's gateway besides the pod network.
    pub pod_routes: Vec<String>,
}

/// Checks that `cidr` is `a.b.c.d/n` (0 <= n <= 32), as `ip route` will take it.
pub fn ipv4_cidr(cidr: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::PodRoute(cidr.to_string());
    let (addr, len) = cidr.split_once('/').ok_or_else(bad)?;
    addr.parse::<Ipv4Addr>().map_err(|_| bad())?;
    match len.parse::<u8>() {
        Ok(n) if n <= 32 => Ok(cidr.to_string()),
        _ => Err(bad()),
    }
}

impl Settings {
    pub fn from_args(args: &Args) -> Result<Self, ConfigError> {
        let (api_host, api_port) = host_port(&args.api_server)?;
        let state_err = |source| ConfigError::StateDir {
            path: args.state_dir.clone(),
            source,
        };
        std::fs::create_dir_all(&args.state_dir).map_err(state_err)?;
        let state_dir = std::fs::canonicalize(&args.state_dir).map_err(state_err)?;
        let images_dir = std::fs::canonicalize(&args.images_dir).unwrap_or(args.images_dir.clone());
        Ok(Self {
            state_dir,
            images_dir,
            bridge: args.bridge.clone(),
            api_host,
            api_port,
            nodes: nodes(args.nodes, args.fault_nodes)?,
            backoff_cap: Duration::from_secs(args.backoff_cap_seconds),
            node_status_period: Duration::from_secs(args.node_status_seconds.max(5)),
            cluster_dns: args.cluster_dns,
            cluster_domain: args.cluster_domain.trim_matches('.').to_string(),
            pod_routes: args
                .pod_routes
                .iter()
                .map(|c| ipv4_cidr(c))
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn pods_dir(&self) -> PathBuf {
        self.state_dir.join("pods")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    pub fn volumes_dir(&self) -> PathBuf {
        self.state_dir.join("volumes")
    }

    /// Stopped nodes (see `node_faults.rs`).
    pub fn faults_dir(&self) -> PathBuf {
        self.state_dir.join("faults")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_table() -> Result<(), ConfigError> {
        let n = nodes(3, 1)?;
        assert_eq!(n[1].name, "localkube-b");
        assert_eq!(n[1].ip, Ipv4Addr::new(10, 213, 2, 1));
        assert_eq!(n[2].zone, "zone-c");
        assert!(!n[2].for_fault_tests);
        assert_eq!(n[3].name, "localkube-d");
        assert!(n[3].for_fault_tests);
        assert!(nodes(0, 1).is_err());
        assert!(nodes(20, 7).is_err());
        Ok(())
    }

    #[test]
    fn api_server_url() {
        assert_eq!(
            host_port("https://10.213.0.1:6443").ok(),
            Some(("10.213.0.1".into(), "6443".into()))
        );
        assert!(host_port("10.213.0.1:6443").is_err());
    }

    #[test]
    fn pod_routes_must_be_ipv4_cidrs() {
        assert_eq!(ipv4_cidr("10.0.0.0/24").ok(), Some("10.0.0.0/24".into()));
        for bad in ["10.0.0.0", "10.0.0.0/33", "fd00::/8", "x/8", "10.0.0.0/"] {
            assert!(ipv4_cidr(bad).is_err(), "{bad}");
        }
    }
}
