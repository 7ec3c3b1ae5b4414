//! Real valkey-server processes on loopback addresses, each in its own folder with its own
//! nodes.conf, killed when dropped (also when a test panics).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const PORT: u16 = 6379;
pub const NODE_TIMEOUT_MS: u64 = 3000;

/// The passwords of the test ACL: the default user, the operator the engine connects as, and
/// the user replicas (and atomic slot migration) authenticate with.
pub const DEFAULT_PASSWORD: &str = "default-secret";
pub const OPERATOR_USER: &str = "operator";
pub const OPERATOR_PASSWORD: &str = "operator-secret";
pub const REPLICATION_USER: &str = "replicator";
pub const REPLICATION_PASSWORD: &str = "replicator-secret";

/// A valkey-server binary and the library folder it needs.
#[derive(Debug, Clone)]
pub struct Binary {
    pub path: PathBuf,
    pub libs: Option<PathBuf>,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn binary(env: &str, image: &str) -> Binary {
    let path = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| {
        workspace_root()
            .join(".localkube/images")
            .join(image)
            .join("bin/valkey-server")
    });
    assert!(
        path.is_file(),
        "{} not found: run `make localkube-tools` (it builds the Valkey images), or set {env} to a \
         valkey-server binary",
        path.display()
    );
    let libs = path
        .parent()
        .and_then(Path::parent)
        .map(|image| image.join("lib"))
        .filter(|lib| lib.is_dir());
    Binary {
        path: private_copy(&path, image),
        libs,
    }
}

/// A copy of the binary outside `.localkube/`: `localkube stop` sweeps every process whose
/// executable lives under its image folder, and would take these tests' servers with it.
/// The copy is keyed by the original's size and modification time and written atomically,
/// so parallel tests share it and a rebuilt image gets a new one.
fn private_copy(original: &Path, image: &str) -> PathBuf {
    let meta =
        std::fs::metadata(original).unwrap_or_else(|e| panic!("{}: {e}", original.display()));
    let stamp = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let dir = std::env::temp_dir()
        .join("valkey-engine-tests")
        .join("bin")
        .join(format!("{image}-{}-{stamp}", meta.len()));
    let copy = dir.join("valkey-server");
    if copy.is_file() {
        return copy;
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    // Unique per process *and* per call: the tests of one binary run on parallel threads of
    // one process, and a partial named by the process alone was truncated by one thread while
    // another renamed it away (the second rename then found no file).
    static COPIES: AtomicU64 = AtomicU64::new(0);
    let partial = dir.join(format!(
        "valkey-server.{}.{}",
        std::process::id(),
        COPIES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::copy(original, &partial)
        .unwrap_or_else(|e| panic!("copying {}: {e}", original.display()));
    std::fs::rename(&partial, &copy).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
    copy
}

/// `cmd.spawn()`, tried again while the binary is "busy" (ETXTBSY): a binary these tests just
/// copied can still be open for writing in the child of another test's fork (the copy's file
/// descriptor lives in that child until it execs its own program), and Linux refuses to run a
/// file open for writing. The window is a fork's length; a few short tries outlast it.
pub fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result,
        }
    }
}

/// Valkey 9.x: `VALKEY_SERVER_9`, or the image `make localkube-tools` builds.
pub fn valkey_9() -> Binary {
    binary("VALKEY_SERVER_9", "valkey-9.1")
}

/// Valkey 8.x: `VALKEY_SERVER_8`, or the image `make localkube-tools` builds.
pub fn valkey_8() -> Binary {
    binary("VALKEY_SERVER_8", "valkey-8.0")
}

/// How a test's servers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The replication user starts disabled on every start and the engine admits it once the
    /// node is settled, as the operator runs its servers; without persistence the clients' user
    /// too.
    pub fenced: bool,
    /// An append-only file: a restarted server keeps its data. Without it, it comes back empty
    /// (same node id, from nodes.conf), as a pod without persistence restarted in place.
    pub persistence: bool,
    /// The default user needs no password: clients that do not authenticate.
    pub open_default_user: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            fenced: false,
            persistence: true,
            open_default_user: false,
        }
    }
}

