//! Least privilege inside Valkey and around it: what the clients' users may do, users and
//! passwords changed on running servers without a restart, the operator's own Secrets, and the
//! faults of authentication (turned off and on, its Secret lost) with a writer running.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::cluster::{ClusterFixture, Writer, connect, wait_writes};
use e2e::operator::{ControllerProcess, install_crds, wait_cluster};
use e2e::{E2eError, Poll, Result, TestNamespace, check, wait_until};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use valkey_api::v1alpha1::ValkeyNode;

const READY: Duration = Duration::from_secs(300);
/// How long a change of users may take to reach every server.
const LIVE: Duration = Duration::from_secs(60);

/// Administration a client must never run: each is refused with NOPERM (DEBUG may be refused
/// first by the server's own `enable-debug-command` guard).
const ADMINISTRATION: &[&[&str]] = &[
    &["CONFIG", "GET", "masterauth"],
    &["CONFIG", "SET", "maxmemory", "1"],
    &["ACL", "SETUSER", "replication", "on"],
    &["ACL", "SETUSER", "operator", "nopass"],
    &["ACL", "LIST"],
    &["CLUSTER", "MEET", "10.213.0.1", "7000"],
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
    &["CLUSTER", "SETSLOT", "1", "STABLE"],
    &["DEBUG", "SLEEP", "0"],
    &["MODULE", "LIST"],
    &["SHUTDOWN", "NOSAVE"],
    &["MIGRATE", "10.213.0.1", "7000", "k", "0", "1000"],
    &["RESTORE", "k", "0", "x"],
    &["REPLICAOF", "NO", "ONE"],
    &["FAILOVER"],
];

/// A connection to one server as `user` (the default user when `None`) with `password`.
async fn login(
    ip: &str,
    user: Option<&str>,
    password: Option<&str>,
) -> std::result::Result<redis::aio::MultiplexedConnection, String> {
    let credentials = match (user, password) {
        (Some(u), Some(p)) => format!("{u}:{p}@"),
        (None, Some(p)) => format!(":{p}@"),
        _ => String::new(),
    };
    let client = redis::Client::open(format!("redis://{credentials}{ip}:6379/"))
        .map_err(|e| e.to_string())?;
    let connect = client.get_multiplexed_async_connection();
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("{ip}: no connection within 5 s")),
    }
}

/// Runs one command as `user`; its reply, or the error's text.
async fn run_as(
    ip: &str,
    user: Option<&str>,
    password: Option<&str>,
    args: &[&str],
) -> std::result::Result<String, String> {
    let mut conn = login(ip, user, password).await?;
    e2e::valkey_cmd(&mut conn, args)
        .await
        .map_err(|e| e.to_string())
}

/// Every member's pod IP.
async fn member_ips(c: &ClusterFixture) -> Result<Vec<String>> {
    let ips: Vec<String> = c
        .nodes()
        .await?
        .iter()
        .filter_map(|n| n.status.as_ref()?.pod_ip.clone())
        .collect();
    check(!ips.is_empty(), "no member has a pod IP")?;
    Ok(ips)
}

/// Every pod of the cluster: uid and restart count, by name; equal before and after a change
/// means no pod was replaced and no container restarted.
async fn pods(c: &ClusterFixture) -> Result<BTreeMap<String, (String, i32)>> {
    let list =
        c.ns.api::<Pod>()
            .list(&ListParams::default().labels(&format!("valkey.io/cluster={}", c.name)))
            .await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            (p.name_any(), (p.uid().unwrap_or_default(), restarts))
        })
        .collect())
}

/// Fails when a pod of the cluster was replaced or restarted since `before` was taken.
async fn no_pod_replaced_since(
    c: &ClusterFixture,
    before: &BTreeMap<String, (String, i32)>,
) -> Result<()> {
    let after = pods(c).await?;
    check(
        *before == after,
        format!("pods were replaced or restarted: before {before:?}, after {after:?}"),
    )
}

