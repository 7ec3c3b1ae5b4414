//! ValkeyNodes under test with the node-controller alone, as a parent (or a person) drives them:
//! a namespace with a node-controller process watching it, ValkeyNodes created from JSON specs,
//! waits on their status, and what can be seen of them from outside: their pods, the pod's role
//! label, `kubectl get valkeynode`, the resourceVersions and Events the controller wrote, and
//! Valkey itself at `status.podIP`. What is read off one ValkeyNode or pod alone (a condition, the
//! pod's name or IP, a revision) is a free function.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use valkey_api::contract::{
    NODE_LABEL, OBSERVE_ANNOTATION, REVISION_ANNOTATION, ROLE_LABEL, SENTINEL_PORT,
};
use valkey_api::v1alpha1::{Role, ValkeyNode};

use crate::operator::{ControllerProcess, install_crds, patch_node_spec, wait_node};
use crate::{
    E2eError, Poll, Result, TestNamespace, random_letters, resource_version, uid, valkey,
    valkey_cmd, wait_until,
};

const NODE_CONTROLLER: &str = "node-controller";

/// A pod that needs no volume: scheduling, process start, the first probes, one status pass.
pub const READY: Duration = Duration::from_secs(90);

/// A namespace and the node-controller watching it (killed when dropped).
pub struct NodeFixture {
    /// Declared first so that it is killed before the namespace's deletion starts.
    pub controller: ControllerProcess,
    pub ns: TestNamespace,
    /// The controller's flags and environment, for [`Self::restart_controller`].
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl NodeFixture {
    /// Creates a namespace and starts the node-controller in it.
    pub async fn start(prefix: &str) -> Result<Self> {
        Self::start_with_env(prefix, &[], &[]).await
    }

    /// [`start`](Self::start), with extra flags and environment for the controller (see
    /// [`ControllerProcess::start_with_env`]).
    pub async fn start_with_env(prefix: &str, args: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        install_crds().await?;
        let ns = TestNamespace::create(prefix).await?;
        let controller = ControllerProcess::start_with_env(NODE_CONTROLLER, &ns, args, env).await?;
        Ok(Self {
            controller,
            ns,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    /// Another node-controller process in the namespace, beside the fixture's (for leader
    /// election); killed when dropped.
    pub async fn start_another(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ControllerProcess> {
        ControllerProcess::start_with_env(NODE_CONTROLLER, &self.ns, args, env).await
    }

    /// SIGKILLs the node-controller (unless the test already did) and starts a new one with the
    /// same flags and environment.
    pub async fn restart_controller(&mut self) -> Result<()> {
        self.controller.kill().await?;
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.controller = self.start_another(&args, &env).await?;
        Ok(())
    }

    pub fn api(&self) -> Api<ValkeyNode> {
        self.ns.api::<ValkeyNode>()
    }

    pub async fn get(&self, name: &str) -> Result<ValkeyNode> {
        Ok(self.api().get(name).await?)
    }

    /// Creates a ValkeyNode of valkey 9.1 that accepts remote clients without credentials, plus
    /// `spec` (merged in, objects key by key, so `config` entries add up).
    pub async fn create(&self, name: &str, spec: Value) -> Result<ValkeyNode> {
        let mut full = json!({"image": "valkey/valkey:9.1", "config": {"protected-mode": "no"}});
        merge(&mut full, &spec);
        self.create_exactly(name, full).await
    }

    /// Creates the ValkeyNode `name` with `spec` exactly as given.
    pub async fn create_exactly(&self, name: &str, spec: Value) -> Result<ValkeyNode> {
        let object = json!({
            "apiVersion": "valkey.io/v1alpha1",
            "kind": "ValkeyNode",
            "metadata": {"name": name},
            "spec": spec,
        });
        let node: ValkeyNode = serde_json::from_value(object)
            .map_err(|e| E2eError::Check(format!("node {name}: {e}")))?;
        Ok(self.api().create(&PostParams::default(), &node).await?)
    }

    /// Creates `<prefix>-sts` and `<prefix>-dep` (as [`create`](Self::create)) with the same
    /// `spec`, one of each workload type.
    pub async fn create_of_each_workload(&self, prefix: &str, spec: Value) -> Result<()> {
        self.create(&format!("{prefix}-sts"), spec.clone()).await?;
        let mut dep = spec;
        merge(&mut dep, &json!({"workloadType": "Deployment"}));
        self.create(&format!("{prefix}-dep"), dep).await?;
        Ok(())
    }

    /// A merge patch of the node's spec (how a parent or a person edits it).
    pub async fn patch_spec(&self, name: &str, spec: Value) -> Result<ValkeyNode> {
        patch_node_spec(&self.ns, name, spec).await
    }

    /// Tells the node-controller to look at once (what a parent does after changing a role).
    pub async fn poke(&self, name: &str) -> Result<()> {
        let stamp = format!("{:?}", std::time::SystemTime::now());
        let patch = json!({"metadata": {"annotations": {OBSERVE_ANNOTATION: stamp}}});
        self.api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Waits until the node satisfies `check`, returning it.
    pub async fn wait<F>(
        &self,
        name: &str,
        within: Duration,
        what: &str,
        check: F,
    ) -> Result<ValkeyNode>
    where
        F: Fn(&ValkeyNode) -> bool,
    {
        wait_node(&self.ns, name, within, what, check).await
    }

    /// Waits (up to [`READY`]) until the node is [`ready_primary`].
    pub async fn wait_ready(&self, name: &str) -> Result<ValkeyNode> {
        self.wait(name, READY, "ready as primary", ready_primary)
            .await
    }

    /// Waits until the node is [`settled`].
    pub async fn wait_settled(&self, name: &str, within: Duration) -> Result<ValkeyNode> {
        self.wait(name, within, "ready with every condition True", settled)
            .await
    }

    /// The pods of the node that are not being deleted.
    pub async fn live_pods(&self, name: &str) -> Result<Vec<Pod>> {
        let pods = self
            .ns
            .api::<Pod>()
            .list(&ListParams::default().labels(&format!("{NODE_LABEL}={name}")))
            .await?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// Waits until the namespace holds an object of kind `K` labelled `valkey.io/node` (any
    /// node's); `none` says there is none yet.
    pub async fn wait_labelled<K>(&self, within: Duration, what: &str, none: &str) -> Result<()>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        <K as Resource>::DynamicType: Default,
    {
        let api = self.ns.api::<K>();
        wait_until(within, what, || async {
            let list = api.list(&ListParams::default().labels(NODE_LABEL)).await?;
            Ok(if list.items.is_empty() {
                Poll::NotYet(none.into())
            } else {
                Poll::Ready(())
            })
        })
        .await
    }

    /// Every pod UID of the node seen from now on (see [`PodUids`]).
    pub async fn watch_pod_uids(&self, name: &str) -> Result<PodUids> {
        PodUids::watch(self, name).await
    }

    /// The pod's role label (`valkey.io/role`, what Services select on) as the test sees it.
    pub async fn role_label(&self, pod: &str) -> Result<Option<String>> {
        Ok(self.ns.pod(pod).await?.labels().get(ROLE_LABEL).cloned())
    }

    /// Waits until the pod's role label is `want` (`None`: no label); returns how long it took.
    pub async fn wait_role_label(
        &self,
        pod: &str,
        want: Option<&str>,
        within: Duration,
    ) -> Result<Duration> {
        let started = Instant::now();
        wait_until(
            within,
            &format!("pod {pod} labelled {want:?}"),
            || async move {
                let have = self.role_label(pod).await?;
                Ok(if have.as_deref() == want {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("labelled {have:?}"))
                })
            },
        )
        .await?;
        Ok(started.elapsed())
    }

    /// `kubectl get valkeynode`: its header and rows, split into columns.
    pub async fn rows(&self) -> Result<(Vec<String>, Vec<Vec<String>>)> {
        self.ns.table(&["get", "valkeynode"]).await
    }

    /// Who holds the node-controller's Lease (with `--leader-elect`).
    pub async fn lease_holder(&self) -> Result<Option<String>> {
        Ok(self
            .ns
            .api::<Lease>()
            .get_opt("valkey-node-controller")
            .await?
            .and_then(|l| l.spec?.holder_identity))
    }

    /// The resourceVersion of every ValkeyNode and every child the node-controller owns, by
    /// `Kind/name`.
    pub async fn resource_versions(&self) -> Result<BTreeMap<String, String>> {
        let ns = &self.ns;
        let all = ListParams::default();
        let mut versions = BTreeMap::new();
        for n in ns.api::<ValkeyNode>().list(&all).await?.items {
            versions.insert(format!("ValkeyNode/{}", n.name_any()), resource_version(&n));
        }
        for s in ns.api::<StatefulSet>().list(&all).await?.items {
            versions.insert(
                format!("StatefulSet/{}", s.name_any()),
                resource_version(&s),
            );
        }
        for d in ns.api::<Deployment>().list(&all).await?.items {
            versions.insert(format!("Deployment/{}", d.name_any()), resource_version(&d));
        }
        for c in ns
            .api::<ConfigMap>()
            .list(&all.clone().labels(NODE_LABEL))
            .await?
            .items
        {
            versions.insert(format!("ConfigMap/{}", c.name_any()), resource_version(&c));
        }
        for p in ns.api::<PersistentVolumeClaim>().list(&all).await?.items {
            versions.insert(
                format!("PersistentVolumeClaim/{}", p.name_any()),
                resource_version(&p),
            );
        }
        Ok(versions)
    }

    /// The node-controller's Events in the namespace, as `name object: reason: message (count)
    /// by instance`.
    pub async fn controller_events(&self) -> Result<BTreeSet<String>> {
        let events = self
            .ns
            .api::<Event>()
            .list(&ListParams::default())
            .await?
            .items;
        Ok(events
            .into_iter()
            .filter(|e| e.reporting_component.as_deref() == Some("valkey-node-controller"))
            .map(|e| {
                format!(
                    "{} {}: {}: {} ({}) by {}",
                    e.metadata.name.unwrap_or_default(),
                    e.involved_object.name.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    e.count.unwrap_or(1),
                    e.reporting_instance.unwrap_or_default()
                )
            })
            .collect())
    }

    /// How many of the namespace's ValkeyNodes are ready, and their names.
    pub async fn status_summary(&self) -> Result<(usize, Vec<String>)> {
        let nodes = self.api().list(&ListParams::default()).await?;
        let ready: Vec<String> = nodes
            .items
            .iter()
            .filter(|n| n.status.as_ref().is_some_and(|s| s.ready))
            .map(|n| n.name_any())
            .collect();
        Ok((ready.len(), ready))
    }

    /// Creates the Secret `name` with an ACL file (no default user; `healthcheck` may PING, INFO
    /// and CONFIG GET/SET, which the node-controller sets live settings with) and the password of
    /// `healthcheck`.
    pub async fn create_acl_secret(&self, name: &str, password: &str) -> Result<()> {
        let acl = format!(
            "user default off\nuser healthcheck on >{password} ~* &* +ping +info +config|get +config|set\n"
        );
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": {"users.acl": acl, "password": password},
        }))
        .map_err(|e| E2eError::Check(e.to_string()))?;
        self.ns
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(())
    }
}

/// `base` with `extra` merged in, objects key by key (so `config` entries add up).
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, extra) => *base = extra.clone(),
    }
}

