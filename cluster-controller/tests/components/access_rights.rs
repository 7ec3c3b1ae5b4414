//! The users the operator gives every server, on real valkey-server processes of 9.x and 8.0:
//! the clients' users get data commands and are refused every administration command with
//! NOPERM; the operator's users get what they need and no data; and a change of users or
//! passwords reaches a running server without a restart.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster_controller::access::{
    AccessState, AclUser, Bootstrap, Login, OperatorPasswords, Target, UserSet, password_hash,
    rotation,
};
use cluster_controller::client::{Credentials, RedisClient, RedisClientConfig, ValkeyClient};
use redis::Value;

use common::servers::{self, Binary, Server};

const CLIENT_PASSWORD: &str = "client-secret";
const APP_PASSWORD: &str = "app-secret";

fn operator_passwords() -> OperatorPasswords {
    OperatorPasswords {
        operator: "op-secret".into(),
        healthcheck: "hc-secret".into(),
        replication: "rep-secret".into(),
        backup: "bk-secret".into(),
        sentinel: "sn-secret".into(),
    }
}

fn users(default_passwords: &[&str], named: &[(&str, &str, &str)]) -> UserSet {
    let hashes = |list: &[&str]| Login::Hashes(list.iter().map(|p| password_hash(p)).collect());
    UserSet::new(
        hashes(default_passwords),
        &operator_passwords(),
        named
            .iter()
            .map(|(name, password, rules)| AclUser::client(name, hashes(&[password]), rules)),
    )
}

struct One {
    server: Server,
    address: SocketAddr,
    _dir: PathBuf,
}

