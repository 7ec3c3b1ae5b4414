//! Watches the pods bound to our nodes and keeps one worker per pod.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::worker::Worker;
use super::{Ctx, Msg};

struct Handle {
    tx: mpsc::UnboundedSender<Msg>,
    task: JoinHandle<()>,
}

pub struct Manager {
    ctx: Arc<Ctx>,
    workers: BTreeMap<String, Handle>,
}

fn uid(pod: &Pod) -> Option<String> {
    pod.metadata.uid.clone()
}

impl Manager {
    pub fn new(ctx: Arc<Ctx>) -> Self {
        Self {
            ctx,
            workers: BTreeMap::new(),
        }
    }

    fn node_of(&self, pod: &Pod) -> Option<crate::config::NodeInfo> {
        let node = pod.spec.as_ref()?.node_name.as_deref()?;
        self.ctx.settings.node(node).cloned()
    }

    fn apply(&mut self, pod: Pod) {
        let Some(uid) = uid(&pod) else { return };
        self.workers.retain(|_, h| !h.task.is_finished());
        if let Some(h) = self.workers.get(&uid) {
            let _ = h.tx.send(Msg::Pod(Box::new(pod)));
            return;
        }
        let Some(node) = self.node_of(&pod) else {
            return;
        };
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminal && pod.metadata.deletion_timestamp.is_none() {
            // A finished pod needs nothing until it is deleted.
            return;
        }
        tracing::info!(
            pod = %format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref().unwrap_or_default()),
            node = %node.name,
            "new pod"
        );
        let (worker, tx) = Worker::new(self.ctx.clone(), pod, node);
        let task = tokio::spawn(worker.run());
        self.workers.insert(uid, Handle { tx, task });
    }

    fn gone(&mut self, uid: &str) {
        if let Some(h) = self.workers.get(uid) {
            let _ = h.tx.send(Msg::Gone);
        }
    }

    /// Removes pod directories no current pod owns (pods deleted while the kubelet was down).
    fn remove_stale_dirs(&self, live: &BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(self.ctx.settings.pods_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Runs until shutdown, then stops every worker.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let api: Api<Pod> = Api::all(self.ctx.client.clone());
        let config = watcher::Config::default().fields("spec.nodeName!=");
        let stream = watcher(api, config);
        let mut stream = std::pin::pin!(stream);
        let mut seen_in_init: BTreeSet<String> = BTreeSet::new();
        let mut first_sync = true;
        loop {
            let event = tokio::select! {
                _ = shutdown.changed() => break,
                ev = stream.next() => ev,
            };
            match event {
                Some(Ok(watcher::Event::Init)) => seen_in_init.clear(),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let Some(uid) = uid(&pod)
                        && self.node_of(&pod).is_some()
                    {
                        seen_in_init.insert(uid);
                    }
                    self.apply(pod);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let stale: Vec<String> = self
                        .workers
                        .keys()
                        .filter(|u| !seen_in_init.contains(*u))
                        .cloned()
                        .collect();
                    for uid in stale {
                        self.gone(&uid);
                    }
                    if first_sync {
                        self.remove_stale_dirs(&seen_in_init);
                        first_sync = false;
                    }
                }
                Some(Ok(watcher::Event::Apply(pod))) => {
                    let on_our_node = self.node_of(&pod).is_some();
                    match uid(&pod) {
                        Some(uid) if !on_our_node => self.gone(&uid),
                        _ => self.apply(pod),
                    }
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = uid(&pod) {
                        self.gone(&uid);
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "pod watch");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => break,
            }
        }
        self.stop().await;
    }

    async fn stop(self) {
        for h in self.workers.values() {
            let _ = h.tx.send(Msg::Shutdown);
        }
        // Workers stop in parallel; the whole kubelet must be gone within 30 s.
        let tasks = self.workers.into_values().map(|h| h.task);
        if tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(tasks))
            .await
            .is_err()
        {
            tracing::warn!("some pod workers did not stop in time");
        }
    }
}
