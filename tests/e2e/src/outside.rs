//! A client outside the cluster, on localkube: its outside network namespace (`lk-outside`,
//! address [`CLIENT_IP`]) reaches the node addresses (NodePorts) and the LoadBalancer pool
//! ([`LB_POOL`]) through the host, and nothing else: a pod IP, a ClusterIP or the API server is
//! refused at once (ICMP administratively prohibited: "No route to host"). See
//! tests/localkube/README.md.
//!
//! Three ways in, as a test needs:
//! - [`command`]: a program run there (`localkube outside -- PROGRAM ARGS...`), e.g. `valkey-cli
//!   -c` or a Python client;
//! - [`connect`]: one TCP connection made there, then used from the test like any other;
//! - [`run`]: a future run on a thread of its own inside the namespace, so every connection it
//!   opens (a cluster client's too) is made there.
//!
//! On another cluster there is no such namespace: each fails with a clear error ([`available`]).

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::sched::{CloneFlags, setns};

use crate::{E2eError, Result};

/// The outside namespace.
pub const NETNS: &str = "lk-outside";
/// The outside client's own address, as servers see it when nothing masquerades it (a Service
/// with `externalTrafficPolicy: Local`).
pub const CLIENT_IP: &str = "10.214.0.2";
/// The network of the outside namespace (`loadBalancerSourceRanges` that admit it).
pub const CLIENT_CIDR: &str = "10.214.0.0/24";
/// Where localkube's allocator takes LoadBalancer addresses (Services of no class or of
/// [`LB_CLASS`]).
pub const LB_POOL: &str = "10.213.255.0/24";
pub const LB_POOL_FIRST: &str = "10.213.255.1";
pub const LB_POOL_LAST: &str = "10.213.255.254";
/// The allocator's own `loadBalancerClass`.
pub const LB_CLASS: &str = "localkube.io/loadbalancer";
/// A class the allocator serves from an empty pool: such a Service stays pending, with a Warning
/// Event `AllocationFailed` saying so.
pub const LB_CLASS_NO_ADDRESSES: &str = "localkube.io/no-addresses";
/// The cluster DNS Service (`kube-system/kube-dns`), as pods' resolv.conf names it.
pub const DNS_SERVICE_IP: &str = "10.0.0.10";

fn netns_path() -> &'static Path {
    Path::new("/run/netns/lk-outside")
}

/// Whether the outside namespace is there (localkube is running).
pub fn available() -> bool {
    netns_path().exists()
}

fn missing() -> E2eError {
    E2eError::Check(format!(
        "no outside network namespace {NETNS}: it is localkube's (make localkube)"
    ))
}

/// `program` to run in the outside namespace: add arguments, then spawn or await it as any
/// command.
pub fn command(program: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(crate::faults::localkube_program());
    cmd.args(["outside", "--", program]).kill_on_drop(true);
    cmd
}

/// Joins the outside namespace on the calling thread (a thread of its own: the namespace stays
/// with the thread).
fn enter() -> Result<()> {
    let ns = std::fs::File::open(netns_path()).map_err(|_| missing())?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|e| E2eError::Check(format!("entering {NETNS}: {e}")))
}

/// A TCP connection to `addr` made from the outside namespace, within `within`: it fails at once
/// for what the namespace may not reach, and at the deadline for what does not answer (a
/// `loadBalancerSourceRanges` that leaves the client out drops its packets).
pub async fn connect(addr: SocketAddr, within: Duration) -> Result<tokio::net::TcpStream> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let made = enter().and_then(|()| {
            let s = std::net::TcpStream::connect_timeout(&addr, within)
                .map_err(|e| E2eError::Check(format!("from {NETNS} to {addr}: {e}")))?;
            s.set_nonblocking(true)
                .map_err(|e| E2eError::Check(format!("{addr}: {e}")))?;
            Ok(s)
        });
        let _ = tx.send(made);
    });
    let std = rx.await.map_err(|_| {
        E2eError::Check(format!("connecting to {addr} from {NETNS}: thread lost"))
    })??;
    tokio::net::TcpStream::from_std(std).map_err(|e| E2eError::Check(format!("{addr}: {e}")))
}

/// Runs the future `make` returns on a thread of its own inside the outside namespace, with a
/// runtime of its own, and returns its output: every socket it opens is the outside client's.
pub async fn run<F, Fut, T>(make: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let out = enter().and_then(|()| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| E2eError::Check(format!("a runtime in {NETNS}: {e}")))?;
            Ok(rt.block_on(make()))
        });
        let _ = tx.send(out);
    });
    rx.await
        .map_err(|_| E2eError::Check(format!("the thread in {NETNS} ended without an answer")))?
}
