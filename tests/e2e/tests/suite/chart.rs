//! The Helm chart (`charts/valkey-operator`) installed for real (its static checks, lint, golden
//! files and values schema, are `tests/chart_static.rs`): the kubelet runs both controllers as pods under their
//! own ServiceAccounts, and a ValkeyCluster and a ValkeyReplication applied afterwards become Ready
//! (the RBAC is enough), while `kubectl auth can-i` shows it is no more than that, and a release
//! with the replication kind off is not granted it. Upgrades touch only what changed,
//! leader election keeps one of two replicas reconciling, uninstall keeps the data volumes, and
//! two releases can split the controllers between them.
//!
//! Every release watches only its test namespace and keeps its Leases there, so these tests run
//! beside the others.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use e2e::helm::{chart, helm, helm_fails, helm_program, run};
use e2e::operator::{install_crds, wait_cluster};
use e2e::{
    E2eError, Poll, Result, TestNamespace, check, describe_pod, is_localkube, kubeconfig_path,
    kubectl, kubectl_program, kubectl_stdin, localkube_container_log, localkube_dir, pod_ip,
    pod_ready, wait_until,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use valkey_api::v1alpha1::{ClusterState, ReplicationState, ValkeyCluster, ValkeyReplication};

const NODE: &str = "node-controller";
const CLUSTER: &str = "cluster-controller";

const CONTROLLERS_READY: Duration = Duration::from_secs(120);
const CLUSTER_READY: Duration = Duration::from_secs(300);

// ---- helm and kubectl --------------------------------------------------------------------------

/// `kubectl auth can-i <verb> <resource> -n <ns> --as <user>`; `<resource>/status` asks about the
/// status subresource (elsewhere `/x` names an object).
async fn can_i(user: &str, verb: &str, resource: &str, namespace: &str) -> Result<bool> {
    let mut args = vec!["auth", "can-i", verb, "-n", namespace, "--as", user];
    match resource.strip_suffix("/status") {
        Some(r) => args.extend([r, "--subresource", "status"]),
        None => args.push(resource),
    }
    let out = run(&kubectl_program(), &args).await?;
    match out.stdout.trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(E2eError::Check(format!(
            "kubectl auth can-i {verb} {resource}: {other} {}",
            out.stderr.trim()
        ))),
    }
}

