//! Watch caches that register their own readiness.
//!
//! [`Cache::new`] starts nothing: it pairs a kube reflector [`Store`] with the watch stream that
//! fills it, and takes a [`SyncHandle`] that the stream releases when the watch has listed
//! every object once (`InitDone`). So `/ready` waits for exactly the caches a binary made, and
//! nobody polls a `Store`'s own readiness (which wakes only the task that polled it last).
//!
//! The stream fills the store only while it is polled: hand it to the controller
//! (`owns_stream`, `watches_stream`, or `Controller::for_stream` for the kind it reconciles).

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use crate::health::{Readiness, SyncHandle};
use crate::index::LabelIndex;
use crate::key::ObjectKey;

/// How long the API server keeps one watch request open (`timeoutSeconds`) before the cache
/// starts the next. kube's watcher takes a watch that has sent nothing for this long and 5 s more
/// for a dead connection and starts again. At kube's default (290 s) a watch opened on a
/// connection that died unseen while the API server restarted left a controller's cache stale
/// for almost 5 minutes (a replica Ready that no pass heard of); at 55 s it is under a minute,
/// for about one more WATCH request a minute per cache.
pub const WATCH_TIMEOUT_SECONDS: u32 = 55;

/// `config` with [`WATCH_TIMEOUT_SECONDS`] when it names no timeout of its own.
fn bounded(config: watcher::Config) -> watcher::Config {
    match config.timeout {
        Some(_) => config,
        None => config.timeout(WATCH_TIMEOUT_SECONDS),
    }
}

/// The watch events of one kind, already written to a store.
type Events<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// A watch cache of `K`: the store to read, and the stream that fills it.
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    events: Events<K>,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A cache of the objects `api` and `config` select; `readiness` waits until it has listed.
    /// Each watch request lasts [`WATCH_TIMEOUT_SECONDS`] unless `config` says otherwise.
    pub fn new(api: kube::Api<K>, config: watcher::Config, readiness: &Readiness) -> Self {
        Self::keeping(api, config, readiness, keep_whole)
    }

    /// A cache like [`Cache::new`] whose objects keep only what `keep` leaves of them (after
    /// their `managedFields` went): for a kind of which a binary reads a few fields of many
    /// objects, such as the pods and workloads of thousands of nodes, whose pod templates are
    /// most of their size and read by nobody.
    pub fn keeping(
        api: kube::Api<K>,
        config: watcher::Config,
        readiness: &Readiness,
        keep: fn(&mut K),
    ) -> Self {
        let trim = move |object: &mut K| {
            slim(object);
            keep(object);
        };
        Self::of(watch(api, bounded(config)), trim, readiness)
    }

    /// A cache of what `events` says, each object trimmed by `trim` before it is stored.
    fn of(
        events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        trim: impl FnMut(&mut K) + Send + 'static,
        readiness: &Readiness,
    ) -> Self {
        let (store, writer) = reflector::store();
        let mut handle: Option<SyncHandle> = Some(readiness.register());
        let events = events
            .default_backoff()
            .modify(trim)
            .reflect(writer)
            .inspect_ok(move |event| {
                if matches!(event, Event::InitDone)
                    && let Some(handle) = handle.take()
                {
                    handle.synced();
                }
            })
            .boxed();
        Self { store, events }
    }

    /// A reader of the store; clones see the same objects.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The cache with `index` kept in step with its store: every watch event the store takes,
    /// the index takes next (see [`LabelIndex`]).
    pub fn indexed(self, index: LabelIndex) -> Self {
        let events = self
            .events
            .inspect_ok(move |event| index.observe(event))
            .boxed();
        Self {
            store: self.store,
            events,
        }
    }

    /// Every object added, changed or deleted: what wakes the owner of a child.
    pub fn touched(self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.events.touched_objects()
    }

    /// The store, and the objects added or changed, for `Controller::for_stream` over the kind a
    /// binary reconciles. `departed` hears of every object that is gone (deleted, or missing
    /// from a re-list after the watch was down), so state kept per object can be dropped.
    pub fn reconciled(
        self,
        departed: UnboundedSender<ObjectKey>,
    ) -> (
        Store<K>,
        impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    ) {
        let mut departures = Departures::default();
        let events = self.events.inspect_ok(move |event| {
            for key in departures.observe(event) {
                // A closed receiver means the controller is stopping: nothing left to forget.
                let _ = departed.send(key);
            }
        });
        (self.store, events.applied_objects())
    }
}

impl<K> Cache<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A cache of the metadata only of the objects `api` and `config` select (a metadata watch:
    /// the API server sends no object's content), for a kind whose objects a binary reads one
    /// by one and only when they change, such as Secrets. `readiness` waits until it has listed.
    pub fn metadata(
        api: kube::Api<PartialObjectMeta<K>>,
        config: watcher::Config,
        readiness: &Readiness,
    ) -> Self {
        Self::of(watch(api, bounded(config)), slim_metadata, readiness)
    }
}

