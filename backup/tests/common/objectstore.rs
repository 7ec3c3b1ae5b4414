//! The object store process: versitygw's posix backend (tests/objectstore/README.md), built by
//! `tests/objectstore/build.sh` (which `make unit` runs first), on a loopback address with a
//! folder and credentials of the test's own.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use backup::StoreConfig;

pub const ACCESS_KEY: &str = "backup-test";
pub const SECRET_KEY: &str = "backup-test-secret";
pub const BUCKET: &str = "backups";
const PORT: u16 = 7070;

/// The binary, or `None` (the tests then skip, saying how to build it).
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("OBJECTSTORE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.localkube/objectstore/bin/versitygw")
        });
    path.is_file().then_some(path)
}

/// Returns the binary, or prints why the test is skipped and returns from it.
#[macro_export]
macro_rules! require_objectstore {
    () => {
        match $crate::common::objectstore::binary() {
            Some(path) => path,
            None => {
                eprintln!(
                    "SKIPPED: the object store is not built: run tests/objectstore/build.sh \
                     (make unit does), or set OBJECTSTORE_BIN to a versitygw binary"
                );
                return;
            }
        }
    };
}

pub struct ObjectStore {
    binary: PathBuf,
    pub dir: PathBuf,
    pub address: SocketAddr,
    child: Option<Child>,
}

impl ObjectStore {
    /// A store on `ip` serving `dir/root`, with the bucket [`BUCKET`] in it.
    pub fn start(binary: PathBuf, ip: Ipv4Addr, dir: &Path) -> Self {
        let root = dir.join("root");
        // The posix backend serves every folder of its root as a bucket.
        std::fs::create_dir_all(root.join(BUCKET)).expect("object store folder");
        let mut store = Self {
            binary,
            dir: dir.to_owned(),
            address: SocketAddr::from((ip, PORT)),
            child: None,
        };
        store.restart();
        store
    }

    /// Starts the process again on the same folder and address.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the object store is already running");
        let log = std::fs::File::create(self.dir.join("objectstore.log")).expect("log");
        let child = Command::new(&self.binary)
            .args(["--port", &self.address.to_string()])
            .args(["--access", ACCESS_KEY, "--secret", SECRET_KEY, "--quiet"])
            .arg("posix")
            .arg(self.dir.join("root"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting the object store");
        self.child = Some(child);
        let address = self.address;
        super::wait_for(
            "the object store accepts connections",
            Duration::from_secs(15),
            || TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok(),
        );
    }

    /// SIGKILL: the store is gone, as a store that became unreachable.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn config(&self) -> StoreConfig {
        let mut config = StoreConfig::s3_compatible(
            format!("http://{}", self.address),
            BUCKET,
            ACCESS_KEY,
            SECRET_KEY,
        );
        config.prefix = "tests".to_owned();
        config
    }
}

impl Drop for ObjectStore {
    fn drop(&mut self) {
        self.kill();
    }
}