/// The question `can_i` asks, as the SubjectAccessReview it amounts to: the same answer for the
/// ServiceAccount (its user and groups) without a kubectl process per question.
async fn access_review(
    client: &kube::Client,
    service_account: &str,
    verb: &str,
    resource: &str,
    namespace: &str,
) -> Result<bool> {
    let sa_namespace = service_account
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default();
    let (kind, object) = resource.split_once('/').unwrap_or((resource, ""));
    let (plural, group) = kind.split_once('.').unwrap_or((kind, ""));
    let (subresource, name) = match object {
        "status" => (Some("status".to_owned()), None),
        "" => (None, None),
        name => (None, Some(name.to_owned())),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(service_account.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(plural.to_owned()),
                subresource,
                name,
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// A release; uninstalled (without waiting) when dropped, as its cluster-scoped objects would
/// outlive the test namespace.
struct Release {
    name: String,
    namespace: String,
    installed: bool,
}

impl Release {
    /// `helm install` of this checkout's chart with values given as `key=value` pairs (`--set`).
    async fn install(name: &str, namespace: &str, set: &[String]) -> Result<Self> {
        Self::install_chart(name, namespace, &chart(), set).await
    }

    /// `helm install` of the chart at `chart` (a directory).
    async fn install_chart(
        name: &str,
        namespace: &str,
        chart: &str,
        set: &[String],
    ) -> Result<Self> {
        let mut args = vec!["install", name, "-n", namespace, chart];
        for s in set {
            args.extend(["--set", s.as_str()]);
        }
        // Uninstalled on drop even when the install fails halfway.
        let release = Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            installed: true,
        };
        helm(&args).await?;
        Ok(release)
    }

    /// `helm upgrade --reuse-values` with more `--set`s.
    async fn upgrade(&self, set: &[String]) -> Result<String> {
        let chart = chart();
        let mut args = vec![
            "upgrade",
            self.name.as_str(),
            chart.as_str(),
            "-n",
            self.namespace.as_str(),
            "--reuse-values",
        ];
        for s in set {
            args.extend(["--set", s.as_str()]);
        }
        helm(&args).await
    }

    async fn uninstall(&mut self) -> Result<()> {
        helm(&[
            "uninstall",
            &self.name,
            "-n",
            &self.namespace,
            "--wait",
            "--timeout",
            "60s",
        ])
        .await?;
        self.installed = false;
        Ok(())
    }

    /// The name the chart gives a controller's namespaced objects.
    fn object(&self, component: &str) -> String {
        if self.name.contains("valkey-operator") {
            format!("{}-{component}", self.name)
        } else {
            format!("{}-valkey-operator-{component}", self.name)
        }
    }

    fn service_account(&self, component: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace,
            self.object(component)
        )
    }

    /// The args of a controller's container, from its Deployment.
    async fn controller_args(&self, component: &str) -> Result<Vec<String>> {
        let deployment = kubectl(&[
            "get",
            "deployment",
            &self.object(component),
            "-n",
            &self.namespace,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ])
        .await?;
        serde_json::from_str(&deployment)
            .map_err(|e| E2eError::Check(format!("args of {component}: {e}: {deployment}")))
    }

    fn selector(&self, component: &str) -> String {
        format!(
            "app.kubernetes.io/instance={},app.kubernetes.io/component={component}",
            self.name
        )
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if !self.installed || std::env::var_os("E2E_KEEP_NAMESPACES").is_some() {
            return;
        }
        let _ = std::process::Command::new(helm_program())
            .args(["uninstall", &self.name, "-n", &self.namespace])
            .env("KUBECONFIG", kubeconfig_path().unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `--set`s that scope both controllers to `ns`.
fn watching(ns: &str) -> Vec<String> {
    vec![
        format!("nodeController.watchNamespaces={{{ns}}}"),
        format!("clusterController.watchNamespaces={{{ns}}}"),
    ]
}

/// On localkube the images are the debug binaries that `make localkube-images` copies.
fn require_controller_images() -> Result<()> {
    if !is_localkube() {
        return Ok(());
    }
    for c in [NODE, CLUSTER] {
        let bin = localkube_dir().join(format!("images/{c}/bin/{c}"));
        check(
            bin.is_file(),
            format!("{} is missing: run `make localkube-images`", bin.display()),
        )?;
    }
    Ok(())
}

// ---- waiting on the controllers ----------------------------------------------------------------

/// A pod's state for a timeout message, with the tail of its log on localkube.
fn pod_story(pod: &Pod, container: &str) -> String {
    let log = localkube_container_log(pod, container)
        .map(|l| {
            let lines: Vec<&str> = l.lines().collect();
            lines[lines.len().saturating_sub(5)..].join("\n    ")
        })
        .unwrap_or_default();
    format!("{}: {}\n    {log}", pod.name_any(), describe_pod(pod))
}

/// Waits until the controller has exactly `replicas` pods, all Ready; returns them.
async fn wait_controller(
    ns: &TestNamespace,
    release: &Release,
    component: &str,
    replicas: usize,
) -> Result<Vec<Pod>> {
    let pods = ns.api::<Pod>();
    let selector = release.selector(component);
    wait_until(
        CONTROLLERS_READY,
        &format!("{replicas} Ready pod(s) of {}", release.object(component)),
        || {
            let (pods, selector) = (pods.clone(), selector.clone());
            async move {
                let list = pods.list(&ListParams::default().labels(&selector)).await?;
                let live: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                Ok(if live.len() == replicas && live.iter().all(pod_ready) {
                    Poll::Ready(live)
                } else {
                    Poll::NotYet(
                        live.iter()
                            .map(|p| pod_story(p, component))
                            .collect::<Vec<_>>()
                            .join("\n"),
                    )
                })
            }
        },
    )
    .await
}

/// Waits until the Deployment has rolled out its current spec: every replica updated and ready,
/// and no pod of an older ReplicaSet left.
async fn wait_rollout(ns: &TestNamespace, name: &str) -> Result<()> {
    let api = ns.api::<Deployment>();
    wait_until(
        CONTROLLERS_READY,
        &format!("Deployment {name} rolled out"),
        || {
            let api = api.clone();
            async move {
                let d = api.get(name).await?;
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let status = d.status.clone().unwrap_or_default();
                let done = status.observed_generation == d.metadata.generation
                    && status.updated_replicas == Some(want)
                    && status.ready_replicas == Some(want)
                    && status.replicas == Some(want);
                Ok(if done {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{status:?}"))
                })
            }
        },
    )
    .await
}

/// Waits until the controller's Lease is held by one of `pods`; returns that pod's name.
async fn wait_lease_holder(ns: &TestNamespace, lease: &str, pods: &[Pod]) -> Result<String> {
    let leases = ns.api::<Lease>();
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    wait_until(
        Duration::from_secs(60),
        &format!("Lease {lease} held by one of {names:?}"),
        || {
            let (leases, names) = (leases.clone(), names.clone());
            async move {
                let holder = leases
                    .get(lease)
                    .await?
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default();
                // The identity is the pod name and a random suffix.
                Ok(
                    match names.iter().find(|n| holder.starts_with(&format!("{n}-"))) {
                        Some(n) => Poll::Ready(n.clone()),
                        None => Poll::NotYet(format!("held by {holder:?}")),
                    },
                )
            }
        },
    )
    .await
}

async fn wait_cluster_ready(ns: &TestNamespace, name: &str) -> Result<ValkeyCluster> {
    wait_cluster(ns, name, CLUSTER_READY, "state Ready", |c| {
        c.status.as_ref().and_then(|s| s.state) == Some(ClusterState::Ready)
    })
    .await
}

fn cluster_manifest(name: &str, shards: u32, replicas: u32) -> String {
    format!(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {{name: {name}}}\nspec: {{shards: {shards}, replicas: {replicas}}}\n"
    )
}

/// GET http://<ip>:8080<path> (a controller's health server, reached at its pod IP).
async fn http_get(ip: &str, path: &str) -> std::result::Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, 8080))
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| format!("{ip}:8080{path} timed out"))??;
    match response.split_once("\r\n\r\n") {
        Some((head, body))
            if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") =>
        {
            Ok(body.to_owned())
        }
        Some((head, _)) => Err(head.lines().next().unwrap_or_default().to_owned()),
        None => Err("no HTTP response".into()),
    }
}

/// The `leader` gauge of a controller pod's /metrics.
async fn leader_gauge(pod: &Pod) -> std::result::Result<i64, String> {
    let ip = pod_ip(pod).ok_or("no pod IP")?;
    let metrics = http_get(&ip, "/metrics").await?;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("leader ")?.trim().parse().ok())
        .ok_or_else(|| "no leader gauge in /metrics".into())
}

/// Prints how long each step of a test took (shown with `--nocapture`), for the timings in
/// failures and reports.
struct Steps {
    test: &'static str,
    last: std::time::Instant,
}

impl Steps {
    fn new(test: &'static str) -> Self {
        Self {
            test,
            last: std::time::Instant::now(),
        }
    }

