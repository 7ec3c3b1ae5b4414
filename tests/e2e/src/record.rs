//! A record of every version of some objects, in the API server's own order, for tests that
//! assert about order ("the gate moved only after the member was ready again", "never two
//! members of a shard down at once").
//!
//! Polling cannot prove such things: a poll every half second misses a state that lasts less, and
//! then concludes something about an order it never saw. A watch delivers every change of the
//! objects it selects, one after another in resourceVersion order, so the record holds every
//! state the API held. If the watch ever loses its place (the server answers 410 Gone), the record
//! says so ([`Record::complete`]) and an assertion built on it fails rather than passes on a gap.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::{E2eError, Poll, Result, wait_until};

/// One version of one object, as the watch delivered it.
#[derive(Debug, Clone)]
pub struct Version<K> {
    /// When the test process received it (for messages, never for order: order is the index).
    pub at: Instant,
    pub deleted: bool,
    pub object: K,
}

impl<K: Resource> Version<K> {
    pub fn name(&self) -> String {
        self.object.meta().name.clone().unwrap_or_default()
    }
}

struct Shared<K> {
    versions: Vec<Version<K>>,
    /// Set when the watch had to start over and may have missed versions.
    gap: Option<String>,
    /// Set once the first list is recorded.
    listed: bool,
}

/// Every version of the objects an `Api` and label selector name, from the moment of
/// [`Record::start`] on. Stops when dropped.
pub struct Record<K> {
    shared: Arc<Mutex<Shared<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Record<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// Lists the objects (their current versions open the record), then watches from that list's
    /// resourceVersion. Returns once the list is recorded.
    pub async fn start(api: Api<K>, labels: Option<&str>) -> Result<Self> {
        let shared = Arc::new(Mutex::new(Shared {
            versions: Vec::new(),
            gap: None,
            listed: false,
        }));
        let labels = labels.map(str::to_owned);
        let sink = shared.clone();
        let task = tokio::spawn(follow(api, labels, sink));
        let record = Self { shared, task };
        let shared = record.shared.clone();
        wait_until(Duration::from_secs(30), "the record's first list", || {
            let listed = lock(&shared).listed;
            async move {
                Ok(if listed {
                    Poll::Ready(())
                } else {
                    Poll::NotYet("not listed yet".into())
                })
            }
        })
        .await?;
        Ok(record)
    }

    /// Every version so far, in the API server's order.
    pub fn versions(&self) -> Vec<Version<K>> {
        lock(&self.shared).versions.clone()
    }

    /// The versions of one object, in order.
    pub fn versions_of(&self, name: &str) -> Vec<Version<K>> {
        self.versions()
            .into_iter()
            .filter(|v| v.name() == name)
            .collect()
    }

    /// Waits until the watch has delivered `seen` (an object a poll returned), or a later
    /// version of it: a poll can be ahead of the watch, and a record read before the watch catches
    /// up lacks the versions between.
    pub async fn caught_up(&self, seen: &K, within: Duration) -> Result<()> {
        let name = seen.meta().name.clone().unwrap_or_default();
        let version = |k: &K| {
            k.meta()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let Some(wanted) = version(seen) else {
            return Ok(());
        };
        let shared = self.shared.clone();
        wait_until(within, &format!("the record up to {name}@{wanted}"), || {
            let latest = lock(&shared)
                .versions
                .iter()
                .filter(|v| v.object.meta().name.as_deref() == Some(name.as_str()))
                .filter_map(|v| version(&v.object))
                .max();
            async move {
                Ok(match latest {
                    Some(latest) if latest >= wanted => Poll::Ready(()),
                    other => Poll::NotYet(format!("latest recorded {other:?}")),
                })
            }
        })
        .await
    }

    /// `Ok` when no version can have been missed; otherwise why.
    pub fn complete(&self) -> Result<()> {
        match &lock(&self.shared).gap {
            None => Ok(()),
            Some(why) => Err(E2eError::Check(format!(
                "the record of changes has a gap, so no order can be proved: {why}"
            ))),
        }
    }
}

impl<K> Drop for Record<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<K>(shared: &Mutex<Shared<K>>) -> std::sync::MutexGuard<'_, Shared<K>> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// List, then watch from the list's resourceVersion, resuming from the last version seen each
/// time the server ends a watch. When the server no longer has that version (410 Gone, e.g. after
/// an API server restart), the record notes a gap and lists again: it goes on recording, but can
/// no longer prove an order across the gap.
async fn follow<K>(api: Api<K>, labels: Option<String>, sink: Arc<Mutex<Shared<K>>>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let mut list_params = ListParams::default();
    let mut watch_params = WatchParams::default().timeout(290);
    if let Some(labels) = &labels {
        list_params = list_params.labels(labels);
        watch_params = watch_params.labels(labels);
    }
    loop {
        let mut resume = match api.list(&list_params).await {
            Ok(list) => {
                let mut shared = lock(&sink);
                let now = Instant::now();
                shared
                    .versions
                    .extend(list.items.into_iter().map(|object| Version {
                        at: now,
                        deleted: false,
                        object,
                    }));
                shared.listed = true;
                list.metadata.resource_version.clone().unwrap_or_default()
            }
            // The API server may be restarting: try again.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let gone = watch_from(&api, &watch_params, &mut resume, &sink).await;
        lock(&sink).gap.get_or_insert(format!(
            "the watch lost its place ({gone}) and listed again"
        ));
    }
}

/// Watches from `resume` for as long as the server keeps that place; returns why it lost it.
async fn watch_from<K>(
    api: &Api<K>,
    params: &WatchParams,
    resume: &mut String,
    sink: &Arc<Mutex<Shared<K>>>,
) -> String
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    loop {
        let stream = match api.watch(params, resume).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => return status.message,
            // The API server may be restarting: try again from the same place.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream.into_stream());
        while let Some(event) = stream.next().await {
            let (object, deleted) = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(b)) => {
                    *resume = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => return status.message,
                Ok(WatchEvent::Error(_)) | Err(_) => break,
            };
            if let Some(version) = object.meta().resource_version.clone() {
                *resume = version;
            }
            lock(sink).versions.push(Version {
                at: Instant::now(),
                deleted,
                object,
            });
        }
    }
}