/// Which objects are gone, from a watch's events. A delete says so directly; a re-list says so by
/// leaving an object out, which is how a delete missed while the watch was down shows.
#[derive(Debug, Default)]
struct Departures {
    known: HashSet<ObjectKey>,
    relisting: Option<HashSet<ObjectKey>>,
}

impl Departures {
    fn observe<K: Resource>(&mut self, event: &Event<K>) -> Vec<ObjectKey> {
        match event {
            Event::Apply(object) => {
                self.known.insert(ObjectKey::of(object));
                Vec::new()
            }
            Event::Delete(object) => {
                let key = ObjectKey::of(object);
                self.known.remove(&key);
                vec![key]
            }
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                if let Some(listed) = &mut self.relisting {
                    listed.insert(ObjectKey::of(object));
                }
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let mut gone: Vec<ObjectKey> = self.known.difference(&listed).cloned().collect();
                gone.sort();
                self.known = listed;
                gone
            }
        }
    }
}

/// Keeps the whole object (but its `managedFields`, see [`slim`]): [`Cache::keeping`] for a
/// kind every field of which may be read.
pub fn keep_whole<K>(_: &mut K) {}

/// What a cached object keeps: everything but its `managedFields`, which no pass reads (applies
/// send objects without them) and which, one entry per field manager, are often the larger
/// part of a small object. Over hundreds of members' pods, workloads, ConfigMaps and volumes
/// that is most of a controller's memory.
fn slim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// What a cached object's metadata keeps: its name, labels, owners and version; not its
/// annotations, which may be large and, for an object applied with `kubectl apply`, hold a copy
/// of the whole object (a Secret's values too), nor its `managedFields`.
fn slim_metadata<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn every_watch_ends_within_a_minute_unless_told_otherwise() {
        let default = bounded(watcher::Config::default());
        assert_eq!(default.timeout, Some(WATCH_TIMEOUT_SECONDS));
        assert_eq!(
            bounded(watcher::Config::default().timeout(10)).timeout,
            Some(10)
        );
        // A watch with nothing to say ends the server's way (at its timeout) before the client's
        // read timeout takes it for a dead connection.
        assert!(
            u64::from(WATCH_TIMEOUT_SECONDS) + 5 < crate::api_requests::READ_TIMEOUT.as_secs(),
            "the read timeout would cut quiet watches"
        );
    }

    #[test]
    fn a_cached_object_keeps_everything_but_its_managed_fields() {
        let mut object = cm("a");
        object.metadata.labels = Some([("app".to_owned(), "valkey".to_owned())].into());
        object.data = Some([("valkey.conf".to_owned(), "port 6379".to_owned())].into());
        let expected = object.clone();
        object.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("valkey-node-controller".into()),
            operation: Some("Apply".into()),
            ..Default::default()
        }]);
        slim(&mut object);
        assert_eq!(object, expected);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    #[test]
    fn deletes_and_objects_missing_from_a_relist_are_gone() {
        let mut d = Departures::default();
        assert!(d.observe(&Event::<ConfigMap>::Init).is_empty());
        for name in ["a", "b", "c"] {
            assert!(d.observe(&Event::InitApply(cm(name))).is_empty());
        }
        assert!(d.observe(&Event::<ConfigMap>::InitDone).is_empty());
        assert_eq!(d.observe(&Event::Delete(cm("a"))), vec![key("a")]);
        assert!(d.observe(&Event::Apply(cm("d"))).is_empty());
        // The watch was down: "c" was deleted meanwhile, and the re-list leaves it out.
        d.observe(&Event::<ConfigMap>::Init);
        d.observe(&Event::InitApply(cm("b")));
        d.observe(&Event::InitApply(cm("d")));
        assert_eq!(d.observe(&Event::<ConfigMap>::InitDone), vec![key("c")]);
        assert_eq!(d.observe(&Event::Delete(cm("b"))), vec![key("b")]);
    }

    #[tokio::test]
    async fn an_index_says_what_the_store_holds_after_every_event() {
        use kube::ResourceExt;
        let labelled = |name: &str, group: &str| {
            let mut object = cm(name);
            object.metadata.labels = Some([("group".to_owned(), group.to_owned())].into());
            object
        };
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(labelled("a", "one"))),
            Ok(Event::InitApply(labelled("b", "one"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(labelled("c", "two"))),
            Ok(Event::Delete(labelled("a", "one"))),
            Ok(Event::Apply(labelled("b", "two"))),
        ]);
        let index = LabelIndex::new("group");
        let cache = Cache::of(events, slim, &Readiness::new(false)).indexed(index.clone());
        let store = cache.store();
        let mut stream = cache.touched();
        while stream.next().await.is_some() {}

        for group in ["one", "two"] {
            let mut in_store: Vec<String> = store
                .state()
                .iter()
                .filter(|o| o.labels().get("group").map(String::as_str) == Some(group))
                .map(|o| o.name_any())
                .collect();
            in_store.sort();
            assert_eq!(index.names("ns", group), in_store, "group {group}");
        }
        assert_eq!(index.names("ns", "two"), vec!["b", "c"]);
    }
}