    fn done(&mut self, step: &str) {
        let now = std::time::Instant::now();
        eprintln!("{}: {step} in {:.1?}", self.test, now - self.last);
        self.last = now;
    }
}

// ---- tests -------------------------------------------------------------------------------------

/// A typo in values fails a real install before anything is created (the static checks prove the
/// message for `helm template`).
#[tokio::test(flavor = "multi_thread")]
async fn a_typo_in_values_fails_the_install_before_anything_is_created() -> Result<()> {
    let chart = chart();
    let ns = TestNamespace::create("chart-typo").await?;
    let stderr = helm_fails(&[
        "install",
        "typo",
        chart.as_str(),
        "-n",
        &ns.name,
        "--set",
        "clusterController.logLevle=debug",
    ])
    .await?;
    check(
        stderr.contains("logLevle") && stderr.contains("/clusterController"),
        format!("the message must name clusterController.logLevle: {stderr}"),
    )?;
    let releases = helm(&["list", "-n", &ns.name, "-q", "-a"]).await?;
    check(
        releases.trim().is_empty(),
        format!("nothing may be installed: {releases}"),
    )
}

/// Both ways the chart scopes RBAC, checked as the ServiceAccounts themselves. The releases run
/// no pods (replicas 0): only their RBAC is under test here.
#[tokio::test(flavor = "multi_thread")]
async fn service_accounts_can_do_what_the_controllers_need_and_no_more() -> Result<()> {
    install_crds().await?;
    let ns = TestNamespace::create("chart-rbac").await?;
    let no_pods = [
        "nodeController.replicas=0".to_string(),
        "clusterController.replicas=0".to_string(),
    ];
    // Watching every namespace: ClusterRoles, named after the release's namespace too.
    let all = Release::install("everywhere", &ns.name, &no_pods).await?;
    // Watching one namespace: Roles there.
    let mut one_set = watching(&ns.name);
    one_set.extend(no_pods.iter().cloned());
    let one = Release::install("here", &ns.name, &one_set).await?;
    let elsewhere = "default";

    struct Expect {
        verb: &'static str,
        resource: &'static str,
        allowed: bool,
    }
    let e = |verb, resource, allowed| Expect {
        verb,
        resource,
        allowed,
    };
    let cluster_controller = [
        e("list", "valkeyclusters.valkey.io", true),
        e("watch", "valkeyclusters.valkey.io", true),
        e("patch", "valkeyclusters.valkey.io/status", true),
        e("patch", "valkeyclusters.valkey.io", true),
        e("update", "valkeyclusters.valkey.io", false),
        e("delete", "valkeyclusters.valkey.io", false),
        e("list", "valkeyreplications.valkey.io", true),
        e("watch", "valkeyreplications.valkey.io", true),
        e("patch", "valkeyreplications.valkey.io/status", true),
        e("patch", "valkeyreplications.valkey.io", true),
        e("list", "valkeybackups.valkey.io", true),
        e("create", "valkeybackups.valkey.io", true),
        e("delete", "valkeybackups.valkey.io", true),
        e("patch", "valkeybackups.valkey.io/status", true),
        e("update", "valkeybackups.valkey.io", false),
        e("watch", "valkeybackupschedules.valkey.io", true),
        e("patch", "valkeybackupschedules.valkey.io/status", true),
        e("patch", "valkeybackupschedules.valkey.io", false),
        e("create", "valkeybackupschedules.valkey.io", false),
        e("list", "services", true),
        e("patch", "services", true),
        e("delete", "services", true),
        e("list", "valkeynodes.valkey.io", true),
        e("create", "valkeynodes.valkey.io", true),
        e("patch", "valkeynodes.valkey.io", true),
        e("delete", "valkeynodes.valkey.io", true),
        e("patch", "valkeynodes.valkey.io/status", false),
        e("get", "secrets", true),
        e("create", "secrets", true),
        e("patch", "secrets", true),
        // Watched by their metadata (what starts a pass when one changes); RBAC cannot grant
        // list and watch of metadata alone.
        e("list", "secrets", true),
        e("watch", "secrets", true),
        e("delete", "secrets", false),
        e("create", "events.events.k8s.io", true),
        e("patch", "poddisruptionbudgets.policy", true),
        e("delete", "poddisruptionbudgets.policy", true),
        e("get", "pods", false),
        e("list", "pods", false),
        e("list", "statefulsets.apps", false),
        e("create", "statefulsets.apps", false),
        e("list", "deployments.apps", false),
        e("list", "persistentvolumeclaims", false),
        e("delete", "persistentvolumeclaims", false),
        e("list", "configmaps", false),
        e("patch", "networkpolicies.networking.k8s.io", true),
        e("delete", "networkpolicies.networking.k8s.io", true),
        e("list", "networkpolicies.networking.k8s.io", true),
        e("create", "podmonitors.monitoring.coreos.com", true),
        e("patch", "podmonitors.monitoring.coreos.com", true),
        e("delete", "podmonitors.monitoring.coreos.com", true),
        e("list", "podmonitors.monitoring.coreos.com", false),
        e("create", "servicemonitors.monitoring.coreos.com", false),
    ];
    let node_controller = [
        e("list", "valkeynodes.valkey.io", true),
        e("watch", "valkeynodes.valkey.io", true),
        e("patch", "valkeynodes.valkey.io/status", true),
        e("create", "valkeynodes.valkey.io", false),
        e("patch", "valkeynodes.valkey.io", false),
        e("delete", "valkeynodes.valkey.io", false),
        e("list", "valkeyclusters.valkey.io", false),
        e("patch", "valkeyclusters.valkey.io", false),
        e("patch", "valkeyclusters.valkey.io/status", false),
        e("list", "valkeybackups.valkey.io", false),
        e("list", "statefulsets.apps", true),
        e("create", "statefulsets.apps", true),
        e("patch", "statefulsets.apps", true),
        e("delete", "statefulsets.apps", false),
        e("patch", "deployments.apps", true),
        e("patch", "configmaps", true),
        e("create", "persistentvolumeclaims", true),
        e("delete", "persistentvolumeclaims", false),
        e("list", "pods", true),
        e("watch", "pods", true),
        e("patch", "pods", true),
        e("create", "pods", false),
        e("delete", "pods", false),
        e("get", "secrets", true),
        e("list", "secrets", true),
        e("watch", "secrets", true),
        e("create", "secrets", false),
        e("create", "events.events.k8s.io", true),
    ];

    // Every question as (user, verb, resource, namespace, expected answer).
    let mut questions: Vec<(String, &str, String, String, bool)> = Vec::new();
    for (component, expectations) in [
        (CLUSTER, &cluster_controller[..]),
        (NODE, &node_controller[..]),
    ] {
        for x in expectations.iter() {
            let (verb, resource) = (x.verb, x.resource.to_owned());
            // Everywhere: the same answer in the release's namespace and in another one.
            let user = all.service_account(component);
            for namespace in [ns.name.as_str(), elsewhere] {
                questions.push((
                    user.clone(),
                    verb,
                    resource.clone(),
                    namespace.into(),
                    x.allowed,
                ));
            }
            // One namespace: as expected there, nothing anywhere else.
            let user = one.service_account(component);
            questions.push((
                user.clone(),
                verb,
                resource.clone(),
                ns.name.clone(),
                x.allowed,
            ));
            questions.push((user, verb, resource, elsewhere.into(), false));
        }
        // Leases: any may be created (RBAC cannot limit create by name), only its own updated;
        // the cluster-controller also claims each parent with a Lease and keeps a heartbeat
        // Lease per namespace (deleted when it stops, swept by label when long expired), so it
        // may update, list and delete any Lease where it watches (every namespace for `all`).
        for release in [&all, &one] {
            let user = release.service_account(component);
            let leases = "leases.coordination.k8s.io";
            let own = format!("{leases}/{}", release.object(component));
            let per_cluster = component == CLUSTER;
            for (verb, resource, allowed) in [
                ("create", leases.to_owned(), true),
                ("get", own.clone(), true),
                ("update", own.clone(), true),
                ("update", format!("{leases}/someone-else"), per_cluster),
                ("delete", own, per_cluster),
                ("list", leases.to_owned(), per_cluster),
            ] {
                questions.push((user.clone(), verb, resource, ns.name.clone(), allowed));
            }
            let everywhere = per_cluster && std::ptr::eq(release, &all);
            questions.push((user, "create", leases.into(), elsewhere.into(), everywhere));
        }
    }
    // A release with the replication kind off does not watch it; it still watches Services (its
    // clusters' external ones) and applies them.
    let mut clusters_only = watching(&ns.name);
    clusters_only.extend(no_pods.iter().cloned());
    clusters_only.push("nodeController.enabled=false".into());
    clusters_only.push("valkeyNodeAdmission.enabled=false".into());
    clusters_only.push("clusterController.kinds.valkeyReplication=false".into());
    let without = Release::install("clusters-only", &ns.name, &clusters_only).await?;
    let user = without.service_account(CLUSTER);
    for (verb, resource, allowed) in [
        ("list", "valkeyclusters.valkey.io", true),
        ("list", "valkeyreplications.valkey.io", false),
        ("watch", "valkeyreplications.valkey.io", false),
        ("patch", "valkeyreplications.valkey.io/status", false),
        ("list", "services", true),
        ("patch", "services", true),
        ("patch", "poddisruptionbudgets.policy", true),
    ] {
        questions.push((
            user.clone(),
            verb,
            resource.into(),
            ns.name.clone(),
            allowed,
        ));
    }
    let args = without.controller_args(CLUSTER).await?;
    check(
        args.iter().any(|a| a == "--kinds=valkey-cluster"),
        format!("the clusters-only release runs {args:?}"),
    )?;
    // kubectl itself for a sample of them, to show the reviews below answer as it does. kubectl
    // resolves a resource through discovery, so it cannot ask about a kind whose CRD is not
    // installed (the Prometheus Operator's, unless another test made it): those go to the
    // reviews below only.
    let served = |resource: &str| !resource.contains(".monitoring.coreos.com");
    let sample = questions.iter().filter(|q| served(&q.2)).step_by(16);
    for (user, verb, resource, namespace, expected) in sample {
        let allowed = can_i(user, verb, resource, namespace).await?;
        check(
            allowed == *expected,
            format!("kubectl auth can-i {verb} {resource} -n {namespace} --as {user}: {allowed}"),
        )?;
    }
    let client = &ns.client;
    let answers: Vec<Result<Option<String>>> = futures::stream::iter(questions)
        .map(|(user, verb, resource, namespace, expected)| async move {
            let allowed = access_review(client, &user, verb, &resource, &namespace).await?;
            Ok((allowed != expected).then(|| {
                format!("{user} {verb} {resource} in {namespace}: {allowed}, expected {expected}")
            }))
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut wrong = Vec::new();
    for answer in answers {
        if let Some(w) = answer? {
            wrong.push(w);
        }
    }
    wrong.sort();
    check(wrong.is_empty(), wrong.join("\n"))?;
    drop((all, one));
    Ok(())
}

/// The whole life of one release: install, a cluster that becomes Ready through the chart's RBAC
/// alone, an upgrade of one controller that leaves the other's Deployment alone, leader election
/// between two replicas, and an uninstall that keeps the Valkey data volumes.
#[tokio::test(flavor = "multi_thread")]
async fn an_installed_release_runs_a_cluster_through_upgrade_and_uninstall() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
    let mut steps = Steps::new("life");
    require_controller_images()?;
    install_crds().await?;
    let ns = TestNamespace::create("chart-life").await?;
    let mut release = Release::install("vo", &ns.name, &watching(&ns.name)).await?;
    let nc_pods = wait_controller(&ns, &release, NODE, 1).await?;
    let cc_pods = wait_controller(&ns, &release, CLUSTER, 1).await?;
    steps.done("install and both controllers Ready");
    for (pod, component) in [(&nc_pods[0], NODE), (&cc_pods[0], CLUSTER)] {
        let spec = pod.spec.clone().unwrap_or_default();
        check(
            spec.service_account_name.as_deref() == Some(release.object(component).as_str()),
            format!("{} runs as {:?}", pod.name_any(), spec.service_account_name),
        )?;
    }

    // Two shards with a replica each: the smallest cluster that needs every verb the chart grants.
    ns.apply(&cluster_manifest("life", 2, 1)).await?;
    wait_cluster_ready(&ns, "life").await?;
    steps.done("2x1 cluster Ready");
    // The kind the release enables by default: a primary and a replica, Ready, and the
    // read/write Service the controller made (its own RBAC) selecting the primary.
    ns.apply(
        "apiVersion: valkey.io/v1alpha1\nkind: ValkeyReplication\nmetadata: {name: life-r}\nspec: {replicas: 1}\n",
    )
    .await?;
    let replications = ns.api::<ValkeyReplication>();
    let ready = wait_until(CLUSTER_READY, "ValkeyReplication life-r Ready", || {
        let replications = replications.clone();
        async move {
            let r = replications.get("life-r").await?;
            let status = r.status.clone().unwrap_or_default();
            Ok(
                if status.state == Some(ReplicationState::Ready) && status.ready_replicas == 1 {
                    Poll::Ready(status)
                } else {
                    Poll::NotYet(format!("{:?} {:?}", status.state, status.reason))
                },
            )
        }
    })
    .await?;
    let service = ns.api::<Service>().get("life-r").await?;
    let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
    check(
        ready.primary.is_some()
            && selector.get("valkey.io/node") == ready.primary.as_ref()
            && selector.get("valkey.io/role").map(String::as_str) == Some("primary"),
        format!(
            "primary {:?}, Service life-r selects {selector:?}",
            ready.primary
        ),
    )?;
    steps.done("1+1 replication Ready, its Service selects the primary");
    only_the_cluster_controller_writes_valkey_nodes(&ns, "life-0-0").await?;
    steps.done("a plain user may not write a ValkeyNode; break-glass may");
    // Events from both controllers prove their Events RBAC (a refused Event is only logged).
    let events = ns
        .kubectl(&[
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.reportingController}{\"\\n\"}{end}",
        ])
        .await?;
    for controller in ["valkey-node-controller", "valkey-cluster-controller"] {
        check(
            events.lines().any(|l| l == controller),
            format!("no Event reported by {controller}; reporters: {events}"),
        )?;
    }

    // Upgrade the cluster-controller to two replicas; the node-controller's Deployment is not
    // touched.
    let deployments = ns.api::<Deployment>();
    let before = deployments.get(&release.object(NODE)).await?;
    release
        .upgrade(&["clusterController.replicas=2".to_string()])
        .await?;
    wait_rollout(&ns, &release.object(CLUSTER)).await?;
    let cc_pods = wait_controller(&ns, &release, CLUSTER, 2).await?;
    steps.done("upgrade to 2 cluster-controllers, both Ready");
    let after = deployments.get(&release.object(NODE)).await?;
    check(
        after.metadata.generation == before.metadata.generation
            && after.metadata.resource_version == before.metadata.resource_version,
        format!(
            "the node-controller's Deployment changed: generation {:?} → {:?}, resourceVersion {:?} → {:?}",
            before.metadata.generation,
            after.metadata.generation,
            before.metadata.resource_version,
            after.metadata.resource_version
        ),
    )?;

    // Exactly one of the two leads: the Lease names it, and only its /metrics says leader 1.
    let leases = ns.api::<Lease>();
    let lease_name = release.object(CLUSTER);
    let leader = wait_until(
        Duration::from_secs(60),
        "one cluster-controller leader of two",
        || {
            let (leases, pods, lease_name) = (leases.clone(), cc_pods.clone(), lease_name.clone());
            async move {
                let holder = leases
                    .get(&lease_name)
                    .await?
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default();
                let mut gauges = Vec::new();
                for pod in &pods {
                    gauges.push(leader_gauge(pod).await);
                }
                let leaders: Vec<&Pod> = pods
                    .iter()
                    .zip(&gauges)
                    .filter(|(_, g)| matches!(g, Ok(1)))
                    .map(|(p, _)| p)
                    .collect();
                let standbys = gauges.iter().filter(|g| matches!(g, Ok(0))).count();
                Ok(match leaders.as_slice() {
                    [one]
                        if standbys == 1 && holder.starts_with(&format!("{}-", one.name_any())) =>
                    {
                        Poll::Ready(one.name_any())
                    }
                    _ => Poll::NotYet(format!("lease holder {holder:?}, leader gauges {gauges:?}")),
                })
            }
        },
    )
    .await?;
    eprintln!("cluster-controller leader: {leader}");
    steps.done("exactly one leader");
    check(
        ns.api::<ValkeyCluster>()
            .get("life")
            .await?
            .status
            .and_then(|s| s.state)
            == Some(ClusterState::Ready),
        "the cluster stays Ready through the upgrade",
    )?;

    // Uninstall: the controllers go, the Valkey data volumes stay (with the cluster, which no
    // release owns).
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let volumes_before: Vec<String> = pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    // Four of the cluster's members, two of the replication's.
    check(
        volumes_before.len() == 6,
        format!("6 data volumes expected: {volumes_before:?}"),
    )?;
    release.uninstall().await?;
    steps.done("uninstall");
    let pods = ns.api::<Pod>();
    wait_until(
        Duration::from_secs(60),
        "the controllers' pods to go",
        || {
            let pods = pods.clone();
            async move {
                let left = pods
                    .list(&ListParams::default().labels("app.kubernetes.io/instance=vo"))
                    .await?
                    .items;
                Ok(if left.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("{} pod(s) left", left.len()))
                })
            }
        },
    )
    .await?;
    for component in [NODE, CLUSTER] {
        let name = release.object(component);
        check(
            deployments.get_opt(&name).await?.is_none()
                && ns.api::<ServiceAccount>().get_opt(&name).await?.is_none()
                && ns.api::<Role>().get_opt(&name).await?.is_none(),
            format!("{name}: left after uninstall"),
        )?;
    }
    let volumes_after: Vec<String> = pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    check(
        volumes_after == volumes_before,
        format!("volumes before {volumes_before:?}, after uninstall {volumes_after:?}"),
    )?;
    Ok(())
}

