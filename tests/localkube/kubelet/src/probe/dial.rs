//! Where a probe's connection comes from.
//!
//! An exec probe runs inside the pod, so the native `valkey-cli` answer must connect from inside
//! the pod's network namespace: over its loopback, where a server in protected mode (no password)
//! accepts it, exactly as it accepts the real `valkey-cli` run in the container. The socket is made
//! by a short-lived thread that joins the pod's namespace (a socket belongs to the namespace it was
//! created in, for life) and is then connected on the runtime like any other. That costs a thread
//! start (tens of microseconds) per probe, where running the image's `valkey-cli` would cost a fork,
//! an exec, the dynamic linker and a new mount namespace each time: with hundreds of pods probed
//! every few seconds, the difference is a noticeable share of a core.
//!
//! tcpSocket and httpGet probes come from the node, as a kubelet's do: from the host namespace,
//! with the node's own address as source, so a fault that cuts a pod from the host's main address
//! (where the API server and the operator are) leaves its kubelet's probes alone.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sched::{CloneFlags, setns};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP socket (IPv4, or IPv6 with `v6`), not yet connected, made inside the network namespace
/// at `netns`.
async fn socket_in(netns: &Path, v6: bool) -> io::Result<TcpSocket> {
    let path: PathBuf = netns.to_path_buf();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("netns-socket".into())
        .spawn(move || {
            let made = std::fs::File::open(&path).and_then(|ns| {
                // Only this thread changes namespace, and it ends right after.
                setns(&ns, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                if v6 {
                    TcpSocket::new_v6()
                } else {
                    TcpSocket::new_v4()
                }
            });
            let _ = tx.send(made);
        })?;
    rx.await
        .map_err(|_| io::Error::other("the thread making the socket ended without an answer"))?
}

/// Connects to `addr` from inside the pod's network namespace.
pub async fn in_pod(netns: &Path, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let attempt = async {
        let socket = socket_in(netns, addr.is_ipv6()).await?;
        socket.connect(addr).await
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("{addr}: i/o timeout")))?
}

/// Connects to `host:port` from the host namespace with the node's address as source.
pub async fn from_node(
    node_ip: Ipv4Addr,
    host: &str,
    port: u16,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let attempt = async {
        let addr = tokio::net::lookup_host((host, port))
            .await?
            .find(SocketAddr::is_ipv4)
            .ok_or_else(|| io::Error::other(format!("{host}: no IPv4 address")))?;
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(IpAddr::V4(node_ip), 0))?;
        socket.connect(addr).await
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "i/o timeout"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root and iproute2 are needed; elsewhere the test says so and passes.
    fn privileged() -> bool {
        nix::unistd::geteuid().is_root() && Path::new("/usr/sbin/ip").exists()
    }

    #[tokio::test]
    async fn a_socket_made_in_a_namespace_reaches_its_loopback_only()
    -> Result<(), Box<dyn std::error::Error>> {
        if !privileged() {
            eprintln!("skipped: needs root and iproute2");
            return Ok(());
        }
        let names = crate::network::PodNetNames::for_uid(&format!("d{}", std::process::id()));
        crate::network::ip(&["netns", "add", &names.netns]).await?;
        crate::network::ip(&["-n", &names.netns, "link", "set", "lo", "up"]).await?;
        // A listener on the namespace's loopback, made the same way.
        let listener = socket_in(&names.netns_path(), false).await?;
        listener.set_reuseaddr(true)?;
        listener.bind("127.0.0.1:0".parse()?)?;
        let port = listener.local_addr()?.port();
        let listener = listener.listen(8)?;
        let inside = in_pod(
            &names.netns_path(),
            SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(5),
        )
        .await;
        let accepted = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await;
        // The host's loopback has no such listener (the port is the namespace's).
        let outside = TcpStream::connect(("127.0.0.1", port)).await;
        crate::network::teardown(&names).await;
        assert!(inside.is_ok(), "connect inside: {inside:?}");
        assert!(matches!(accepted, Ok(Ok(_))), "accept: {accepted:?}");
        assert!(outside.is_err(), "the host's loopback answered on {port}");
        Ok(())
    }
}