/// A server on `127.0.<subnet>.1` that starts with `acl` as its ACL file.
fn start(name: &str, binary: &Binary, subnet: u8, acl: &str) -> One {
    let dir = std::env::temp_dir()
        .join("valkey-engine-tests")
        .join(format!("access-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let acl_path = dir.join("users.acl");
    std::fs::write(&acl_path, acl).unwrap_or_else(|e| panic!("{e}"));
    let mut server = Server::new(dir.join("server"));
    let ip = Ipv4Addr::new(127, 0, subnet, 1);
    server.start(binary, &acl_path, ip, false);
    One {
        server,
        address: SocketAddr::from((ip, servers::PORT)),
        _dir: dir,
    }
}

fn client(user: Option<&str>, password: Option<&str>) -> RedisClient {
    RedisClient::new(RedisClientConfig {
        credentials: Credentials {
            username: user.map(str::to_owned),
            password: password.map(|p| p.to_owned().into()),
        },
        trust: None,
        connect_timeout: Duration::from_millis(500),
    })
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for a in args {
        c.arg(*a);
    }
    c
}

async fn run(client: &RedisClient, at: SocketAddr, args: &[&str]) -> Result<Value, String> {
    client
        .command(at, &cmd(args), Duration::from_secs(2))
        .await
        .map_err(|e| e.to_string())
}

async fn wait_up(one: &mut One, as_client: &RedisClient) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if run(as_client, one.address, &["PING"]).await.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline && one.server.running(),
            "the server did not come up: {}",
            one.server.log_tail(10)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A user the tests add to the ACL file to ask `ACL DRYRUN` (the operator has no such right).
const TEST_ADMIN: &str = "user testadmin on >testadmin ~* &* +@all\n";

/// Each command must be refused with NOPERM (DEBUG and MODULE may be refused first by the server's
/// own `enable-*-command` guard; `ACL DRYRUN` then shows the ACL refuses them too); returns the
/// ones that were not.
async fn not_refused(client: &RedisClient, at: SocketAddr, commands: &[&[&str]]) -> Vec<String> {
    let mut wrong = Vec::new();
    for args in commands {
        match run(client, at, args).await {
            Err(e) if e.to_lowercase().contains("noperm") => {}
            Err(e) if e.contains("command not allowed") => {}
            other => wrong.push(format!("{}: {other:?}", args.join(" "))),
        }
    }
    wrong
}

/// `ACL DRYRUN user <command>` must refuse each command; returns the ones it allows.
async fn dry_run_allows(at: SocketAddr, user: &str, commands: &[&[&str]]) -> Vec<String> {
    let admin = client(Some("testadmin"), Some("testadmin"));
    let mut wrong = Vec::new();
    for args in commands {
        let mut dry = vec!["ACL", "DRYRUN", user];
        dry.extend_from_slice(args);
        match run(&admin, at, &dry).await {
            Ok(Value::Okay) => wrong.push(args.join(" ")),
            Ok(Value::SimpleString(s)) if s == "OK" => wrong.push(args.join(" ")),
            _ => {}
        }
    }
    wrong
}

/// Each command must be allowed (it may still fail for its own reasons, but not NOPERM).
async fn refused(client: &RedisClient, at: SocketAddr, commands: &[&[&str]]) -> Vec<String> {
    let mut wrong = Vec::new();
    for args in commands {
        if let Err(e) = run(client, at, args).await
            && e.to_lowercase().contains("noperm")
        {
            wrong.push(format!("{}: {e}", args.join(" ")));
        }
    }
    wrong
}

const ADMINISTRATION: &[&[&str]] = &[
    &["CONFIG", "GET", "masterauth"],
    &["CONFIG", "SET", "maxmemory", "1"],
    &["ACL", "SETUSER", "replication", "on"],
    &["ACL", "LIST"],
    &["ACL", "GETUSER", "operator"],
    &["CLUSTER", "MEET", "127.0.0.1", "7000"],
    &["CLUSTER", "RESET"],
    &[
        "CLUSTER",
        "FORGET",
        "0000000000000000000000000000000000000000",
    ],
    &["CLUSTER", "FAILOVER"],
    &[
        "CLUSTER",
        "REPLICATE",
        "0000000000000000000000000000000000000000",
    ],
    &["CLUSTER", "ADDSLOTS", "1"],
    &["CLUSTER", "DELSLOTS", "1"],
    &["CLUSTER", "SETSLOT", "1", "STABLE"],
    &["CLUSTER", "FLUSHSLOTS"],
    &["CLUSTER", "BUMPEPOCH"],
    &["DEBUG", "SLEEP", "0"],
    &["MODULE", "LIST"],
    &["SHUTDOWN", "NOSAVE"],
    &["MIGRATE", "127.0.0.1", "7000", "k", "0", "1000"],
    &["RESTORE", "k", "0", "x"],
    &["REPLICAOF", "NO", "ONE"],
    &["FAILOVER"],
    &["MONITOR"],
    &["CLIENT", "KILL", "ID", "1"],
    &["BGSAVE"],
    &["PSYNC", "?", "-1"],
];

const DATA: &[&[&str]] = &[
    &["SET", "k", "v"],
    &["GET", "k"],
    &["INCR", "n"],
    &["HSET", "h", "f", "v"],
    &["LPUSH", "l", "x"],
    &["EXPIRE", "k", "100"],
    &["DEL", "h"],
    &["SCAN", "0"],
    &["KEYS", "*"],
    &["PUBLISH", "ch", "m"],
    &["EVAL", "return 1", "0"],
    &["WAIT", "0", "0"],
    &["PING"],
    &["INFO", "replication"],
    &["READONLY"],
    &["READWRITE"],
    &["CLUSTER", "SLOTS"],
    &["CLUSTER", "SHARDS"],
    &["CLUSTER", "NODES"],
    &["CLUSTER", "INFO"],
    &["CLUSTER", "KEYSLOT", "k"],
    &["ACL", "WHOAMI"],
];

/// What the probes, the node-controller and the metrics exporter send as the healthcheck user.
const EXPORTER_READS: &[&[&str]] = &[
    &["PING"],
    &["INFO", "replication"],
    &["INFO", "ALL"],
    &["CONFIG", "GET", "maxmemory"],
    &["SLOWLOG", "GET", "1"],
    &["SLOWLOG", "LEN"],
    &["LATENCY", "LATEST"],
    &["CLUSTER", "INFO"],
];

async fn rights_on(binary: Binary, subnet: u8) {
    let set = users(
        &[CLIENT_PASSWORD],
        &[("app", APP_PASSWORD, "~app:* &* +@all")],
    );
    let file = set.acl_file() + TEST_ADMIN;
    let mut one = start(&format!("rights{subnet}"), &binary, subnet, &file);
    let operator = client(Some("operator"), Some("op-secret"));
    wait_up(&mut one, &operator).await;
    let at = one.address;
    // One server owning every slot, so keyed commands are served.
    let admin = client(Some("testadmin"), Some("testadmin"));
    run(&admin, at, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !format!("{:?}", run(&admin, at, &["CLUSTER", "INFO"]).await).contains("cluster_state:ok")
    {
        assert!(
            Instant::now() < deadline,
            "the one-server cluster never became ok"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The clients' default user and a named user: data yes, administration never.
    let default = client(None, Some(CLIENT_PASSWORD));
    let wrong = not_refused(&default, at, ADMINISTRATION).await;
    assert!(
        wrong.is_empty(),
        "the default user may administer: {wrong:#?}"
    );
    let wrong = dry_run_allows(at, "default", ADMINISTRATION).await;
    assert!(
        wrong.is_empty(),
        "ACL DRYRUN lets the default user run: {wrong:#?}"
    );
    let wrong = refused(&default, at, DATA).await;
    assert!(
        wrong.is_empty(),
        "the default user lacks data commands: {wrong:#?}"
    );
    let app = client(Some("app"), Some(APP_PASSWORD));
    let wrong = not_refused(&app, at, ADMINISTRATION).await;
    assert!(wrong.is_empty(), "a named user may administer: {wrong:#?}");
    let wrong = dry_run_allows(at, "app", ADMINISTRATION).await;
    assert!(wrong.is_empty(), "ACL DRYRUN lets app run: {wrong:#?}");
    let own_key = run(&app, at, &["SET", "app:1", "x"]).await;
    assert!(own_key.is_ok(), "{own_key:?}");
    let other_key = run(&app, at, &["GET", "other"]).await;
    assert!(
        other_key
            .as_ref()
            .is_err_and(|e| e.to_lowercase().contains("noperm")),
        "its own key patterns hold: {other_key:?}"
    );

    // The operator: its commands, no data.
    let operator_commands: &[&[&str]] = &[
        &["CLUSTER", "NODES"],
        &["CLUSTER", "INFO"],
        &["CLUSTER", "MYID"],
        &["CLUSTER", "SHARDS"],
        &["CLUSTER", "COUNTKEYSINSLOT", "0"],
        &["CLUSTER", "GETKEYSINSLOT", "0", "1"],
        &["DBSIZE"],
        &["INFO", "server", "replication", "persistence"],
        &["CONFIG", "GET", "cluster-node-timeout"],
        &["ACL", "GETUSER", "replication"],
        &["ACL", "USERS"],
        &["SELECT", "0"],
    ];
    let wrong = refused(&operator, at, operator_commands).await;
    assert!(wrong.is_empty(), "the operator lacks: {wrong:#?}");
    let wrong = not_refused(
        &operator,
        at,
        &[
            &["GET", "k"],
            &["SET", "k", "v"],
            &["FLUSHALL"],
            &["CLUSTER", "RESET"],
            &["SHUTDOWN", "NOSAVE"],
            &["DEBUG", "SLEEP", "0"],
        ],
    )
    .await;
    assert!(
        wrong.is_empty(),
        "the operator may do more than it needs: {wrong:#?}"
    );

    // Health checks and the exporter: PING, INFO, CONFIG GET and the read-only introspection the
    // exporter runs; no data, no topology, nothing that resets or changes what it reads.
    let health = client(Some("healthcheck"), Some("hc-secret"));
    let wrong = refused(&health, at, EXPORTER_READS).await;
    assert!(wrong.is_empty(), "the healthcheck user lacks: {wrong:#?}");
    let wrong = not_refused(
        &health,
        at,
        &[
            &["GET", "k"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["CLUSTER", "NODES"],
            &["CLUSTER", "RESET"],
            &["SLOWLOG", "RESET"],
            &["LATENCY", "RESET"],
            &["CLIENT", "LIST"],
            &["CLIENT", "SETNAME", "x"],
            &["CLIENT", "KILL", "ID", "1"],
            &["ACL", "LIST"],
            &["FLUSHALL"],
        ],
    )
    .await;
    assert!(
        wrong.is_empty(),
        "the healthcheck user may do more than it needs: {wrong:#?}"
    );

    // Replication starts fenced.
    let replication = client(Some("replication"), Some("rep-secret"));
    let login = run(&replication, at, &["PING"]).await;
    assert!(login.is_err(), "the replication user starts off: {login:?}");
}

#[tokio::test]
async fn client_users_get_data_commands_and_never_administration_on_9() {
    rights_on(servers::valkey_9(), 200).await;
}

#[tokio::test]
async fn client_users_get_data_commands_and_never_administration_on_8() {
    rights_on(servers::valkey_8(), 201).await;
}

/// A user added, a password rotated, a user removed: each reaches the running server at once,
/// and through a rotation both passwords work until the old one retires.
async fn live_changes_on(binary: Binary, subnet: u8) {
    let before = users(&["p1"], &[]);
    let mut one = start(
        &format!("live{subnet}"),
        &binary,
        subnet,
        &before.acl_file(),
    );
    let operator = client(Some("operator"), Some("op-secret"));
    wait_up(&mut one, &operator).await;
    let at = one.address;
    let targets = [Target {
        member: "m".into(),
        address: at,
    }];
    let state = AccessState::default();
    let no_bootstrap: [RedisClient; 0] = [];
    let replication_password = "rep-secret".to_owned().into();
    let bootstrap = Bootstrap {
        clients: &no_bootstrap,
        replication_password: &replication_password,
    };
    let timeout = Duration::from_secs(2);
    let sync = |set: UserSet| {
        let (state, operator, bootstrap, targets) = (&state, &operator, &bootstrap, &targets);
        async move {
            state
                .sync(operator, bootstrap, targets, &set, timeout)
                .await
        }
    };

    // A fresh server from the same file is already in step; a 9.x one gains its extra rights.
    let report = sync(before.clone()).await;
    assert!(report.everywhere(), "{report:?}");
    if binary.path.display().to_string().contains("valkey-9") {
        assert!(
            refused(&operator, at, &[&["CLUSTER", "GETSLOTMIGRATIONS"]])
                .await
                .is_empty()
        );
    }

    // A named user, added live.
    let with_app = users(&["p1"], &[("app", APP_PASSWORD, "~* &* +@read +@write")]);
    let report = sync(with_app.clone()).await;
    assert_eq!(report.in_step, ["m"], "{report:?}");
    let app = client(Some("app"), Some(APP_PASSWORD));
    let whoami = run(&app, at, &["ACL", "WHOAMI"]).await;
    assert!(
        format!("{whoami:?}").contains("app"),
        "the added user logs in: {whoami:?}"
    );

    // Rotation: p2 added beside p1; both log in; then p1 retires and only p2 does.
    let stored = vec![password_hash("p1")];
    let now = Instant::now();
    let both = rotation::accepted(&stored, &password_hash("p2"), None, now, Duration::ZERO);
    let during = UserSet::new(
        Login::Hashes(both.clone()),
        &operator_passwords(),
        with_app.users()[4..].to_vec(),
    );
    assert!(sync(during.clone()).await.everywhere());
    for password in ["p1", "p2"] {
        let c = client(None, Some(password));
        assert!(
            run(&c, at, &["PING"]).await.is_ok(),
            "{password} during the rotation"
        );
    }
    let since = state.everywhere_since(&during);
    assert!(since.is_some(), "every server holds both");
    let after = rotation::accepted(
        &both,
        &password_hash("p2"),
        since,
        Instant::now(),
        Duration::ZERO,
    );
    assert_eq!(after, vec![password_hash("p2")]);
    let retired = UserSet::new(
        Login::Hashes(after),
        &operator_passwords(),
        with_app.users()[4..].to_vec(),
    );
    assert!(sync(retired).await.everywhere());
    assert!(run(&client(None, Some("p1")), at, &["PING"]).await.is_err());
    assert!(run(&client(None, Some("p2")), at, &["PING"]).await.is_ok());

    // The named user removed: it can no longer log in; and no restart happened throughout.
    let run_id_before = info_field(&operator, at, "run_id").await;
    assert!(sync(users(&["p2"], &[])).await.everywhere());
    assert!(
        run(&client(Some("app"), Some(APP_PASSWORD)), at, &["PING"])
            .await
            .is_err()
    );
    assert_eq!(info_field(&operator, at, "run_id").await, run_id_before);
}

async fn info_field(c: &RedisClient, at: SocketAddr, key: &str) -> String {
    let reply = run(c, at, &["INFO", "server"]).await.unwrap_or(Value::Nil);
    let text = match reply {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => format!("{other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn users_and_passwords_change_on_a_running_9_server() {
    live_changes_on(servers::valkey_9(), 202).await;
}

#[tokio::test]
async fn users_and_passwords_change_on_a_running_8_server() {
    live_changes_on(servers::valkey_8(), 203).await;
}

/// A server started before the operator kept its own users (authentication off: only an open
/// default user) is brought in step through the default user, and configured to replicate as
/// the replication user; one whose default user may not manage users is reported, not guessed.
#[tokio::test]
async fn a_server_without_the_operators_users_is_brought_in_through_the_default_user() {
    let mut one = start(
        "bootstrap",
        &servers::valkey_9(),
        204,
        "user default on nopass ~* &* +@all\n",
    );
    let open = client(None, None);
    wait_up(&mut one, &open).await;
    let at = one.address;
    let operator = client(Some("operator"), Some("op-secret"));
    let targets = [Target {
        member: "m".into(),
        address: at,
    }];
    let state = AccessState::default();
    let replication_password = "rep-secret".to_owned().into();
    let set = UserSet::new(Login::NoPassword, &operator_passwords(), []);
    let report = state
        .sync(
            &operator,
            &Bootstrap {
                clients: std::slice::from_ref(&open),
                replication_password: &replication_password,
            },
            &targets,
            &set,
            Duration::from_secs(2),
        )
        .await;
    assert_eq!(report.bootstrapped, ["m"], "{report:?}");
    assert!(run(&operator, at, &["CLUSTER", "NODES"]).await.is_ok());
    let masteruser = run(&operator, at, &["CONFIG", "GET", "masteruser"]).await;
    assert!(
        format!("{masteruser:?}").contains("replication"),
        "{masteruser:?}"
    );
    // The default user is a client now: it cannot manage users any more.
    assert!(
        not_refused(&open, at, &[&["ACL", "SETUSER", "x"]])
            .await
            .is_empty(),
        "the open default user lost its administration"
    );

    // With the operator's password lost, the same server reports the operator locked out.
    let state = AccessState::default();
    let other = UserSet::new(
        Login::NoPassword,
        &OperatorPasswords {
            operator: "another".into(),
            healthcheck: "hc".into(),
            replication: "rep".into(),
            backup: "bk".into(),
            sentinel: "sn".into(),
        },
        [],
    );
    let stranger = client(Some("operator"), Some("another"));
    let report = state
        .sync(
            &stranger,
            &Bootstrap {
                clients: std::slice::from_ref(&open),
                replication_password: &replication_password,
            },
            &targets,
            &other,
            Duration::from_secs(2),
        )
        .await;
    assert!(
        report
            .refused
            .iter()
            .any(|(m, why)| m == "m" && why.contains("locked out")),
        "{report:?}"
    );
}

/// The Redis exporter: `REDIS_EXPORTER`, or the image localkube's image table holds; copied for
/// the test `tag` alone (a binary being written cannot be started by another test).
fn exporter_binary(tag: u8) -> PathBuf {
    let path = std::env::var_os("REDIS_EXPORTER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.localkube/images/redis_exporter/bin/redis_exporter")
        });
    assert!(
        path.is_file(),
        "{} not found: run `make localkube-tools` (its image table holds the exporter), or set \
         REDIS_EXPORTER to a redis_exporter binary",
        path.display()
    );
    // A copy outside `.localkube/`, whose processes `localkube stop` sweeps.
    let dir = std::env::temp_dir()
        .join("valkey-engine-tests")
        .join(format!("exporter-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let copy = dir.join("redis_exporter");
    std::fs::copy(&path, &copy).unwrap_or_else(|e| panic!("copying {}: {e}", path.display()));
    copy
}

/// A child process killed when dropped, its stderr in a file.
struct Exporter {
    child: std::process::Child,
    log: PathBuf,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over plain HTTP/1.0: the body, or what went wrong.
async fn http_get(at: SocketAddr, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(at)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {at}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
        .await
        .map_err(|_| "no reply within 10 s".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(reply
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or(reply))
}

/// The commands the server's ACL log holds refusals of (`ACL LOG`: what was refused, to whom).
async fn refused_commands(admin: &RedisClient, at: SocketAddr) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    match run(admin, at, &["ACL", "LOG"]).await {
        Ok(Value::Array(entries)) => entries
            .iter()
            .map(|entry| match entry {
                Value::Array(fields) => fields
                    .chunks(2)
                    .filter(|kv| {
                        kv.len() == 2 && matches!(text(&kv[0]).as_str(), "object" | "username")
                    })
                    .map(|kv| text(&kv[1]))
                    .collect::<Vec<_>>()
                    .join(" by "),
                other => format!("{other:?}"),
            })
            .collect(),
        other => vec![format!("ACL LOG answered {other:?}")],
    }
}

/// The exporter, set up as the node-controller sets it up (its login in the address, never in
/// its password setting; no client name), reads everything it asks for as the healthcheck user:
/// the server refuses it nothing (its ACL log stays empty), and the metrics the dashboards graph
/// are there. And its `/scrape` endpoint, asked to read another address, sends that address no
/// password.
async fn the_exporter_on(binary: Binary, subnet: u8) {
    let file = users(&[CLIENT_PASSWORD], &[]).acl_file() + TEST_ADMIN;
    let mut one = start(&format!("exporter{subnet}"), &binary, subnet, &file);
    let health = client(Some("healthcheck"), Some("hc-secret"));
    wait_up(&mut one, &health).await;
    let at = one.address;
    let admin = client(Some("testadmin"), Some("testadmin"));
    run(&admin, at, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run(&admin, at, &["ACL", "LOG", "RESET"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let ip = at.ip();
    let metrics_at = SocketAddr::new(ip, 9121);
    let log = one._dir.join("exporter.log");
    let stderr = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
    let mut command = std::process::Command::new(exporter_binary(subnet));
    command
        .args([
            format!("--web.listen-address={metrics_at}"),
            "--set-client-name=false".to_owned(),
        ])
        .env("REDIS_ADDR", format!("redis://healthcheck:hc-secret@{at}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    let child =
        servers::spawn(&mut command).unwrap_or_else(|e| panic!("starting the exporter: {e}"));
    let exporter = Exporter { child, log };

    // Twice: some of what the exporter reads, it reads from the second scrape on.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut scrapes = Vec::new();
    while scrapes.len() < 2 {
        match http_get(metrics_at, "/metrics").await {
            Ok(body) if body.lines().any(|l| l == "redis_up 1") => scrapes.push(body),
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no redis_up 1 from the exporter: {other:?}\n{}",
                    std::fs::read_to_string(&exporter.log).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let refused = refused_commands(&admin, at).await;
    assert!(
        refused.is_empty(),
        "the server refused the exporter: {refused:?}"
    );
    let log_text = std::fs::read_to_string(&exporter.log).unwrap_or_default();
    assert!(
        !log_text.contains("level=error"),
        "the exporter logged errors:\n{log_text}"
    );
    let metrics = &scrapes[1];
    for name in [
        "redis_exporter_last_scrape_error{err=\"\"} 0",
        "redis_cluster_slots_assigned 16384",
        "redis_connected_slaves 0",
        "redis_slowlog_length",
        "redis_memory_used_bytes",
        "redis_commands_processed_total",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name} is not served:\n{metrics}"
        );
    }

    // `/scrape?target=` another address: the exporter connects there, but sends no password.
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let trap = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let heard = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut heard = Vec::new();
        if let Ok(Ok((mut stream, _))) =
            tokio::time::timeout(Duration::from_secs(10), listener.accept()).await
        {
            let mut buf = [0u8; 4096];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await
            {
                heard.extend_from_slice(&buf[..n]);
            }
        }
        String::from_utf8_lossy(&heard).into_owned()
    });
    let _ = http_get(metrics_at, &format!("/scrape?target=redis://{trap}")).await;
    let heard = heard.await.unwrap_or_default();
    assert!(
        !heard.contains("hc-secret") && !heard.to_uppercase().contains("AUTH"),
        "the exporter sent another address a login: {heard:?}"
    );
    drop(exporter);
}

#[tokio::test]
async fn the_exporter_is_refused_nothing_and_leaks_no_password_on_9() {
    the_exporter_on(servers::valkey_9(), 205).await;
}

#[tokio::test]
async fn the_exporter_is_refused_nothing_and_leaks_no_password_on_8() {
    the_exporter_on(servers::valkey_8(), 206).await;
}

/// A Valkey 9 server that restarted since the operator last gave it its users holds only what
/// its ACL file gives, and the file cannot name 9-only commands (an 8.0 server would not load
/// it). The engine's look at such a server must still read it: when a Secret is missing the
/// access stage that gives those rights does not run, and the data-safety rules only see the
/// servers the look reads (a primary back without its data was taken for unreachable, and its
/// replica, holding the shard's only copy, never took over).
#[tokio::test]
async fn the_engine_reads_a_9_server_that_has_only_its_acl_files_rights() {
    use cluster_controller::engine::{Member, Reach, observe_fenced};
    let set = users(&[CLIENT_PASSWORD], &[]);
    let mut one = start("file-rights", &servers::valkey_9(), 209, &set.acl_file());
    let operator = client(Some("operator"), Some("op-secret"));
    wait_up(&mut one, &operator).await;
    let mut member = Member::new(0, 0, "c-0-0".to_owned());
    member.address = Some(one.address);
    let observation = observe_fenced(
        &operator,
        &[member],
        Duration::from_secs(2),
        Some("replication"),
    )
    .await;
    match observation.get("c-0-0") {
        Some(Reach::Up(state)) => assert_eq!(state.replication_admitted(), Some(false)),
        other => panic!("the engine could not read the server: {other:?}"),
    }
}