/// With the release's ValidatingAdmissionPolicy: a user whom RBAC lets write ValkeyNodes is still
/// refused by the API server, with a message that says why, when creating one or changing an
/// existing one's spec or labels; an annotation is still theirs to change; the break-glass group
/// (system:masters by default) may write. The cluster-controller itself is the one writer the
/// cluster's own readiness proves.
async fn only_the_cluster_controller_writes_valkey_nodes(
    ns: &TestNamespace,
    existing: &str,
) -> Result<()> {
    const USER: &str = "jane";
    const WHY: &str = "ValkeyNodes are written by the valkey-operator cluster-controller only";
    ns.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: valkeynode-editor}}
rules: [{{apiGroups: [valkey.io], resources: [valkeynodes], verbs: ["*"]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: valkeynode-editor}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: valkeynode-editor}}
subjects: [{{kind: User, name: {USER}, apiGroup: rbac.authorization.k8s.io}}]
"#
    ))
    .await?;
    let node = r#"{"apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyNode",
        "metadata": {"name": "intruder"},
        "spec": {"image": "valkey/valkey:9.1", "credentials": {"secretName": "life-acl"}}}"#;
    let as_user = |extra: &'static [&'static str], verb: &'static str| {
        let mut args = vec![
            verb,
            "-n",
            ns.name.as_str(),
            "--dry-run=server",
            "--as",
            USER,
        ];
        args.extend_from_slice(extra);
        args
    };
    // RBAC alone would allow it: the refusal below is the policy's.
    check(
        can_i(USER, "create", "valkeynodes.valkey.io", &ns.name).await?,
        "the test user should be allowed by RBAC",
    )?;
    // The binding reaches the API server's admission a moment after the install.
    let refusal = wait_until(
        Duration::from_secs(30),
        "the API server refusing a ValkeyNode from a plain user",
        || async {
            let mut args = as_user(&[], "create");
            args.extend(["-f", "-"]);
            Ok(match kubectl_stdin(&args, node).await {
                Err(E2eError::Kubectl { stderr, .. }) if stderr.contains(WHY) => {
                    Poll::Ready(stderr)
                }
                other => Poll::NotYet(format!("{other:?}")),
            })
        },
    )
    .await?;
    check(
        refusal.contains(&format!("{USER} may not create one")),
        format!("the refusal should say who and what: {refusal}"),
    )?;
    for (what, patch) in [
        ("spec", r#"{"spec": {"image": "evil/valkey:9.1"}}"#),
        (
            "labels",
            r#"{"metadata": {"labels": {"valkey.io/shard": "7"}}}"#,
        ),
    ] {
        let mut args = as_user(&[], "patch");
        args.extend(["valkeynode", existing, "--type=merge", "-p", patch]);
        match kubectl(&args).await {
            Err(E2eError::Kubectl { stderr, .. })
                if stderr.contains(WHY) && stderr.contains("may not change its spec or labels") => {
            }
            other => {
                return Err(E2eError::Check(format!(
                    "changing {what} of {existing} as {USER}: expected the policy's refusal, got {other:?}"
                )));
            }
        }
    }
    let mut args = as_user(&[], "annotate");
    args.extend(["valkeynode", existing, "note=hello"]);
    kubectl(&args).await?;
    let mut args = as_user(&["--as-group", "system:masters"], "create");
    args.extend(["-f", "-"]);
    kubectl_stdin(&args, node).await?;
    Ok(())
}

