//! A watch cache of some objects, for waiting on conditions over thousands of them: the test
//! reads its own copy as often as it likes, and the API server sends each change once, instead
//! of answering a full list at every poll (which would load the very server whose load from
//! the controllers is being measured).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::{E2eError, Result};

/// The objects of an `Api` as the watch last delivered them; the watch stops when dropped.
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Watched<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + std::hash::Hash + Eq + Clone + Send + Sync,
{
    /// Lists and starts watching; returns once the first list is in.
    pub async fn start(api: Api<K>) -> Result<Self> {
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .touched_objects();
        let task = tokio::spawn(stream.for_each(|_| std::future::ready(())));
        let watched = Self { store, task };
        tokio::time::timeout(Duration::from_secs(60), watched.store.wait_until_ready())
            .await
            .map_err(|_| E2eError::Check("a watch listed nothing within 60 s".into()))?
            .map_err(|e| E2eError::Check(format!("a watch stopped before its list: {e}")))?;
        Ok(watched)
    }

    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }
}

impl<K: Resource + 'static> Drop for Watched<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}