/// Every pod UID of a ValkeyNode seen from now on, by a watch (so short-lived pods count too).
pub struct PodUids {
    seen: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodUids {
    async fn watch(fixture: &NodeFixture, node: &str) -> Result<Self> {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let config = watcher::Config::default().labels(&format!("{NODE_LABEL}={node}"));
        let stream = watcher(fixture.ns.api::<Pod>(), config)
            .default_backoff()
            .touched_objects();
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(pod) = event {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid(&pod));
                }
            }
        });
        let watch = Self { seen, task };
        // The watch has listed once the pod that exists now is in the set.
        let existing: BTreeSet<String> = fixture.live_pods(node).await?.iter().map(uid).collect();
        wait_until(Duration::from_secs(20), "the pod watch listed", || {
            let ok = existing.is_subset(&watch.uids());
            async move {
                Ok(if ok {
                    Poll::Ready(())
                } else {
                    Poll::NotYet("not listed yet".into())
                })
            }
        })
        .await?;
        Ok(watch)
    }

    /// The UIDs seen so far.
    pub fn uids(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for PodUids {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The node's condition of type `type_`, if it has one.
pub fn condition<'a>(node: &'a ValkeyNode, type_: &str) -> Option<&'a Condition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The node's condition of type `type_` as (status, reason, message), if it has one.
pub fn condition_parts(node: &ValkeyNode, type_: &str) -> Option<(String, String, String)> {
    condition(node, type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The node's condition of type `type_`, or an error saying the node has none.
pub fn required_condition(node: &ValkeyNode, type_: &str) -> Result<Condition> {
    condition(node, type_).cloned().ok_or_else(|| {
        E2eError::Check(format!(
            "{} has no {type_} condition: {:?}",
            node.name_any(),
            node.status
        ))
    })
}

/// Whether the node's `type_` condition has `status` for `reason`.
pub fn condition_is(node: &ValkeyNode, type_: &str, status: &str, reason: &str) -> bool {
    condition(node, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

/// Whether the node's status reports `role` (ready or not).
pub fn has_role(node: &ValkeyNode, role: Role) -> bool {
    node.status.as_ref().is_some_and(|s| s.role == Some(role))
}

/// Ready as a parent needs it: Valkey answers as primary at a pod IP.
pub fn ready_primary(node: &ValkeyNode) -> bool {
    node.status.as_ref().is_some_and(|s| {
        s.ready && s.role == Some(Role::Primary) && s.pod_ip.is_some() && s.pod_name.is_some()
    })
}

/// Ready, every condition True, the pod on the desired revision and the spec's generation seen.
pub fn settled(node: &ValkeyNode) -> bool {
    let Some(status) = node.status.as_ref() else {
        return false;
    };
    ready_primary(node)
        && status.observed_generation == node.meta().generation
        && status.current_revision.is_some()
        && status.current_revision == status.desired_revision
        && status
            .conditions
            .as_ref()
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.status == "True"))
}

/// The node's `status.podIP`.
pub fn pod_ip_of(node: &ValkeyNode) -> Result<String> {
    node.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| E2eError::Check(format!("{} has no status.podIP", node.name_any())))
}

/// The node's `status.podName`.
pub fn pod_name_of(node: &ValkeyNode) -> Result<String> {
    node.status
        .as_ref()
        .and_then(|s| s.pod_name.clone())
        .ok_or_else(|| E2eError::Check(format!("{} has no status.podName", node.name_any())))
}

/// The node's `status.desiredRevision`.
pub fn desired_revision(node: &ValkeyNode) -> Result<String> {
    node.status
        .as_ref()
        .and_then(|s| s.desired_revision.clone())
        .ok_or_else(|| {
            E2eError::Check(format!("{} has no status.desiredRevision", node.name_any()))
        })
}

/// The revision a pod was made for (its `valkey.io/revision` annotation).
pub fn revision_annotation(pod: &Pod) -> Option<String> {
    pod.annotations().get(REVISION_ANNOTATION).cloned()
}

/// The entries of a [`NodeFixture::resource_versions`] map that belong to ValkeyNode `name`.
pub fn versions_of(versions: BTreeMap<String, String>, name: &str) -> BTreeMap<String, String> {
    versions
        .into_iter()
        .filter(|(key, _)| {
            key.ends_with(&format!("/{name}")) || key.contains(&format!("/valkey-{name}"))
        })
        .collect()
}

/// A password for a test's ACL Secret.
pub fn random_password() -> String {
    format!("pw{}", random_letters(24))
}

/// `CONFIG GET key` of the Valkey at `ip` (default user, no password).
pub async fn config_get(ip: &str, key: &str) -> Result<String> {
    let mut conn = valkey(ip, 6379).await?;
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", key])
        .query_async(&mut conn)
        .await
        .map_err(|source| E2eError::Valkey {
            addr: ip.to_owned(),
            source,
        })?;
    match reply.as_slice() {
        [k, value] if k == key => Ok(value.clone()),
        _ => Err(E2eError::Check(format!("CONFIG GET {key} = {reply:?}"))),
    }
}

/// What a Sentinel answers `SENTINEL GET-MASTER-ADDR-BY-NAME name` with (nil when it monitors
/// no such primary).
pub async fn sentinel_primary(sentinel_ip: &str, name: &str) -> Result<String> {
    let mut conn = valkey(sentinel_ip, SENTINEL_PORT).await?;
    valkey_cmd(&mut conn, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name]).await
}