/// Writes the ACL file every server of a test shares.
pub fn write_acl(dir: &Path, options: Options) -> PathBuf {
    let path = dir.join("users.acl");
    let default = if options.open_default_user {
        "nopass".to_owned()
    } else {
        format!(">{DEFAULT_PASSWORD}")
    };
    let replication = if options.fenced { "off" } else { "on" };
    // As the operator writes it: the clients of servers that keep no data are fenced too.
    let clients = if options.fenced && !options.persistence {
        "off"
    } else {
        "on"
    };
    let text = format!(
        "user default {clients} {default} ~* &* +@all\n\
         user {OPERATOR_USER} on >{OPERATOR_PASSWORD} ~* &* +@all\n\
         user {REPLICATION_USER} {replication} >{REPLICATION_PASSWORD} ~* &* +@all\n"
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// One server: its folder (kept across restarts, so it keeps its node id and data unless
/// wiped) and its process while running.
#[derive(Debug)]
pub struct Server {
    pub dir: PathBuf,
    pub ip: Option<Ipv4Addr>,
    child: Option<Child>,
}

impl Server {
    pub fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self {
            dir,
            ip: None,
            child: None,
        }
    }

    pub fn address(&self) -> Option<SocketAddr> {
        self.ip.map(|ip| SocketAddr::from((ip, PORT)))
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    pub fn start(&mut self, binary: &Binary, acl: &Path, ip: Ipv4Addr, persistence: bool) {
        let timeout = NODE_TIMEOUT_MS.to_string();
        self.spawn(
            binary,
            acl,
            ip,
            persistence,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
                // The operator owns the topology: no replica wanders to another shard by itself.
                "--cluster-allow-replica-migration",
                "no",
            ],
        );
    }

    /// Starts the server without cluster mode, as a member of a replication starts: a replica of
    /// nothing (`replicaof 127.0.0.1 0`) until the operator tells it its place.
    pub fn start_parked(&mut self, binary: &Binary, acl: &Path, ip: Ipv4Addr, persistence: bool) {
        self.spawn(
            binary,
            acl,
            ip,
            persistence,
            &[
                "--replicaof",
                "127.0.0.1 0",
                "--repl-ping-replica-period",
                "1",
                "--repl-diskless-sync-delay",
                "0",
            ],
        );
    }

    fn spawn(
        &mut self,
        binary: &Binary,
        acl: &Path,
        ip: Ipv4Addr,
        persistence: bool,
        mode: &[&str],
    ) {
        assert!(
            self.child.is_none(),
            "{} is already running",
            self.dir.display()
        );
        let ip_text = ip.to_string();
        let mut cmd = Command::new(&binary.path);
        cmd.args(["--bind", &ip_text])
            // Outgoing links (cluster bus, replication) must leave from the node's own address,
            // or its peers learn 127.0.0.1 for it.
            .args(["--bind-source-addr", &ip_text])
            .args(["--port", &PORT.to_string()])
            .args(mode)
            .args(["--aclfile", &acl.display().to_string()])
            .args(["--masteruser", REPLICATION_USER])
            .args(["--masterauth", REPLICATION_PASSWORD])
            .args(["--appendonly", if persistence { "yes" } else { "no" }])
            .args(["--save", ""])
            .args(["--dir", &self.dir.display().to_string()])
            .args(["--logfile", "server.log"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(libs) = &binary.libs {
            cmd.env("LD_LIBRARY_PATH", libs);
        }
        let child =
            spawn(&mut cmd).unwrap_or_else(|e| panic!("starting {}: {e}", binary.path.display()));
        self.child = Some(child);
        self.ip = Some(ip);
    }

    /// SIGTERM and wait: Valkey flushes its append-only file and exits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    self.ip = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.ip = None;
    }

    /// Sends `signal` to the running process (SIGSTOP, SIGCONT).
    pub fn signal(&mut self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// SIGKILL: the process dies mid-flight, as on a node failure.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.ip = None;
    }

    /// Deletes its data and nodes.conf: it comes back as a new, empty node.
    pub fn wipe(&mut self) {
        assert!(self.child.is_none(), "wipe a stopped server only");
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir)
            .unwrap_or_else(|e| panic!("{}: {e}", self.dir.display()));
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