/// Waits until `accepted(ip)` holds on every member; returns how long it took.
async fn wait_every_member(
    c: &ClusterFixture,
    what: &str,
    accepted: impl Fn(String) -> futures::future::BoxFuture<'static, bool> + Clone,
) -> Result<Duration> {
    let start = Instant::now();
    let ips = member_ips(c).await?;
    wait_until(LIVE, what, || {
        let (ips, accepted) = (ips.clone(), accepted.clone());
        async move {
            let mut missing = Vec::new();
            for ip in ips {
                if !accepted(ip.clone()).await {
                    missing.push(ip);
                }
            }
            Ok(if missing.is_empty() {
                Poll::Ready(())
            } else {
                Poll::NotYet(format!("not yet on {missing:?}"))
            })
        }
    })
    .await?;
    Ok(start.elapsed())
}

fn can_log_in(
    user: Option<&'static str>,
    password: Option<String>,
) -> impl Fn(String) -> futures::future::BoxFuture<'static, bool> + Clone {
    move |ip: String| {
        let password = password.clone();
        Box::pin(async move {
            run_as(&ip, user, password.as_deref(), &["PING"])
                .await
                .is_ok()
        })
    }
}

fn cannot_log_in(
    user: Option<&'static str>,
    password: Option<String>,
) -> impl Fn(String) -> futures::future::BoxFuture<'static, bool> + Clone {
    let can = can_log_in(user, password);
    move |ip: String| {
        let can = can.clone();
        Box::pin(async move { !can(ip).await })
    }
}

async fn put_secret(ns: &TestNamespace, name: &str, password: &str) -> Result<()> {
    ns.put_password(name, password).await
}

/// The refusals of `commands` as `user`: every one must be NOPERM; returns those that were not.
async fn not_refused(
    ip: &str,
    user: Option<&str>,
    password: Option<&str>,
    commands: &[&[&str]],
) -> Vec<String> {
    let mut wrong = Vec::new();
    for args in commands {
        match run_as(ip, user, password, args).await {
            Err(e) if e.to_lowercase().contains("noperm") => {}
            Err(e) if args[0] == "DEBUG" && e.contains("not allowed") => {}
            other => wrong.push(format!("{}: {other:?}", args.join(" "))),
        }
    }
    wrong
}

/// The clients' user has data commands and no administration; a user added to `spec.auth.users`
/// logs in on every server within seconds, with the rights its rules give and no administration,
/// and goes when removed; no pod is replaced or restarted throughout.
#[tokio::test(flavor = "multi_thread")]
async fn clients_get_data_commands_only_and_users_change_without_a_restart() -> Result<()> {
    let c = ClusterFixture::start("sec-users", "users", "{shards: 2, replicas: 0}").await?;
    c.wait_ready(READY).await?;
    let password = c.password().await?;
    let ips = member_ips(&c).await?;

    // Data commands work through a cluster client; administration is refused everywhere.
    let keys = c.write_keys("data", 100).await?;
    c.verify(&keys).await?;
    for ip in &ips {
        let wrong = not_refused(ip, None, password.as_deref(), ADMINISTRATION).await;
        check(
            wrong.is_empty(),
            format!("the clients' user may administer {ip}: {wrong:#?}"),
        )?;
    }
    let before = pods(&c).await?;

    // A named user, added live.
    put_secret(&c.ns, "app-pw", "app-secret").await?;
    c.patch_spec(serde_json::json!({"auth": {"users": [
        {"name": "app", "passwordSecret": {"name": "app-pw"}, "rules": "~app:* &* +@all"}
    ]}}))
    .await?;
    let took = wait_every_member(
        &c,
        "the user app logging in on every member",
        can_log_in(Some("app"), Some("app-secret".into())),
    )
    .await?;
    eprintln!("users: a user added to spec.auth.users logs in on every member after {took:.1?}");
    let mut app = redis::cluster::ClusterClientBuilder::new(
        ips.iter()
            .map(|ip| format!("redis://{ip}:6379/"))
            .collect::<Vec<_>>(),
    )
    .username("app")
    .password("app-secret")
    .build()
    .map_err(|e| E2eError::Check(e.to_string()))?
    .get_async_connection()
    .await
    .map_err(|e| E2eError::Check(e.to_string()))?;
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("app:{i}"))
            .arg(i)
            .query_async(&mut app)
            .await
            .map_err(|e| E2eError::Check(format!("app writing its own keys: {e}")))?;
    }
    let other: redis::RedisResult<Option<String>> =
        redis::cmd("GET").arg("data:1").query_async(&mut app).await;
    check(
        other
            .as_ref()
            .is_err_and(|e| e.to_string().to_lowercase().contains("noperm")),
        format!("app reads only its own keys: {other:?}"),
    )?;
    for ip in &ips {
        let wrong = not_refused(ip, Some("app"), Some("app-secret"), ADMINISTRATION).await;
        check(
            wrong.is_empty(),
            format!("app may administer {ip}: {wrong:#?}"),
        )?;
    }

    // Removed: it can no longer log in anywhere.
    c.patch_spec(serde_json::json!({"auth": {"users": null}}))
        .await?;
    wait_every_member(
        &c,
        "the user app refused on every member",
        cannot_log_in(Some("app"), Some("app-secret".into())),
    )
    .await?;
    no_pod_replaced_since(&c, &before).await?;
    c.wait_ready(READY).await?;
    Ok(())
}