/// The first index at or after `from` whose version satisfies `check`.
pub fn first_from<K>(
    versions: &[Version<K>],
    from: usize,
    check: impl Fn(&K) -> bool,
) -> Option<usize> {
    versions
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, v)| !v.deleted && check(&v.object))
        .map(|(i, _)| i)
}

/// A short description of a version, for failure messages.
pub fn describe<K: Resource + std::fmt::Debug>(index: usize, version: &Version<K>) -> String {
    format!(
        "#{index} {} rv={}{}",
        version.object.name_any(),
        version.object.resource_version().unwrap_or_default(),
        if version.deleted { " (deleted)" } else { "" }
    )
}

/// Checks that no version of a parent (`parents`: a ValkeyCluster or ValkeyReplication) said it
/// was Ready for `generation` (`status.observedGeneration` equal to it and the Ready condition
/// True) before its members were done with that generation: at that version's resourceVersion,
/// the members as `members` held them then must be `wanted` many, each ready and on its desired
/// revision for its latest spec ([`crate::members_rolled`]). A tool that waits for
/// `observedGeneration == generation` and Ready (kstatus, Argo CD, Flux, a user's script) takes
/// that status as "the change is done". `current` (the members read just now) makes sure the
/// member record has caught up with them first, as `parent` (the parent read just now) does the
/// parents' record.
///
/// Both records come from one API server, whose resourceVersions are one sequence across kinds
/// (etcd's revision): a member's last version at or before a parent's version is what the API
/// held at that moment.
pub async fn ready_only_when_rolled<P>(
    parents: &Record<P>,
    parent: &P,
    members: &Record<valkey_api::v1alpha1::ValkeyNode>,
    current: &[valkey_api::v1alpha1::ValkeyNode],
    generation: Option<i64>,
    wanted: usize,
) -> Result<()>
where
    P: Resource
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    parents.caught_up(parent, Duration::from_secs(30)).await?;
    for member in current {
        members.caught_up(member, Duration::from_secs(30)).await?;
    }
    parents.complete()?;
    members.complete()?;
    let rv = |meta: &kube::api::ObjectMeta| {
        meta.resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    let member_versions = members.versions();
    let mut claims = 0;
    for (index, version) in parents.versions().iter().enumerate() {
        if version.deleted || !claims_ready(&version.object, generation) {
            continue;
        }
        claims += 1;
        let Some(at) = rv(version.object.meta()) else {
            return Err(E2eError::Check(format!(
                "{} has no numeric resourceVersion",
                describe(index, version)
            )));
        };
        let mut then: std::collections::BTreeMap<String, valkey_api::v1alpha1::ValkeyNode> =
            Default::default();
        for member in member_versions
            .iter()
            .filter(|m| rv(m.object.meta()).is_some_and(|r| r <= at))
        {
            if member.deleted {
                then.remove(&member.name());
            } else {
                then.insert(member.name(), member.object.clone());
            }
        }
        let then: Vec<_> = then.into_values().collect();
        if !crate::members_rolled(&then, wanted) {
            let states: Vec<String> = then
                .iter()
                .map(|m| {
                    let s = m.status.clone().unwrap_or_default();
                    format!(
                        "{} generation {:?} observed {:?} ready {} revision {:?} of {:?}",
                        m.name_any(),
                        m.metadata.generation,
                        s.observed_generation,
                        s.ready,
                        s.current_revision,
                        s.desired_revision
                    )
                })
                .collect();
            return Err(E2eError::Check(format!(
                "{} said Ready for generation {generation:?} while its members were not done \
                 with their specs: {states:?}",
                describe(index, version)
            )));
        }
    }
    // The roll ended Ready for the generation: at least that status is there to check.
    if claims == 0 {
        return Err(E2eError::Check(format!(
            "no status said Ready for generation {generation:?}"
        )));
    }
    Ok(())
}

/// Whether `parent`'s status says it observed `generation` and is Ready.
fn claims_ready<P: serde::Serialize>(parent: &P, generation: Option<i64>) -> bool {
    let Ok(object) = serde_json::to_value(parent) else {
        return false;
    };
    let status = &object["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    generation.is_some() && status["observedGeneration"].as_i64() == generation && ready
}
