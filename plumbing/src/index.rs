//! A watch cache's objects grouped by one label's value: the names of the objects that carry
//! `label=value` in a namespace, found without a look at any other object.
//!
//! kube's reflector [`Store`](kube::runtime::reflector::Store) finds an object by name; anything
//! else is a scan of every object it holds. A pass that scans the whole cache to find its own
//! few objects costs time in proportion to the fleet, so passes over every object cost its
//! square: at 3,000 ValkeyNodes the node-controller spent more than half its CPU comparing the
//! label of every pod with the one node's name, twice a pass. The index follows the same watch
//! events as the store, in the same order (a re-list is collected aside and replaces the groups
//! at once when it is complete, as the store does), so both say the same.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use kube::Resource;
use kube::runtime::watcher::Event;

/// (namespace, label value) → the names of the objects in that group.
type Groups = HashMap<(String, String), BTreeSet<String>>;

#[derive(Debug, Default)]
struct Grouping {
    groups: Groups,
    /// (namespace, name) → the value it is grouped under: to move or drop it on a change.
    placed: HashMap<(String, String), String>,
}

impl Grouping {
    fn insert(&mut self, namespace: String, name: String, value: Option<String>) {
        let key = (namespace, name);
        if let Some(old) = self.placed.remove(&key) {
            self.remove_from_group(&key, old);
        }
        if let Some(value) = value {
            self.groups
                .entry((key.0.clone(), value.clone()))
                .or_default()
                .insert(key.1.clone());
            self.placed.insert(key, value);
        }
    }

    fn remove(&mut self, namespace: String, name: String) {
        let key = (namespace, name);
        if let Some(old) = self.placed.remove(&key) {
            self.remove_from_group(&key, old);
        }
    }

    fn remove_from_group(&mut self, (namespace, name): &(String, String), value: String) {
        let group = (namespace.clone(), value);
        if let Some(names) = self.groups.get_mut(&group) {
            names.remove(name);
            if names.is_empty() {
                self.groups.remove(&group);
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    live: Grouping,
    /// A re-list being collected: replaces `live` at its end.
    relisting: Option<Grouping>,
}

/// The names of a cache's objects by the value of `label`. Cheap to clone; clones share it.
#[derive(Clone, Debug)]
pub struct LabelIndex {
    label: &'static str,
    state: Arc<RwLock<State>>,
}

impl LabelIndex {
    pub fn new(label: &'static str) -> Self {
        Self {
            label,
            state: Arc::default(),
        }
    }

    /// The names of the objects in `namespace` labelled `label=value`, in name order.
    pub fn names(&self, namespace: &str, value: &str) -> Vec<String> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state
            .live
            .groups
            .get(&(namespace.to_owned(), value.to_owned()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Follows one watch event (the cache calls it for every event, after its store did).
    pub fn observe<K: Resource>(&self, event: &Event<K>) {
        let identity = |object: &K| {
            let meta = object.meta();
            let value = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(self.label))
                .cloned();
            (
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
                value,
            )
        };
        // The map holds no invariant a panicking holder could break half-way that a later
        // event would not set right.
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(object) => {
                let (namespace, name, value) = identity(object);
                state.live.insert(namespace, name, value);
            }
            Event::Delete(object) => {
                let (namespace, name, _) = identity(object);
                state.live.remove(namespace, name);
            }
            Event::Init => state.relisting = Some(Grouping::default()),
            Event::InitApply(object) => {
                let (namespace, name, value) = identity(object);
                state
                    .relisting
                    .get_or_insert_with(Grouping::default)
                    .insert(namespace, name, value);
            }
            Event::InitDone => {
                let listed = state.relisting.take().unwrap_or_default();
                state.live = listed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    const LABEL: &str = "valkey.io/node";

    fn pod(namespace: &str, name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                labels: node.map(|n| [(LABEL.to_owned(), n.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn objects_are_found_by_namespace_and_label_value() {
        let index = LabelIndex::new(LABEL);
        index.observe(&Event::Apply(pod("a", "n1-0", Some("n1"))));
        index.observe(&Event::Apply(pod("a", "n1-x", Some("n1"))));
        index.observe(&Event::Apply(pod("a", "n2-0", Some("n2"))));
        index.observe(&Event::Apply(pod("b", "n1-0", Some("n1"))));
        index.observe(&Event::Apply(pod("a", "stray", None)));

        assert_eq!(index.names("a", "n1"), vec!["n1-0", "n1-x"]);
        assert_eq!(index.names("a", "n2"), vec!["n2-0"]);
        assert_eq!(index.names("b", "n1"), vec!["n1-0"]);
        assert!(index.names("a", "n3").is_empty());
        assert!(index.names("c", "n1").is_empty());
    }

    #[test]
    fn a_changed_label_moves_the_object_and_a_delete_drops_it() {
        let index = LabelIndex::new(LABEL);
        index.observe(&Event::Apply(pod("a", "p", Some("n1"))));
        index.observe(&Event::Apply(pod("a", "p", Some("n2"))));
        assert!(index.names("a", "n1").is_empty());
        assert_eq!(index.names("a", "n2"), vec!["p"]);

        index.observe(&Event::Apply(pod("a", "p", None)));
        assert!(index.names("a", "n2").is_empty());

        index.observe(&Event::Apply(pod("a", "p", Some("n1"))));
        index.observe(&Event::Delete(pod("a", "p", Some("n1"))));
        assert!(index.names("a", "n1").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_groups_when_it_is_complete() {
        let index = LabelIndex::new(LABEL);
        index.observe(&Event::Apply(pod("a", "gone", Some("n1"))));
        index.observe(&Event::Apply(pod("a", "kept", Some("n1"))));

        index.observe(&Event::<Pod>::Init);
        index.observe(&Event::InitApply(pod("a", "kept", Some("n1"))));
        // Until the re-list is complete the index says what it said before, as the store does.
        assert_eq!(index.names("a", "n1"), vec!["gone", "kept"]);

        index.observe(&Event::<Pod>::InitDone);
        // What the re-list left out was deleted while the watch was down.
        assert_eq!(index.names("a", "n1"), vec!["kept"]);
    }
}
