//! Pods: a worker per pod runs its containers; the manager feeds workers from a watch.

pub mod container;
pub mod manager;
pub mod setup;
pub mod status;
pub mod worker;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::ExitStatus;

use k8s_openapi::api::core::v1::Pod;

use crate::config::Settings;
use crate::network::Ipam;
use crate::node_faults::{NodeFault, Stopped};
use crate::probe::Kind;

/// What every pod worker shares.
pub struct Ctx {
    pub client: kube::Client,
    pub settings: Settings,
    /// The bridge's own address, every pod's gateway.
    pub gateway: Ipv4Addr,
    /// Pod IPs per node name.
    pub ipam: std::sync::Mutex<BTreeMap<String, Ipam>>,
    /// Nodes stopped by a fault.
    faults: tokio::sync::watch::Receiver<Stopped>,
}

impl Ctx {
    pub fn new(
        client: kube::Client,
        settings: Settings,
        gateway: Ipv4Addr,
        faults: tokio::sync::watch::Receiver<Stopped>,
    ) -> Self {
        let ipam = settings
            .nodes
            .iter()
            .map(|n| (n.name.clone(), Ipam::new(n.ip)))
            .collect();
        Self {
            client,
            settings,
            gateway,
            ipam: std::sync::Mutex::new(ipam),
            faults,
        }
    }

    /// The fault that stops `node`, if any.
    pub fn node_fault(&self, node: &str) -> Option<NodeFault> {
        self.faults.borrow().get(node).copied()
    }

    pub fn allocate_ip(&self, node: &str, preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        let mut ipam = self.ipam.lock().unwrap_or_else(|p| p.into_inner());
        ipam.get_mut(node)?.allocate(preferred)
    }

    pub fn release_ip(&self, node: &str, ip: Ipv4Addr) {
        let mut ipam = self.ipam.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = ipam.get_mut(node) {
            i.release(ip);
        }
    }
}

/// Which container a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub init: bool,
    pub index: usize,
    pub generation: u64,
}

#[derive(Debug)]
pub enum Msg {
    /// The latest version of the pod from the watch.
    Pod(Box<Pod>),
    /// The pod is no longer in the API (or no longer on our nodes).
    Gone,
    Exited {
        slot: Slot,
        status: ExitStatus,
    },
    Probe {
        slot: Slot,
        kind: Kind,
        ok: bool,
        message: Option<String>,
    },
    /// The kubelet is stopping: end the processes, keep the pod.
    Shutdown,
}