/// The clients' password changes with a writer running: the new password is accepted everywhere
/// before the old one goes (never a server with only the old one while another has only the
/// new one), no acknowledged write is lost, and no pod is replaced or restarted.
#[tokio::test(flavor = "multi_thread")]
async fn password_rotation_with_a_writer_loses_nothing_and_restarts_nothing() -> Result<()> {
    let c = ClusterFixture::start_with(
        "sec-rotate",
        "rotate",
        "{shards: 2, replicas: 1, auth: {passwordSecret: {name: rotate-pw}}}",
        &["--password-rotation-grace-seconds", "10"],
    )
    .await?;
    put_secret(&c.ns, "rotate-pw", "first-password").await?;
    c.wait_ready(READY).await?;
    let before = pods(&c).await?;
    let ips = member_ips(&c).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 200, Duration::from_secs(60)).await?;

    put_secret(&c.ns, "rotate-pw", "second-password").await?;
    // Watch every member's answer to both passwords until the old one is gone everywhere.
    let start = Instant::now();
    let mut both_seen = false;
    let mut split: Option<String> = None;
    loop {
        let mut states = Vec::new();
        for ip in &ips {
            let old = run_as(ip, None, Some("first-password"), &["PING"])
                .await
                .is_ok();
            let new = run_as(ip, None, Some("second-password"), &["PING"])
                .await
                .is_ok();
            states.push((ip.clone(), old, new));
        }
        let old_only = states.iter().any(|(_, o, n)| *o && !*n);
        let new_only = states.iter().any(|(_, o, n)| !*o && *n);
        if old_only && new_only {
            split = Some(format!("{states:?}"));
        }
        both_seen |= states.iter().all(|(_, o, n)| *o && *n);
        if states.iter().all(|(_, o, n)| !*o && *n) {
            break;
        }
        check(
            start.elapsed() < Duration::from_secs(180),
            format!("the old password never retired: {states:?}"),
        )?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "rotate: the old password retired everywhere {:.1?} after the change",
        start.elapsed()
    );
    check(
        split.is_none(),
        format!(
            "a moment where some servers accepted only the old password and others only the new: {split:?}"
        ),
    )?;
    check(
        both_seen,
        "every server accepted both passwords for a while",
    )?;

    // The running writer kept going; a new one logs in with the new password.
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    let fresh = Writer::start_named(
        connect(
            ips.iter().map(|ip| format!("redis://{ip}:6379/")).collect(),
            Some("second-password".into()),
        )
        .await?,
        "fresh",
    );
    wait_writes(&fresh, 100, Duration::from_secs(60)).await?;
    let (mut all, failed) = writer.stop().await;
    let (fresh_acked, fresh_failed) = fresh.stop().await;
    eprintln!(
        "rotate: {} + {} writes acknowledged, {} + {fresh_failed} refused",
        all.len(),
        fresh_acked.len(),
        failed
    );
    all.extend(fresh_acked);
    c.verify(&all).await?;
    no_pod_replaced_since(&c, &before).await?;
    c.wait_ready(READY).await?;
    Ok(())
}

