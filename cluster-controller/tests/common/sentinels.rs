//! Real Sentinels (`valkey-server <conf> --sentinel`) on loopback addresses beside a
//! replication lab's servers: each in its own folder with a writable config (Sentinel rewrites
//! it), the Sentinels' ACL file the operator gives them, killed when dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cluster_controller::access::{Login, OperatorPasswords, UserSet, password_hash};

use super::servers::{self, Binary, DEFAULT_PASSWORD, OPERATOR_PASSWORD, REPLICATION_PASSWORD};

pub const SENTINEL_PORT: u16 = 26379;
pub const SENTINEL_USER: &str = "sentinel";
pub const SENTINEL_PASSWORD: &str = "sentinel-secret";

/// The operator's users with the lab's passwords: the Sentinels' file and the servers'
/// `sentinel` line come from the product's own [`UserSet`].
fn users() -> UserSet {
    users_with_clients_password(DEFAULT_PASSWORD)
}

/// The same users with another clients' password.
pub fn users_with_clients_password(password: &str) -> UserSet {
    let passwords = OperatorPasswords {
        operator: OPERATOR_PASSWORD.into(),
        healthcheck: "healthcheck-secret".into(),
        replication: REPLICATION_PASSWORD.into(),
        backup: "backup-secret".into(),
        sentinel: SENTINEL_PASSWORD.into(),
    };
    UserSet::new(Login::Hashes(vec![password_hash(password)]), &passwords, [])
        .with_sentinel(&passwords)
}

/// The `sentinel` user's line of the servers' ACL file, as the operator writes it: fenced by
/// its rights until the engine admits the server.
pub fn server_acl_line() -> String {
    let file = users().acl_file();
    file.lines()
        .find(|l| l.starts_with("user sentinel "))
        .unwrap_or_else(|| panic!("no sentinel user in {file}"))
        .to_owned()
}

pub struct Sentinel {
    pub dir: PathBuf,
    pub ip: Ipv4Addr,
    child: Option<Child>,
}

impl Sentinel {
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from((self.ip, SENTINEL_PORT))
    }

    /// Starts a Sentinel on `ip` from a clean config, as the node-controller starts one.
    pub fn start(binary: &Binary, dir: &Path, ip: Ipv4Addr) -> Self {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let acl = dir.join("sentinel.acl");
        let file = users()
            .sentinel_acl_file()
            .unwrap_or_else(|| panic!("no Sentinels' file"));
        std::fs::write(&acl, file).unwrap_or_else(|e| panic!("{}: {e}", acl.display()));
        let conf = dir.join("sentinel.conf");
        // As the operator renders it, plus what loopback needs: each Sentinel announces its own
        // address (on a pod the address it connects from is its own).
        let text = format!(
            "port {SENTINEL_PORT}\nbind {ip}\nprotected-mode no\n\
             sentinel resolve-hostnames no\nsentinel announce-ip {ip}\n\
             aclfile {}\ndir {}\nlogfile sentinel.log\n",
            acl.display(),
            dir.display()
        );
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
        let mut cmd = Command::new(&binary.path);
        cmd.arg(&conf)
            .arg("--sentinel")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(libs) = &binary.libs {
            cmd.env("LD_LIBRARY_PATH", libs);
        }
        let child = servers::spawn(&mut cmd)
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.path.display()));
        Self {
            dir: dir.to_path_buf(),
            ip,
            child: Some(child),
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}
