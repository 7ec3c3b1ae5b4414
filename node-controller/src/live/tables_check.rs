//! The tables against the real servers, not guesses: for every setting a server lists
//! (`CONFIG GET *`), `CONFIG SET` to its own current value succeeds exactly when the table of
//! that version calls it live. `LIVE_CONFIG_WRITE=1` rewrites a table from its server.
//!
//! The servers are the localkube images' (`make localkube-tools` builds them), or the binaries
//! `VALKEY_9_1_SERVER` and `VALKEY_8_0_SERVER` name.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Version, table};

struct Server(Child, PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn binary(version: &str) -> PathBuf {
    let env = format!("VALKEY_{}_SERVER", version.replace('.', "_"));
    std::env::var_os(&env)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../.localkube/images")
                .join(format!("valkey-{version}"))
                .join("bin/valkey-server")
        })
}

fn start(version: &str) -> (Server, redis::Connection) {
    let path = binary(version);
    assert!(
        path.is_file(),
        "{} not found: run `make localkube-tools`, or name a valkey-server {version} in VALKEY_{}_SERVER",
        path.display(),
        version.replace('.', "_")
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"));
    let dir = std::env::temp_dir().join(format!("live-config-{version}-{port}"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut command = Command::new(&path);
    if let Some(lib) = path.parent().and_then(Path::parent).map(|i| i.join("lib")) {
        command.env("LD_LIBRARY_PATH", lib);
    }
    let child = command
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let server = Server(child, dir);
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.get_connection() {
            Ok(connection) => return (server, connection),
            Err(e) if Instant::now() > deadline => panic!("valkey-server {version}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The settings the server changes at runtime, found by setting each to its own value.
fn live_settings(connection: &mut redis::Connection) -> Vec<String> {
    let all: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(connection)
        .unwrap_or_else(|e| panic!("CONFIG GET *: {e}"));
    let mut live: Vec<String> = all
        .chunks(2)
        .filter_map(|pair| match pair {
            [key, value] => redis::cmd("CONFIG")
                .arg("SET")
                .arg(key)
                .arg(value)
                .query::<()>(connection)
                .ok()
                .map(|()| key.clone()),
            _ => None,
        })
        .collect();
    live.sort();
    live
}

fn check(version: &str) {
    let (_server, mut connection) = start(version);
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .unwrap_or_else(|e| panic!("{e}"));
    let reported = crate::probe::parse_server(&info)
        .version
        .unwrap_or_default();
    let parsed = Version::parse(&reported);
    assert_eq!(
        parsed.map(|v| v.to_string()).as_deref(),
        Some(version),
        "the server reports {reported}"
    );
    let found = live_settings(&mut connection);
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("live-config/valkey-{version}.txt"));
    if std::env::var_os("LIVE_CONFIG_WRITE").is_some() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let header: String = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&file, format!("{header}{}\n", found.join("\n")))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        return;
    }
    let listed: Vec<String> = parsed
        .and_then(table)
        .map(|t| super::keys(t).map(str::to_owned).collect())
        .unwrap_or_default();
    let missing: Vec<&String> = found.iter().filter(|k| !listed.contains(k)).collect();
    let wrong: Vec<&String> = listed.iter().filter(|k| !found.contains(k)).collect();
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "{}: live on the server but not in the table: {missing:?}; in the table but not live: \
         {wrong:?} (LIVE_CONFIG_WRITE=1 rewrites it)",
        file.display()
    );
    assert!(found.len() > 100, "only {} live settings", found.len());
}

#[test]
fn the_9_1_table_is_what_valkey_9_1_changes_at_runtime() {
    check("9.1");
}

#[test]
fn the_8_0_table_is_what_valkey_8_0_changes_at_runtime() {
    check("8.0");
}
