//! Pod networking: a network namespace per pod, a veth whose host end is in the bridge, and the
//! pod IP from its node's range (node k: 10.213.k.2–254, gateway 10.213.k.1).
//!
//! iproute2's `ip` does the work: it is what an operator would type, and its errors say why.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use tokio::process::Command;

/// Prefix of every network namespace this kubelet creates; cleanup on start relies on it.
pub const NETNS_PREFIX: &str = "lk-";
/// Prefix of the host ends of veths.
pub const VETH_PREFIX: &str = "lkv";
pub const PREFIX_LEN: u8 = 16;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("running ip {args}: {source}")]
    Spawn {
        args: String,
        source: std::io::Error,
    },
    #[error("ip {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
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

/// Creates the namespace and veth afresh (anything left from an earlier run is removed first).
pub async fn setup(
    names: &PodNetNames,
    bridge: &str,
    ip_addr: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Result<(), NetError> {
    teardown(names).await;
    let addr = format!("{ip_addr}/{PREFIX_LEN}");
    let gw = gateway.to_string();
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
    ip(&["-n", ns, "link", "set", "lo", "up"]).await?;
    ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"]).await?;
    ip(&["-n", ns, "link", "set", "eth0", "up"]).await?;
    ip(&[
        "-n", ns, "route", "replace", "default", "via", &gw, "dev", "eth0",
    ])
    .await?;
    Ok(())
}

/// The pod interface's MAC, derived from its IP as Docker does: a pod that gets an IP again also
/// gets the same MAC, so no ARP cache (the host's, other pods') holds a stale entry for it, and a
/// replaced pod is reachable at once rather than after the neighbour entry expires.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Removes the namespace and veth; missing pieces are not an error.
pub async fn teardown(names: &PodNetNames) {
    // Deleting the host end removes its peer; deleting the namespace removes whatever is left.
    let _ = ip(&["link", "del", &names.host_veth]).await;
    let _ = ip(&["netns", "del", &names.netns]).await;
}

/// Removes every namespace and veth with this kubelet's prefixes, except those in `keep`.
pub async fn remove_stale(keep: &BTreeSet<String>) {
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(NETNS_PREFIX) && !keep.contains(&name) {
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

/// Pod IPs of one node: 10.213.k.2–254.
#[derive(Debug, Clone)]
pub struct Ipam {
    base: [u8; 3],
    used: BTreeSet<u8>,
}

impl Ipam {
    /// `node_ip` is the node's address (10.213.k.1); pods get the rest of its /24.
    pub fn new(node_ip: Ipv4Addr) -> Self {
        let o = node_ip.octets();
        Self {
            base: [o[0], o[1], o[2]],
            used: BTreeSet::new(),
        }
    }

    fn host_part(&self, ip: Ipv4Addr) -> Option<u8> {
        let o = ip.octets();
        ([o[0], o[1], o[2]] == self.base && (2..=254).contains(&o[3])).then_some(o[3])
    }

    /// The preferred address when it is this node's and free, else the lowest free one.
    pub fn allocate(&mut self, preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        let host = preferred
            .and_then(|ip| self.host_part(ip))
            .filter(|h| !self.used.contains(h))
            .or_else(|| (2..=254).find(|h| !self.used.contains(h)))?;
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

    #[test]
    fn names_fit_interface_limits() {
        let n = PodNetNames::for_uid("3f2a9c1e-7b4d-4e2a-9f00-112233445566");
        assert_eq!(n.netns, "lk-3f2a9c1e7b");
        assert_eq!(n.host_veth, "lkv3f2a9c1e7b");
        assert_eq!(mac_of(Ipv4Addr::new(10, 213, 2, 7)), "02:42:0a:d5:02:07");
        assert!(n.host_veth.len() <= 15);
    }

    #[test]
    fn ipam_keeps_a_preferred_address_and_reuses_released_ones() {
        let mut ipam = Ipam::new(Ipv4Addr::new(10, 213, 2, 1));
        assert_eq!(
            ipam.allocate(Some(Ipv4Addr::new(10, 213, 2, 9))),
            Some(Ipv4Addr::new(10, 213, 2, 9))
        );
        assert_eq!(ipam.allocate(None), Some(Ipv4Addr::new(10, 213, 2, 2)));
        // Another node's address is not honoured.
        assert_eq!(
            ipam.allocate(Some(Ipv4Addr::new(10, 213, 1, 5))),
            Some(Ipv4Addr::new(10, 213, 2, 3))
        );
        ipam.release(Ipv4Addr::new(10, 213, 2, 2));
        assert_eq!(ipam.allocate(None), Some(Ipv4Addr::new(10, 213, 2, 2)));
        let all: Vec<_> = std::iter::from_fn(|| ipam.allocate(None)).collect();
        assert_eq!(all.len(), 253 - 3);
    }
}