/// resourceVersions of every namespaced object a release made for one controller.
async fn objects_of(ns: &TestNamespace, name: &str) -> Result<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    let leader = format!("{name}-leader-election");
    out.insert(
        format!("Deployment/{name}"),
        ns.api::<Deployment>()
            .get(name)
            .await?
            .metadata
            .resource_version,
    );
    out.insert(
        format!("ServiceAccount/{name}"),
        ns.api::<ServiceAccount>()
            .get(name)
            .await?
            .metadata
            .resource_version,
    );
    out.insert(
        format!("Service/{name}"),
        ns.api::<Service>()
            .get(name)
            .await?
            .metadata
            .resource_version,
    );
    out.insert(
        format!("PodDisruptionBudget/{name}"),
        ns.api::<PodDisruptionBudget>()
            .get(name)
            .await?
            .metadata
            .resource_version,
    );
    for role in [name, leader.as_str()] {
        out.insert(
            format!("Role/{role}"),
            ns.api::<Role>().get(role).await?.metadata.resource_version,
        );
        out.insert(
            format!("RoleBinding/{role}"),
            ns.api::<RoleBinding>()
                .get(role)
                .await?
                .metadata
                .resource_version,
        );
    }
    Ok(out)
}

/// One release with only the node-controller, another with only the cluster-controller: together
/// they run a cluster, and upgrading one leaves every object of the other as it was.
#[tokio::test(flavor = "multi_thread")]
async fn two_releases_split_the_controllers_and_upgrade_independently() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
    let mut steps = Steps::new("split");
    require_controller_images()?;
    install_crds().await?;
    let ns = TestNamespace::create("chart-split").await?;
    let mut nodes_set = watching(&ns.name);
    nodes_set.push("clusterController.enabled=false".into());
    let nodes = Release::install("nodes", &ns.name, &nodes_set).await?;
    let mut clusters_set = watching(&ns.name);
    clusters_set.push("nodeController.enabled=false".into());
    // The CRDs exist by now: Helm skips them and the second install goes through.
    let clusters = Release::install("clusters", &ns.name, &clusters_set).await?;

    let deployments = ns.api::<Deployment>();
    let names: Vec<String> = deployments
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    check(
        names.len() == 2
            && names.contains(&nodes.object(NODE))
            && names.contains(&clusters.object(CLUSTER)),
        format!("one controller per release expected: {names:?}"),
    )?;
    wait_controller(&ns, &nodes, NODE, 1).await?;
    wait_controller(&ns, &clusters, CLUSTER, 1).await?;
    steps.done("two releases installed, controllers Ready");

    ns.apply(&cluster_manifest("split", 1, 1)).await?;
    wait_cluster_ready(&ns, "split").await?;
    steps.done("1x1 cluster Ready");

    let before = objects_of(&ns, &nodes.object(NODE)).await?;
    let cc_before = deployments.get(&clusters.object(CLUSTER)).await?;
    clusters
        .upgrade(&["clusterController.logLevel=debug".to_string()])
        .await?;
    steps.done("upgrade of the cluster-controller release");
    let cc_after = deployments.get(&clusters.object(CLUSTER)).await?;
    check(
        cc_after.metadata.generation > cc_before.metadata.generation,
        "the upgrade changed the cluster-controller's Deployment",
    )?;
    let after = objects_of(&ns, &nodes.object(NODE)).await?;
    check(
        before == after,
        format!("the node-controller release changed: before {before:?}, after {after:?}"),
    )?;
    // The new pod takes the Lease over from the old one and the cluster stays served.
    wait_rollout(&ns, &clusters.object(CLUSTER)).await?;
    let pods = wait_controller(&ns, &clusters, CLUSTER, 1).await?;
    wait_lease_holder(&ns, &clusters.object(CLUSTER), &pods).await?;
    wait_cluster_ready(&ns, "split").await?;
    steps.done("new cluster-controller leads, cluster Ready");
    drop((nodes, clusters));
    Ok(())
}