/// The generated clients' password Secret deleted by accident, with a writer running: it comes
/// back with the same password (the operator keeps a copy), and every server keeps accepting that
/// password long past the rotation grace, so no client that holds it is locked out. (It used to
/// come back with a new password, and the old one was removed from every server within the
/// grace.)
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_password_secret_comes_back_with_the_same_password() -> Result<()> {
    let grace = Duration::from_secs(10);
    let c = ClusterFixture::start_with(
        "sec-deleted-pw",
        "deleted",
        "{shards: 2, replicas: 1}",
        &["--password-rotation-grace-seconds", "10"],
    )
    .await?;
    c.wait_ready(READY).await?;
    let password = c
        .password()
        .await?
        .ok_or_else(|| E2eError::Check("authentication is on by default".into()))?;
    let ips = member_ips(&c).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 200, Duration::from_secs(60)).await?;

    let secrets = c.ns.api::<Secret>();
    secrets
        .delete("deleted-password", &DeleteParams::default())
        .await?;
    let back = wait_until(
        Duration::from_secs(60),
        "Secret deleted-password created again",
        || async {
            Ok(match secrets.get_opt("deleted-password").await? {
                Some(secret) => Poll::Ready(
                    secret
                        .data
                        .and_then(|d| d.get("password").cloned())
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned()),
                ),
                None => Poll::NotYet("not yet".into()),
            })
        },
    )
    .await?;
    check(
        back.as_deref() == Some(password.as_str()),
        "the Secret came back with the same password",
    )?;
    // Every server accepts the password on a new connection, for longer than the grace after
    // which a replaced password would have been retired.
    let watched = Instant::now();
    while watched.elapsed() < grace * 3 {
        for ip in &ips {
            run_as(ip, None, Some(&password), &["PING"])
                .await
                .map_err(|e| {
                    E2eError::Check(format!(
                        "{ip} refused the clients' password {:.1?} after the Secret came back: {e}",
                        watched.elapsed()
                    ))
                })?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    let (all, failed) = writer.stop().await;
    eprintln!(
        "deleted password Secret: {} writes acknowledged, {failed} refused",
        all.len()
    );
    c.verify(&all).await?;
    c.wait_ready(READY).await?;
    Ok(())
}

/// A Secret named like the cluster's ACL Secret that the operator did not create is left as it
/// is and reported (status and a Warning Event naming it), and no member is created with it; a
/// `<cluster>-password` the operator did not generate is not adopted either.
#[tokio::test(flavor = "multi_thread")]
async fn a_pre_existing_acl_secret_is_left_untouched_and_reported() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("sec-foreign").await?;
    let _controller = ControllerProcess::start("cluster-controller", &ns, &[]).await?;
    let theirs = |name: &str| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("team".to_owned(), "payments".to_owned())].into()),
            ..Default::default()
        },
        data: Some(
            [(
                "users.acl".to_owned(),
                ByteString(b"user default on nopass ~* +@all\n".to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let secrets = ns.api::<Secret>();
    let original = secrets
        .create(&PostParams::default(), &theirs("taken-acl"))
        .await?;
    secrets
        .create(&PostParams::default(), &theirs("adopt-password"))
        .await?;
    for name in ["taken", "adopt"] {
        ns.apply(&format!(
            "apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {{name: {name}}}\nspec: {{shards: 1, replicas: 0}}\n"
        ))
        .await?;
    }
    for (cluster, secret) in [("taken", "taken-acl"), ("adopt", "adopt-password")] {
        let reported = wait_cluster(
            &ns,
            cluster,
            Duration::from_secs(60),
            "SecretNotOwned",
            |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.reason.as_deref() == Some("SecretNotOwned")
                        && s.message.as_deref().is_some_and(|m| m.contains(secret))
                })
            },
        )
        .await?;
        let conditions = reported
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        check(
            conditions.iter().any(|c| {
                c.type_ == "Degraded" && c.status == "True" && c.reason == "SecretNotOwned"
            }),
            format!("{cluster}: no Degraded condition naming the Secret: {conditions:?}"),
        )?;
        let events = ns.events().await?;
        check(
            events
                .lines()
                .any(|l| l.starts_with("Warning SecretNotOwned") && l.contains(secret)),
            format!("{cluster}: no Warning Event naming {secret}: {events}"),
        )?;
    }
    let now = secrets.get("taken-acl").await?;
    check(
        now.metadata.resource_version == original.metadata.resource_version
            && now.metadata.owner_references.is_none()
            && now.data == original.data,
        format!("the pre-existing Secret was touched: {:?}", now.metadata),
    )?;
    let nodes = ns.api::<ValkeyNode>().list(&ListParams::default()).await?;
    check(
        nodes.items.is_empty(),
        format!(
            "members were created without the operator's own Secret: {:?}",
            nodes.items.iter().map(|n| n.name_any()).collect::<Vec<_>>()
        ),
    )
}

