//! Pod networking: a network namespace per pod, a veth whose host end is in the bridge, and the
//! pod IP from its node's range (node k: 10.213.k.2–254).
//!
//! Routed as production CNIs do, not one flat segment: a pod holds its address as a /32 and
//! reaches every other address of the pod network through one gateway, the bridge's own address,
//! and the host forwards between pods. So each pod needs one neighbour entry (its gateway) and the
//! host one per pod, however many pods talk to each other. The kernel's neighbour table is shared
//! by every network namespace (default hard limit 1,024 entries): in a flat /16 where every Valkey
//! server talks to every other, a few dozen pods overflowed it and probes then timed out.
//! Forwarding is turned on for the bridge only, and a pod has no default route, so nothing from a
//! pod leaves the pod network.
//!
//! iproute2's `ip` does the work: it is what an operator would type, and its errors say why.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Prefix of every network namespace this kubelet creates; cleanup on start relies on it.
pub const NETNS_PREFIX: &str = "lk-";
/// Prefix of the host ends of veths.
pub const VETH_PREFIX: &str = "lkv";
/// The prefix of the pod network, and of the node addresses on the bridge.
pub const PREFIX_LEN: u8 = 16;
/// Neighbour table limits (`net.ipv4.neigh.default.gc_thresh1..3`) the kubelet raises to, when
/// lower, so the routed network has room to spare for hundreds of pods.
pub const NEIGH_THRESHOLDS: [u32; 3] = [1024, 4096, 8192];

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("running ip {args}: {source}")]
    Spawn {
        args: String,
        source: std::io::Error,
    },
    #[error("ip {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("writing {path}: {source}")]
    Sysctl {
        path: String,
        source: std::io::Error,
    },
    #[error("bridge {0} has no IPv4 address")]
    NoBridgeAddress(String),
}

/// Names derived from the pod UID: short enough for interface names (15 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNetNames {
    pub netns: String,
    pub host_veth: String,
}

impl PodNetNames {
    pub fn for_uid(uid: &str) -> Self {
        let short: String = uid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(10)
            .collect();
        Self {
            netns: format!("{NETNS_PREFIX}{short}"),
            host_veth: format!("{VETH_PREFIX}{short}"),
        }
    }

    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.netns)
    }
}