// ---- upgrading from the previous release -------------------------------------------------------

/// The previous release (`hack/previous-release.env`): its chart as `make previous-release`
/// unpacked it, and the image tag of its controllers (on localkube, the `previous` images that
/// target builds from the same commit).
struct PreviousRelease {
    version: String,
    chart: String,
    tag: String,
}

impl PreviousRelease {
    fn find() -> Result<Self> {
        let env_file = e2e::repo_root().join("hack/previous-release.env");
        let env = std::fs::read_to_string(&env_file)
            .map_err(|e| E2eError::Check(format!("{}: {e}", env_file.display())))?;
        let version = env
            .lines()
            .find_map(|l| l.strip_prefix("PREVIOUS_RELEASE_VERSION="))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                E2eError::Check(format!(
                    "no PREVIOUS_RELEASE_VERSION in {}",
                    env_file.display()
                ))
            })?
            .to_owned();
        let chart = e2e::repo_root().join("target/previous-release/src/charts/valkey-operator");
        check(
            chart.join("Chart.yaml").is_file(),
            format!(
                "{} is missing: run `make previous-release`",
                chart.display()
            ),
        )?;
        let tag = if is_localkube() {
            let bin = localkube_dir().join(format!("images/{CLUSTER}-previous/bin/{CLUSTER}"));
            check(
                bin.is_file(),
                format!("{} is missing: run `make previous-release`", bin.display()),
            )?;
            "previous".to_owned()
        } else {
            version.clone()
        };
        Ok(Self {
            version,
            chart: chart.display().to_string(),
            tag,
        })
    }
}