/// `auth.enabled` turned off and on again with a writer running: the default user opens and
/// closes on every server without a restart, no acknowledged write is lost, the cluster is Ready.
#[tokio::test(flavor = "multi_thread")]
async fn authentication_off_and_on_with_a_writer_loses_nothing() -> Result<()> {
    let c = ClusterFixture::start("sec-toggle", "toggle", "{shards: 2, replicas: 1}").await?;
    c.wait_ready(READY).await?;
    let before = pods(&c).await?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 200, Duration::from_secs(60)).await?;

    c.patch_spec(serde_json::json!({"auth": {"enabled": false}}))
        .await?;
    let took = wait_every_member(&c, "the default user open", can_log_in(None, None)).await?;
    eprintln!("toggle: open on every member after {took:.1?}");
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    c.wait_ready(READY).await?;

    c.patch_spec(serde_json::json!({"auth": {"enabled": true}}))
        .await?;
    let took = wait_every_member(&c, "the default user closed", cannot_log_in(None, None)).await?;
    eprintln!("toggle: closed on every member after {took:.1?}");
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    c.wait_ready(READY).await?;

    let (acked, failed) = writer.stop().await;
    eprintln!(
        "toggle: {} writes acknowledged, {failed} refused",
        acked.len()
    );
    c.verify(&acked).await?;
    no_pod_replaced_since(&c, &before).await
}

/// The ACL Secret deleted, with a writer running and the cluster-controller restarted before it
/// could notice: the operator rebuilds it with the same passwords (from its own second copy), is
/// never locked out, no acknowledged write is lost, and the cluster is Ready again.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_acl_secret_locks_nobody_out_even_across_a_controller_restart() -> Result<()> {
    let mut c = ClusterFixture::start("sec-aclgone", "aclgone", "{shards: 2, replicas: 1}").await?;
    c.wait_ready(READY).await?;
    let before = pods(&c).await?;
    let secrets = c.ns.api::<Secret>();
    let acl_name = format!("{}-acl", c.name);
    let operator_password = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("operator-password"))
            .map(|v| v.0.clone())
    };
    let original = operator_password(&secrets.get(&acl_name).await?);
    check(
        original.is_some(),
        "the ACL Secret holds the operator's password",
    )?;
    let writer = c.start_writer().await?;
    wait_writes(&writer, 200, Duration::from_secs(60)).await?;

    c.cluster_controller.kill().await?;
    secrets.delete(&acl_name, &DeleteParams::default()).await?;
    c.cluster_controller = ControllerProcess::start("cluster-controller", &c.ns, &[]).await?;
    let rebuilt = wait_until(Duration::from_secs(60), "the ACL Secret rebuilt", || {
        let (secrets, acl_name) = (secrets.clone(), acl_name.clone());
        async move {
            Ok(match secrets.get_opt(&acl_name).await? {
                Some(s) => Poll::Ready(s),
                None => Poll::NotYet("absent".into()),
            })
        }
    })
    .await?;
    check(
        operator_password(&rebuilt) == original,
        "the rebuilt ACL Secret holds the same operator password",
    )?;
    let acked = writer.acked_count().await;
    wait_writes(&writer, acked + 100, Duration::from_secs(60)).await?;
    c.wait_ready(READY).await?;
    let (acked, failed) = writer.stop().await;
    eprintln!(
        "aclgone: {} writes acknowledged, {failed} refused",
        acked.len()
    );
    c.verify(&acked).await?;
    // The restarted controller logs every server that refuses it; none did.
    let log = c.cluster_controller.log_text()?;
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refuses the operator's users"))
        .collect();
    check(
        refusals.is_empty(),
        format!("the operator was locked out for a while: {refusals:?}"),
    )?;
    no_pod_replaced_since(&c, &before).await?;
    Ok(())
}

