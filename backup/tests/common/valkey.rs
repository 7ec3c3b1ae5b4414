//! A standalone valkey-server with the users a backup test needs: the default user, a backup user
//! with [`backup::capture::BACKUP_RULES`] only, and an ordinary client user.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::servers::Binary;

pub const PORT: u16 = 6379;
pub const DEFAULT_PASSWORD: &str = "default-secret";
pub const BACKUP_USER: &str = "backup";
pub const BACKUP_PASSWORD: &str = "backup-secret";
/// A client user as the operator makes them: every key and data command, no administration.
pub const CLIENT_USER: &str = "app";
pub const CLIENT_PASSWORD: &str = "app-secret";

pub struct Valkey {
    pub dir: PathBuf,
    pub address: SocketAddr,
    child: Option<Child>,
}

/// How the server sends a full sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// `repl-diskless-sync no`: it writes the RDB file, then sends it sized.
    Disk,
    /// `repl-diskless-sync yes`: streamed from the fork, the `$EOF:` form.
    Diskless,
}

impl Valkey {
    /// Starts a server on `ip` in `dir`; a `dump.rdb` already there is loaded at start.
    pub fn start(binary: &Binary, ip: Ipv4Addr, dir: &Path, sync: Sync) -> Self {
        std::fs::create_dir_all(dir).expect("server folder");
        let acl = dir.join("users.acl");
        std::fs::write(
            &acl,
            format!(
                "user default on >{DEFAULT_PASSWORD} ~* &* +@all\n\
                 user {BACKUP_USER} on >{BACKUP_PASSWORD} {}\n\
                 user {CLIENT_USER} on >{CLIENT_PASSWORD} ~* &* +@all -@admin\n",
                backup::capture::BACKUP_RULES
            ),
        )
        .expect("ACL file");
        let mut cmd = Command::new(&binary.path);
        cmd.args(["--bind", &ip.to_string(), "--port", &PORT.to_string()])
            .args(["--aclfile", &acl.display().to_string()])
            .args([
                "--dir",
                &dir.display().to_string(),
                "--dbfilename",
                "dump.rdb",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .args([
                "--repl-diskless-sync",
                if sync == Sync::Diskless { "yes" } else { "no" },
            ])
            // The default waits 5 s for more replicas to share a diskless sync.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--logfile", "server.log"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(libs) = &binary.libs {
            cmd.env("LD_LIBRARY_PATH", libs);
        }
        let child = super::servers::spawn(&mut cmd).expect("starting valkey-server");
        let server = Self {
            dir: dir.to_owned(),
            address: SocketAddr::from((ip, PORT)),
            child: Some(child),
        };
        // Up once it answers PING (not -LOADING) as the default user.
        super::wait_for(
            "valkey-server answers PING",
            Duration::from_secs(60),
            || {
                let mut conn = server.client(None).get_connection().ok()?;
                redis::cmd("PING").query::<String>(&mut conn).ok()
            },
        );
        server
    }

    /// A client as `user` (default: the default user).
    pub fn client(&self, user: Option<(&str, &str)>) -> redis::Client {
        let (user, password) = user.unwrap_or(("default", DEFAULT_PASSWORD));
        redis::Client::open(format!("redis://{user}:{password}@{}/", self.address)).expect("client")
    }

    pub fn connection(&self) -> redis::Connection {
        self.client(None).get_connection().expect("connection")
    }

    pub fn source(&self, user: &str, password: &str) -> backup::Source {
        backup::Source {
            address: self.address.to_string(),
            user: user.to_owned(),
            password: password.to_owned(),
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Valkey {
    fn drop(&mut self) {
        self.kill();
    }
}