/// Each Valkey pod of cluster `name`: its UID and the restarts of each container.
async fn valkey_pods(ns: &TestNamespace, name: &str) -> Result<BTreeMap<String, String>> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("valkey.io/cluster={name}")))
        .await?;
    Ok(pods
        .items
        .iter()
        .map(|p| {
            let restarts: Vec<String> = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default()
                .iter()
                .map(|c| format!("{}={}", c.name, c.restart_count))
                .collect();
            (
                p.name_any(),
                format!(
                    "uid {} restarts {}",
                    p.uid().unwrap_or_default(),
                    restarts.join(",")
                ),
            )
        })
        .collect())
}

/// Each ValkeyNode's pod revisions: the one its spec asks for and the one that runs. Not its
/// generation: a new release may add a live setting (set with CONFIG SET, no restart), which
/// changes the spec but not the pod.
async fn node_revisions(ns: &TestNamespace) -> Result<BTreeMap<String, String>> {
    let nodes = ns
        .api::<valkey_api::v1alpha1::ValkeyNode>()
        .list(&ListParams::default())
        .await?;
    Ok(nodes
        .items
        .iter()
        .map(|n| {
            let status = n.status.clone().unwrap_or_default();
            (
                n.name_any(),
                format!(
                    "desired {:?} current {:?}",
                    status.desired_revision, status.current_revision
                ),
            )
        })
        .collect())
}