pub async fn ip(args: &[&str]) -> Result<String, NetError> {
    let joined = args.join(" ");
    let out = Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|source| NetError::Spawn {
            args: joined.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetError::Failed {
            args: joined,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The commands, run inside the pod's namespace, that give it `ip_addr` as a /32 and a route to
/// the pod network (`gateway`/`PREFIX_LEN`) through `gateway`, and to each of `extra` (the service
/// CIDR, whose addresses kube-proxy on the host translates; the outside clients' network).
pub fn pod_routes(ip_addr: Ipv4Addr, gateway: Ipv4Addr, extra: &[String]) -> Vec<String> {
    let network = network_of(gateway);
    let mut cmds = vec![
        "link set lo up".into(),
        format!("addr add {ip_addr}/32 dev eth0"),
        "link set eth0 up".into(),
        format!("route add {gateway}/32 dev eth0 scope link"),
        format!("route add {network}/{PREFIX_LEN} via {gateway} dev eth0 src {ip_addr}"),
    ];
    for cidr in extra {
        cmds.push(format!(
            "route add {cidr} via {gateway} dev eth0 src {ip_addr}"
        ));
    }
    cmds
}

/// The network address of the pod network `addr` is in.
pub fn network_of(addr: Ipv4Addr) -> Ipv4Addr {
    let mask = u32::MAX << (32 - u32::from(PREFIX_LEN));
    Ipv4Addr::from(u32::from(addr) & mask)
}

/// Creates the namespace and veth afresh (anything left from an earlier run is removed first).
pub async fn setup(
    names: &PodNetNames,
    bridge: &str,
    ip_addr: Ipv4Addr,
    gateway: Ipv4Addr,
    extra_routes: &[String],
) -> Result<(), NetError> {
    teardown(names).await;
    let mac = mac_of(ip_addr);
    let ns = names.netns.as_str();
    ip(&["netns", "add", ns]).await?;
    ip(&[
        "link",
        "add",
        &names.host_veth,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "address",
        &mac,
        "netns",
        ns,
    ])
    .await?;
    ip(&["link", "set", &names.host_veth, "master", bridge, "up"]).await?;
    // Hairpin, as the bridge CNI plugin's hairpinMode and a kubelet's hairpin-veth: the machine's
    // bridges call netfilter (br_netfilter), which sends a packet DNATed to an address on the same
    // bridge straight across it instead of routing it; when a pod reaches a Service backed by
    // itself, that packet must leave by the port it came in on, which a bridge port refuses by
    // default.
    write_sysctl(
        &format!("/sys/class/net/{}/brport/hairpin_mode", names.host_veth),
        "1",
    )?;
    // One process for the rest: each `ip` costs a fork and an exec, and pods come by hundreds.
    ip_batch(ns, &pod_routes(ip_addr, gateway, extra_routes)).await
}

/// Runs `commands` (one `ip` command each, without the `ip`) in namespace `netns`.
async fn ip_batch(netns: &str, commands: &[String]) -> Result<(), NetError> {
    let args = format!("-n {netns} -batch - <<< {commands:?}");
    let spawn_err = |source| NetError::Spawn {
        args: args.clone(),
        source,
    };
    let mut child = Command::new("ip")
        .args(["-n", netns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(commands.join("\n").as_bytes())
            .await
            .map_err(spawn_err)?;
    }
    let out = child.wait_with_output().await.map_err(spawn_err)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetError::Failed {
            args,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The bridge's first IPv4 address: the pods' gateway.
pub async fn bridge_gateway(bridge: &str) -> Result<Ipv4Addr, NetError> {
    let out = ip(&["-4", "-o", "addr", "show", "dev", bridge]).await?;
    out.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| NetError::NoBridgeAddress(bridge.to_string()))
}

fn write_sysctl(path: &str, value: &str) -> Result<(), NetError> {
    std::fs::write(path, value).map_err(|source| NetError::Sysctl {
        path: path.to_string(),
        source,
    })
}

/// What the routed pod network needs of the host: forwarding on the bridge (only), ARP requests
/// to pods always from the bridge's main address (their gateway, the one neighbour they keep),
/// no ICMP redirects (the host forwards from the bridge back into it, and would otherwise tell
/// pods to talk to each other directly, each redirect a neighbour entry more), and neighbour
/// table limits with room for hundreds of pods (raised, never lowered).
pub fn prepare_host(bridge: &str) -> Result<(), NetError> {
    let conf = format!("/proc/sys/net/ipv4/conf/{bridge}");
    write_sysctl(&format!("{conf}/forwarding"), "1")?;
    write_sysctl(&format!("{conf}/arp_announce"), "2")?;
    // The kernel sends redirects when the interface's or the "all" setting says so.
    write_sysctl(&format!("{conf}/send_redirects"), "0")?;
    write_sysctl("/proc/sys/net/ipv4/conf/all/send_redirects", "0")?;
    for (n, wanted) in (1..=3).zip(NEIGH_THRESHOLDS) {
        let path = format!("/proc/sys/net/ipv4/neigh/default/gc_thresh{n}");
        let current: u32 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if current < wanted {
            write_sysctl(&path, &wanted.to_string())?;
        }
    }
    Ok(())
}

/// The pod interface's MAC, derived from its IP as Docker does: a pod that gets an IP again also
/// gets the same MAC, so no ARP cache (the host's, other pods') holds a stale entry for it, and a
/// replaced pod is reachable at once rather than after the neighbour entry expires.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Removes the namespace and veth; missing pieces are not an error. Whatever still runs in the
/// namespace is ended first (see [`end_processes_in`]).
pub async fn teardown(names: &PodNetNames) {
    end_processes_in(&names.netns);
    // Deleting the host end removes its peer; deleting the namespace removes whatever is left.
    let _ = ip(&["link", "del", &names.host_veth]).await;
    let _ = ip(&["netns", "del", &names.netns]).await;
}

/// SIGKILLs every process still in the pod network namespace `name` (`/run/netns/<name>`).
///
/// A container's processes are stopped by their process group, but a process can leave it: a
/// server started with `--daemonize yes` forks, lets its parent exit and starts a session of its
/// own. It then outlived its pod, holding the namespace (and its port) after `ip netns del`
/// removed the name, with nothing left to find it by: a runtime ends it with the container's
/// PID namespace or cgroup, which this kubelet does not make, so it ends whatever is in the
/// pod's network namespace, which every process of the pod shares.
pub fn end_processes_in(name: &str) {
    let Some(namespace) = namespace_id(Path::new(NETNS_DIR).join(name)) else {
        return;
    };
    let ended = kill_in_namespace(namespace);
    if ended > 0 {
        tracing::info!(
            netns = name,
            ended,
            "ended processes left in the pod network"
        );
    }
}

/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";

/// A network namespace's identity: the device and inode of its nsfs file, the same through
/// `/run/netns/<name>` and through `/proc/<pid>/ns/net`.
fn namespace_id(path: impl AsRef<Path>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The processes in the network namespace `namespace` (a zombie has none and is not listed).
fn pids_in(namespace: (u64, u64)) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| namespace_id(format!("/proc/{pid}/ns/net")) == Some(namespace))
        .collect()
}

/// SIGKILLs every process in the network namespace `namespace`; returns how many were signalled.
fn kill_in_namespace(namespace: (u64, u64)) -> usize {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    pids_in(namespace)
        .into_iter()
        .filter(|pid| kill(Pid::from_raw(*pid), Signal::SIGKILL).is_ok())
        .count()
}

/// Whether `name` is a pod's namespace as [`PodNetNames`] names it (the prefix and ten letters or
/// digits of a UID): others with the prefix (localkube's outside namespace) are not this kubelet's.
pub fn is_pod_netns(name: &str) -> bool {
    name.strip_prefix(NETNS_PREFIX)
        .is_some_and(|rest| rest.len() == 10 && rest.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Removes every pod namespace and veth with this kubelet's prefixes, except those in `keep`.
pub async fn remove_stale(keep: &BTreeSet<String>) {
    if let Ok(entries) = std::fs::read_dir(NETNS_DIR) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_pod_netns(&name) && !keep.contains(&name) {
                end_processes_in(&name);
                let _ = ip(&["netns", "del", &name]).await;
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/sys/class/net") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let netns = name.replacen(VETH_PREFIX, NETNS_PREFIX, 1);
            if name.starts_with(VETH_PREFIX) && !keep.contains(&netns) {
                let _ = ip(&["link", "del", &name]).await;
            }
        }
    }
}

/// Adds (or removes) an address on the bridge; an address already there is fine.
pub async fn bridge_address(bridge: &str, addr: Ipv4Addr, add: bool) -> Result<(), NetError> {
    let cidr = format!("{addr}/{PREFIX_LEN}");
    let verb = if add { "add" } else { "del" };
    match ip(&["addr", verb, &cidr, "dev", bridge]).await {
        Ok(_) => Ok(()),
        Err(NetError::Failed { stderr, .. })
            if (add && stderr.contains("File exists"))
                || (!add && stderr.contains("Cannot assign")) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The first and last pod address of a node's /24 (.1 is the node's own).
const FIRST_HOST: u8 = 2;
const LAST_HOST: u8 = 254;

/// Pod IPs of one node: 10.213.k.2–254, handed out in turn (as the host-local IPAM of CNI does):
/// an address released is the last to be given again, so anything that still remembers it (a
/// status not yet rewritten, a cache, a client) has the longest time to let go before another
/// pod answers there.
#[derive(Debug, Clone)]
pub struct Ipam {
    base: [u8; 3],
    used: BTreeSet<u8>,
    /// Where the search for the next free address starts.
    next: u8,
}

impl Ipam {
    /// `node_ip` is the node's address (10.213.k.1); pods get the rest of its /24.
    pub fn new(node_ip: Ipv4Addr) -> Self {
        let o = node_ip.octets();
        Self {
            base: [o[0], o[1], o[2]],
            used: BTreeSet::new(),
            next: FIRST_HOST,
        }
    }

    fn host_part(&self, ip: Ipv4Addr) -> Option<u8> {
        let o = ip.octets();
        ([o[0], o[1], o[2]] == self.base && (FIRST_HOST..=LAST_HOST).contains(&o[3]))
            .then_some(o[3])
    }

    /// The preferred address when it is this node's and free, else the next free one after the
    /// last given (wrapping around).
    pub fn allocate(&mut self, preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        let host = match preferred
            .and_then(|ip| self.host_part(ip))
            .filter(|h| !self.used.contains(h))
        {
            Some(host) => host,
            None => {
                let host = (self.next..=LAST_HOST)
                    .chain(FIRST_HOST..self.next)
                    .find(|h| !self.used.contains(h))?;
                self.next = if host == LAST_HOST {
                    FIRST_HOST
                } else {
                    host + 1
                };
                host
            }
        };
        self.used.insert(host);
        let [a, b, c] = self.base;
        Some(Ipv4Addr::new(a, b, c, host))
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        if let Some(h) = self.host_part(ip) {
            self.used.remove(&h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that left its group and session (as `--daemonize` does) is ended with the
    /// rest of the namespace. Needs root (a network namespace of its own).
    #[test]
    fn every_process_in_a_namespace_is_ended_even_one_that_left_its_session() {
        let ours = namespace_id("/proc/self/ns/net");
        let mut child = std::process::Command::new("unshare")
            // Short sleeps: should the test fail before killing them, they end by themselves.
            .args(["--net", "sh", "-c", "setsid sleep 30 & exec sleep 30"])
            .spawn()
            .unwrap_or_else(|e| panic!("unshare: {e}"));
        let path = format!("/proc/{}/ns/net", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let namespace = loop {
            let id = namespace_id(&path);
            if id.is_some() && id != ours && pids_in(id.unwrap_or_default()).len() == 2 {
                break id.unwrap_or_default();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no namespace with two processes"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };

        assert_eq!(kill_in_namespace(namespace), 2);
        let _ = child.wait();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pids_in(namespace).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "still running in the namespace: {:?}",
                pids_in(namespace)
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn names_fit_interface_limits() {
        let n = PodNetNames::for_uid("3f2a9c1e-7b4d-4e2a-9f00-112233445566");
        assert_eq!(n.netns, "lk-3f2a9c1e7b");
        assert_eq!(n.host_veth, "lkv3f2a9c1e7b");
        assert_eq!(mac_of(Ipv4Addr::new(10, 213, 2, 7)), "02:42:0a:d5:02:07");
        assert!(n.host_veth.len() <= 15);
        assert!(is_pod_netns(&n.netns));
        // localkube's outside namespace shares the prefix and is not a pod's.
        assert!(!is_pod_netns("lk-outside"));
    }

    #[test]
    fn a_pod_holds_a_32_and_routes_the_pod_network_through_the_gateway() {
        let gw = Ipv4Addr::new(10, 213, 0, 1);
        assert_eq!(
            network_of(Ipv4Addr::new(10, 213, 2, 7)),
            Ipv4Addr::new(10, 213, 0, 0)
        );
        let routes = pod_routes(Ipv4Addr::new(10, 213, 2, 7), gw, &["10.0.0.0/24".into()]);
        assert!(routes.contains(&"addr add 10.213.2.7/32 dev eth0".to_string()));
        assert!(routes.contains(&"route add 10.213.0.1/32 dev eth0 scope link".to_string()));
        assert!(routes.contains(
            &"route add 10.213.0.0/16 via 10.213.0.1 dev eth0 src 10.213.2.7".to_string()
        ));
        // Services go to the gateway too, where kube-proxy translates them.
        assert_eq!(
            routes.last().map(String::as_str),
            Some("route add 10.0.0.0/24 via 10.213.0.1 dev eth0 src 10.213.2.7")
        );
        assert!(!routes.iter().any(|r| r.contains("default")));
    }

    #[test]
    fn ipam_keeps_a_preferred_address_and_gives_released_ones_last() {
        let ip = |host| Ipv4Addr::new(10, 213, 2, host);
        let mut ipam = Ipam::new(ip(1));
        assert_eq!(ipam.allocate(Some(ip(9))), Some(ip(9)));
        assert_eq!(ipam.allocate(None), Some(ip(2)));
        // Another node's address is not honoured.
        assert_eq!(
            ipam.allocate(Some(Ipv4Addr::new(10, 213, 1, 5))),
            Some(ip(3))
        );
        // A released address is not the next one given: the turn goes on.
        ipam.release(ip(2));
        assert_eq!(ipam.allocate(None), Some(ip(4)));
        let rest: Vec<_> = std::iter::from_fn(|| ipam.allocate(None)).collect();
        assert_eq!(rest.len(), 253 - 3);
        // .9 was taken out of turn and skipped; .2 came back only after the wrap, last.
        assert!(!rest.contains(&ip(9)));
        assert_eq!(rest.last(), Some(&ip(2)));
        ipam.release(ip(100));
        assert_eq!(ipam.allocate(None), Some(ip(100)));
    }
}