/// Two cluster-controllers whose watch scopes overlap (two releases of one namespace) never both
/// drive a cluster: one holds the cluster's Lease, the other leaves the cluster alone and says who
/// holds it (a log line and a Warning Event); when the holder dies, the other takes over.
#[tokio::test(flavor = "multi_thread")]
async fn two_cluster_controllers_never_drive_one_cluster() -> Result<()> {
    let mut c = ClusterFixture::start("sec-overlap", "overlap", "{shards: 1, replicas: 0}").await?;
    let mut second = ControllerProcess::start_with_env(
        "cluster-controller",
        &c.ns,
        &[],
        &[("POD_NAME", "second-release")],
    )
    .await?;
    c.wait_ready(READY).await?;
    let leases = c.ns.api::<k8s_openapi::api::coordination::v1::Lease>();
    let lease_name = format!("{}-cluster-controller", c.name);
    let holder = |l: &k8s_openapi::api::coordination::v1::Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let first_holder = holder(&leases.get(&lease_name).await?);
    let second_holds = first_holder.starts_with("second-release/");
    eprintln!("overlap: {lease_name} held by {first_holder}");
    // The one that does not hold it says so, and has driven nothing.
    let idle_log = |c: &ClusterFixture, second: &ControllerProcess| {
        if second_holds {
            c.cluster_controller.log_text()
        } else {
            second.log_text()
        }
    };
    wait_until(
        Duration::from_secs(60),
        "the other controller saying who holds the cluster",
        || {
            let log = idle_log(&c, &second);
            let said = format!("holds Lease {lease_name}");
            async move {
                let log = log?;
                Ok(if log.contains(&said) {
                    Poll::Ready(())
                } else {
                    Poll::NotYet("not yet".into())
                })
            }
        },
    )
    .await?;
    let log = idle_log(&c, &second)?;
    check(
        !log.contains("cluster_controller::engine::driver"),
        "the controller that does not hold the cluster took a step on it",
    )?;
    let events = c.ns.events().await?;
    check(
        events
            .lines()
            .any(|l| l.starts_with("Warning AnotherControllerActive") && l.contains(&first_holder)),
        format!("no Warning Event naming the holder: {events}"),
    )?;

    // The holder dies: the other takes the cluster over once the Lease has expired.
    if second_holds {
        second.kill().await?;
    } else {
        c.cluster_controller.kill().await?;
    }
    let took_over = wait_until(
        Duration::from_secs(150),
        "the other controller taking over",
        || {
            let (leases, lease_name, first_holder) =
                (leases.clone(), lease_name.clone(), first_holder.clone());
            async move {
                let now = holder(&leases.get(&lease_name).await?);
                Ok(if !now.is_empty() && now != first_holder {
                    Poll::Ready(now)
                } else {
                    Poll::NotYet(format!("held by {now}"))
                })
            }
        },
    )
    .await?;
    eprintln!("overlap: taken over by {took_over}");
    c.patch_spec(serde_json::json!({"replicas": 1})).await?;
    c.wait_ready(READY).await?;

    // The survivor keeps one heartbeat here while it runs, and deletes it when it stops.
    let beat = plumbing::leader::heartbeat_name("cluster", &took_over);
    check(
        leases.get_opt(&beat).await?.is_some(),
        format!("no heartbeat {beat} of the holder {took_over}"),
    )?;
    if second_holds {
        c.cluster_controller.terminate().await?;
    } else {
        second.terminate().await?;
    }
    check(
        leases.get_opt(&beat).await?.is_none(),
        format!("the heartbeat {beat} outlived its controller's graceful stop"),
    )
}