/// `helm upgrade` from the previous release to this checkout with a cluster running, as a user
/// does it (`helm upgrade` with their values): the CRDs become this checkout's, the new
/// controllers take over and scale the cluster, every server takes the new release's live
/// settings, and not one Valkey pod of the running cluster restarts, nor does any ValkeyNode ask
/// for a new pod revision.
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_from_the_previous_release_restarts_no_valkey_pod() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
    let mut steps = Steps::new("upgrade");
    require_controller_images()?;
    let previous = PreviousRelease::find()?;
    install_crds().await?;
    let ns = TestNamespace::create("chart-upgrade").await?;
    let mut old_values = watching(&ns.name);
    // The previous controllers must not apply their older CRDs here: on a shared cluster that
    // would take this checkout's newer fields away from every test running beside this one. The
    // CRDs this test checks are the ones the new cluster-controller applies.
    old_values.push("crds.apply=false".into());
    for c in ["nodeController", "clusterController"] {
        old_values.push(format!("{c}.image.tag={}", previous.tag));
    }
    let release = Release::install_chart("up", &ns.name, &previous.chart, &old_values).await?;
    wait_controller(&ns, &release, NODE, 1).await?;
    wait_controller(&ns, &release, CLUSTER, 1).await?;
    ns.apply(&cluster_manifest("up", 2, 1)).await?;
    wait_cluster_ready(&ns, "up").await?;
    steps.done(&format!(
        "release {} installed, 2x1 cluster Ready",
        previous.version
    ));
    let pods_before = valkey_pods(&ns, "up").await?;
    let nodes_before = node_revisions(&ns).await?;
    check(
        pods_before.len() == 4 && nodes_before.len() == 4,
        format!("a 2x1 cluster has 4 pods and ValkeyNodes: {pods_before:?} {nodes_before:?}"),
    )?;

    // The upgrade a user runs: this chart, their own values again (not --reuse-values, which
    // would drop every value the new chart added).
    let chart = chart();
    let mut args = vec!["upgrade", "up", chart.as_str(), "-n", ns.name.as_str()];
    let new_values = watching(&ns.name);
    for s in &new_values {
        args.extend(["--set", s.as_str()]);
    }
    helm(&args).await?;
    for component in [NODE, CLUSTER] {
        wait_rollout(&ns, &release.object(component)).await?;
        let pods = wait_controller(&ns, &release, component, 1).await?;
        let image = pods[0]
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        check(
            !image.ends_with(&format!(":{}", previous.tag)),
            format!("{component} still runs {image} after the upgrade"),
        )?;
    }
    steps.done("upgraded, both controllers rolled");

    // This checkout's CRDs, applied by the new cluster-controller once it leads: the fields the
    // previous release did not have are there, under the operator's field manager.
    for (crd, field) in [
        ("valkeyclusters.valkey.io", "progress"),
        ("valkeynodes.valkey.io", "exporter"),
    ] {
        wait_until(
            Duration::from_secs(90),
            &format!("CRD {crd} applied by the new cluster-controller"),
            || async move {
                let json = kubectl(&["get", "crd", crd, "-o", "json"]).await?;
                let managers = kubectl(&[
                    "get",
                    "crd",
                    crd,
                    "--show-managed-fields",
                    "-o",
                    "jsonpath={.metadata.managedFields[*].manager}",
                ])
                .await?;
                let has_field = json.contains(&format!("\"{field}\""));
                Ok(
                    if has_field
                        && managers
                            .split_whitespace()
                            .any(|m| m == "valkey-operator-crds")
                    {
                        Poll::Ready(())
                    } else {
                        Poll::NotYet(format!(
                            "field {field} present {has_field}, managers {managers}"
                        ))
                    },
                )
            },
        )
        .await?;
    }
    steps.done("CRDs applied by the new cluster-controller");

    // The new cluster-controller acts (progress is a status field the previous one never
    // wrote), and scaling out leaves the running members' pods alone.
    ns.kubectl(&[
        "patch",
        "valkeycluster",
        "up",
        "--type=merge",
        "-p",
        r#"{"spec":{"shards":3}}"#,
    ])
    .await?;
    wait_cluster(
        &ns,
        "up",
        CLUSTER_READY,
        "3 shards Ready, scale-out complete",
        |c| {
            c.status.as_ref().is_some_and(|s| {
                s.state == Some(ClusterState::Ready)
                    && s.shards == 3
                    && s.progress.as_ref().is_some_and(|p| p.done == p.total)
            })
        },
    )
    .await?;
    steps.done("the new controllers scaled the cluster to 3 shards");
    e2e::wait_live_settings_applied(&ns).await?;
    steps.done("every server runs the new release's live settings");

    let pods_after = valkey_pods(&ns, "up").await?;
    let nodes_after = node_revisions(&ns).await?;
    for (name, before) in &pods_before {
        check(
            pods_after.get(name) == Some(before),
            format!(
                "pod {name} changed across the upgrade: {before} → {:?}",
                pods_after.get(name)
            ),
        )?;
    }
    for (name, before) in &nodes_before {
        check(
            nodes_after.get(name) == Some(before),
            format!(
                "ValkeyNode {name} changed across the upgrade: {before} → {:?}",
                nodes_after.get(name)
            ),
        )?;
    }
    drop(release);
    Ok(())
}