/// The cluster's NetworkPolicy, as the API server holds it: the bus only between members, the
/// client port from the clients the spec names and from the members; gone when turned off.
/// (localkube does not enforce NetworkPolicies: this checks what a CNI would enforce.)
#[tokio::test(flavor = "multi_thread")]
async fn the_network_policy_lets_in_only_members_named_clients_and_the_operator() -> Result<()> {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let c = ClusterFixture::start(
        "sec-netpol",
        "netpol",
        "{shards: 1, replicas: 0, networkPolicy: {clients: [{podLabels: {app: web}}, {cidr: 10.9.0.0/16}]}}",
    )
    .await?;
    let policies = c.ns.api::<NetworkPolicy>();
    let policy = wait_until(Duration::from_secs(60), "the NetworkPolicy", || {
        let policies = policies.clone();
        async move {
            Ok(match policies.get_opt("netpol-valkey").await? {
                Some(p) => Poll::Ready(p),
                None => Poll::NotYet("absent".into()),
            })
        }
    })
    .await?;
    let spec = policy.spec.clone().unwrap_or_default();
    let text = serde_json::to_string(&spec).unwrap_or_default();
    let members = serde_json::json!({"matchLabels": {"valkey.io/cluster": "netpol"}});
    check(
        serde_json::to_value(&spec.pod_selector).unwrap_or_default() == members
            && spec.policy_types == Some(vec!["Ingress".to_owned()]),
        format!("the policy selects the members, for ingress: {text}"),
    )?;
    let rules = spec.ingress.unwrap_or_default();
    let ports: Vec<String> = rules
        .iter()
        .map(|r| serde_json::to_string(&r.ports).unwrap_or_default())
        .collect();
    let bus = bus_port_of(&c).await?;
    check(
        rules.len() == 2 && ports[0].contains(&format!(":{bus}")) && ports[1].contains("6379"),
        format!("one rule for the bus (port {bus}), one for clients: {text}"),
    )?;
    let bus_from = serde_json::to_value(&rules[0].from).unwrap_or_default();
    check(
        bus_from == serde_json::json!([{"podSelector": members}]),
        format!("the bus only from members: {bus_from}"),
    )?;
    let clients = serde_json::to_string(&rules[1].from).unwrap_or_default();
    check(
        clients.contains("\"app\":\"web\"")
            && clients.contains("10.9.0.0/16")
            && clients.contains("\"valkey.io/cluster\":\"netpol\""),
        format!("the client port from the named clients and the members: {clients}"),
    )?;
    c.wait_ready(READY).await?;

    c.patch_spec(serde_json::json!({"networkPolicy": {"enabled": false}}))
        .await?;
    wait_until(Duration::from_secs(60), "the NetworkPolicy gone", || {
        let policies = policies.clone();
        async move {
            Ok(match policies.get_opt("netpol-valkey").await? {
                None => Poll::Ready(()),
                Some(_) => Poll::NotYet("still there".into()),
            })
        }
    })
    .await
}

/// A plain port beside TLS is not served yet: a cluster that asks for one says why it is refused
/// and gets no member, rather than running plain what was asked to be TLS.
#[tokio::test(flavor = "multi_thread")]
async fn a_tls_cluster_with_a_plain_port_is_refused_with_a_reason() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("sec-notls").await?;
    let _controller = ControllerProcess::start("cluster-controller", &ns, &[]).await?;
    ns.apply(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {name: notls}\nspec: {shards: 1, replicas: 0, tls: {enabled: true, plaintext: true}}\n",
    )
    .await?;
    let refused = wait_cluster(
        &ns,
        "notls",
        Duration::from_secs(60),
        "TLSNotSupported",
        |c| c.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("TLSNotSupported"),
    )
    .await?;
    let message = refused.status.and_then(|s| s.message).unwrap_or_default();
    check(
        message.contains("spec.tls.plaintext"),
        format!("the reason names the field: {message}"),
    )?;
    let nodes = ns.api::<ValkeyNode>().list(&ListParams::default()).await?;
    check(
        nodes.items.is_empty(),
        "no member of a TLS cluster runs plain",
    )
}

/// The bus port the operator recorded for the cluster, once it has.
async fn bus_port_of(c: &ClusterFixture) -> Result<String> {
    wait_until(Duration::from_secs(60), "the bus port recorded", || async {
        let cluster = c.api().get(&c.name).await?;
        Ok(
            match cluster.annotations().get("valkey.io/cluster-bus-port") {
                Some(port) => Poll::Ready(port.clone()),
                None => Poll::NotYet("no valkey.io/cluster-bus-port annotation".into()),
            },
        )
    })
    .await
}

/// Every node id a server knows, itself included, from CLUSTER NODES; and the addresses of those
/// still in a handshake.
async fn known_nodes(c: &ClusterFixture, ip: &str) -> Result<(Vec<String>, Vec<String>)> {
    let text = c.admin_command_on(ip, &["CLUSTER", "NODES"]).await?;
    let mut ids = Vec::new();
    let mut handshakes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        match (fields.first(), fields.get(1), fields.get(2)) {
            (Some(_), Some(address), Some(flags)) if flags.contains("handshake") => {
                handshakes.push((*address).to_owned());
            }
            (Some(id), _, _) => ids.push((*id).to_owned()),
            _ => {}
        }
    }
    Ok((ids, handshakes))
}

/// Two clusters in one pod network never become one. A pod address moves between clusters, and
/// Valkey keeps knocking on a peer's last address, even with a MEET; the bus has no password, so
/// on a shared bus port that knock joins the two clusters (and the higher config epoch takes the
/// other's slots). Here a server of one cluster is told to MEET a server of the other at that
/// address, on its own cluster's bus port, as Valkey would: each cluster's bus has a port of its
/// own, so the knock reaches a closed port and both clusters keep only their own nodes.
#[tokio::test(flavor = "multi_thread")]
async fn a_meet_from_another_cluster_at_a_reused_address_joins_nothing() -> Result<()> {
    let (a, b) = tokio::try_join!(
        ClusterFixture::start("sec-bus-a", "alpha", "{shards: 1, replicas: 0}"),
        ClusterFixture::start("sec-bus-b", "beta", "{shards: 1, replicas: 0}"),
    )?;
    tokio::try_join!(a.wait_ready(READY), b.wait_ready(READY))?;
    let (a_ip, b_ip) = (a.ready_member_ip().await?, b.ready_member_ip().await?);
    let (a_before, _) = known_nodes(&a, &a_ip).await?;
    let (b_before, _) = known_nodes(&b, &b_ip).await?;
    check(
        a_before.len() == 1 && b_before.len() == 1,
        format!("one node each before: {a_before:?} / {b_before:?}"),
    )?;
    let b_bus = bus_port_of(&b).await?;

    b.admin_command_on(&b_ip, &["CLUSTER", "MEET", &a_ip, "6379", &b_bus])
        .await?;
    // The handshake ends either way: joined, or given up after the node timeout.
    let a_peer = format!("{a_ip}:6379@{b_bus}");
    wait_until(
        Duration::from_secs(60),
        "beta's handshake with alpha's address over",
        || {
            let (b, b_ip, a_peer) = (&b, &b_ip, &a_peer);
            async move {
                let (_, handshakes) = known_nodes(b, b_ip).await?;
                Ok(
                    if handshakes.iter().any(|h| h.starts_with(a_peer.as_str())) {
                        Poll::NotYet(format!("in a handshake with {handshakes:?}"))
                    } else {
                        Poll::Ready(())
                    },
                )
            }
        },
    )
    .await?;
    let (a_after, _) = known_nodes(&a, &a_ip).await?;
    let (b_after, _) = known_nodes(&b, &b_ip).await?;
    check(
        a_after == a_before,
        format!("alpha took in beta's node: {a_after:?}, was {a_before:?}"),
    )?;
    check(
        b_after == b_before,
        format!("beta took in alpha's node: {b_after:?}, was {b_before:?}"),
    )?;
    check(
        bus_port_of(&a).await? != b_bus,
        format!("both clusters' bus on port {b_bus}"),
    )?;
    // Both still serve, each on its own.
    tokio::try_join!(a.wait_ready(LIVE), b.wait_ready(LIVE))?;
    Ok(())
}
