//! Kubernetes Events with one call, reported as the controller.
//!
//! Events are public to anyone who may read Events in the namespace: **never put secret values
//! (passwords, tokens, keys, connection strings with credentials) in a reason or a note.** Name
//! the Secret instead.
//!
//! RBAC: `events.k8s.io` `events` with verbs `create` and `patch` (kube's recorder patches a
//! repeated event into a series instead of creating a new one).
//!
//! Publishing is best effort: an Event the API refuses is logged here and never fails the caller,
//! because an Event records what was done and the doing must not depend on it.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::time::Instant;

/// The API server rejects an event note larger than this many bytes.
pub const MAX_NOTE_BYTES: usize = 1024;
/// The API server rejects a reason or an action longer than this many bytes.
pub const MAX_REASON_BYTES: usize = 128;

/// How long kube's recorder keeps an event it published, to fold a repeat of it into a series
/// (its `CACHE_TTL`).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How long a publisher stays idle before what its recorder keeps is let go of. Shorter than
/// [`SERIES_WINDOW`]: a fleet's formation leaves thousands of events kept (3 MiB of each
/// controller's heap over 100 clusters) that a quiet fleet would hold for six minutes. What it
/// costs: an event repeated after a quiet minute starts a new Event instead of counting in the
/// old one's series; a repeat within the minute, or while anything else is published, still does.
pub const IDLE_WINDOW: Duration = Duration::from_secs(60);

/// Publishes Events with the controller's name as reporter. Cheap to clone; share one per binary
/// so repeated events are folded into series.
#[derive(Clone)]
pub struct EventPublisher {
    shared: Arc<Shared>,
}

struct Shared {
    client: kube::Client,
    reporter: Reporter,
    /// The recorder, and when it last published. kube's recorder keeps every event it published
    /// and lets go of those older than [`SERIES_WINDOW`] only when it publishes again: after a
    /// burst (a fleet created at once, thousands of Events) a controller at rest kept them all
    /// for ever. So once it has published nothing for a whole [`IDLE_WINDOW`], it is replaced by
    /// an empty one ([`forget_when_idle`]).
    recorder: Mutex<(Recorder, Instant)>,
    /// How many times the recorder was replaced (for tests).
    renewals: std::sync::atomic::AtomicU64,
}

impl EventPublisher {
    /// `controller`: the reporting controller, e.g. `valkey.io/node-controller`.
    /// `instance`: this replica, e.g. the pod name (the hostname when `None`). Within a Tokio
    /// runtime, a task lets go of the events kept once the publisher is idle (see [`Shared`]).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self::with_window(client, controller, instance, IDLE_WINDOW)
    }

    /// [`EventPublisher::new`] with another idle window than [`IDLE_WINDOW`] (for tests).
    pub fn with_window(
        client: kube::Client,
        controller: &str,
        instance: Option<String>,
        window: Duration,
    ) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance,
        };
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let shared = Arc::new(Shared {
            client,
            reporter,
            recorder: Mutex::new((recorder, Instant::now())),
            renewals: Default::default(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(forget_when_idle(Arc::downgrade(&shared), window));
        }
        Self { shared }
    }

    /// How many times the kept events were let go of after a whole window idle.
    #[cfg(test)]
    fn renewals(&self) -> u64 {
        self.shared
            .renewals
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The recorder to publish with, marked as used now.
    fn recorder(&self) -> Recorder {
        let mut kept = self
            .shared
            .recorder
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        kept.1 = Instant::now();
        kept.0.clone()
    }

    /// A `Normal` event about `object`. `reason` is CamelCase (`CreatedWorkload`), `action` names
    /// what was done (`Apply`), `note` is a sentence for a person. **No secret values.**
    pub async fn normal<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            None,
            EventType::Normal,
            reason,
            action,
            note,
        )
        .await
    }

    /// A `Warning` event about `object`; same rules as [`EventPublisher::normal`].
    pub async fn warning<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            None,
            EventType::Warning,
            reason,
            action,
            note,
        )
        .await
    }

    /// A `Normal` event about `object` that concerns `related` too (a child, a member). The
    /// related object also keeps events with the same reason about different children apart:
    /// the API folds events with the same reason, action and objects into one series.
    pub async fn normal_related<K>(
        &self,
        object: &K,
        related: ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            Some(related),
            EventType::Normal,
            reason,
            action,
            note,
        )
        .await
    }

    /// An event about any referenced object, with an optional related one. Over-long fields are
    /// truncated to what the API accepts rather than rejected. **No secret values.**
    pub async fn publish(
        &self,
        reference: &ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: truncate(reason, MAX_REASON_BYTES).to_owned(),
            action: truncate(action, MAX_REASON_BYTES).to_owned(),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_owned()).filter(|n| !n.is_empty()),
            secondary: related,
        };
        if let Err(error) = self.recorder().publish(&event, reference).await {
            tracing::debug!(
                %error,
                reason = %event.reason,
                object = %describe(reference),
                "could not publish an event"
            );
        }
    }
}

/// Four times a `window`, replaces the recorder of a publisher that published nothing in the
/// whole window by an empty one (so at most a quarter window late); ends when the publisher is
/// dropped.
async fn forget_when_idle(shared: Weak<Shared>, window: Duration) {
    loop {
        tokio::time::sleep(window / 4).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut kept = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
        if idle_for(kept.1, Instant::now(), window) {
            let fresh = Recorder::new(shared.client.clone(), shared.reporter.clone());
            *kept = (fresh, Instant::now());
            shared
                .renewals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Whether a publisher that last published at `last` has been idle for a whole `window` at
/// `now`: only then has every event it keeps expired.
fn idle_for(last: Instant, now: Instant, window: Duration) -> bool {
    now.saturating_duration_since(last) >= window
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character boundary.
pub fn truncate(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn describe(reference: &ObjectReference) -> String {
    format!(
        "{}/{}/{}",
        reference.kind.as_deref().unwrap_or("?"),
        reference.namespace.as_deref().unwrap_or(""),
        reference.name.as_deref().unwrap_or("?")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept() {
        assert_eq!(
            truncate("Created StatefulSet valkey-a.", MAX_NOTE_BYTES),
            "Created StatefulSet valkey-a."
        );
        assert_eq!(truncate("", 3), "");
    }

    #[test]
    fn long_text_is_cut_at_a_char_boundary() {
        let ascii = "x".repeat(2000);
        assert_eq!(truncate(&ascii, MAX_NOTE_BYTES).len(), MAX_NOTE_BYTES);
        // "é" is two bytes; cutting at an odd byte count must not split it.
        let accented = "é".repeat(100);
        let cut = truncate(&accented, 5);
        assert_eq!(cut, "éé");
        assert!(cut.len() <= 5);
    }

    #[test]
    fn only_a_whole_window_without_an_event_lets_the_kept_events_go() {
        let last = Instant::now();
        let at = |seconds| last + Duration::from_secs(seconds);
        assert!(!idle_for(last, at(30), IDLE_WINDOW));
        assert!(!idle_for(last, at(59), IDLE_WINDOW));
        assert!(idle_for(last, at(60), IDLE_WINDOW));
        // A clock read before the last publish is no idle time at all.
        assert!(!idle_for(at(10), last, IDLE_WINDOW));
    }

    /// Once the publisher was idle for a whole window, the kept events are let go of: the same
    /// event is created anew, where kube's recorder would have folded it into the first one's
    /// series (its own expiry, six minutes, never comes into this test). The let-go comes no
    /// later than a quarter window after the window.
    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn kept_events_are_let_go_of_after_a_whole_window_idle() {
        use http::Method;
        const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";
        let (client, mut api) = crate::testing::mock_client();
        let window = Duration::from_secs(2);
        let publisher = EventPublisher::with_window(client, "test-controller", None, window);
        let object = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some("ns".into()),
            name: Some("m".into()),
            ..Default::default()
        };
        let publish = |publisher: EventPublisher, object: ObjectReference| async move {
            let note = "Configured the map.";
            let p = &publisher;
            p.publish(
                &object,
                None,
                EventType::Normal,
                "Configured",
                "Apply",
                note,
            )
            .await;
        };
        // Published just after the publisher's first look at whether it is idle: the worst
        // moment for a publisher that looks once a window.
        tokio::time::sleep(window + Duration::from_millis(50)).await;
        // Read before the publish marks the publisher used: the let-go must come a whole window
        // after that mark, and so after this instant too.
        let publishing = tokio::time::Instant::now();
        let sent = tokio::spawn(publish(publisher.clone(), object.clone()));
        api.expect(Method::POST, EVENTS).await.echo();
        sent.await.unwrap_or_else(|e| panic!("{e}"));
        let renewed_before = publisher.renewals();
        // A quarter window late at most, and half a window's leeway for a loaded machine.
        let deadline = publishing + window * 7 / 4;
        while publisher.renewals() == renewed_before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not let go of within {:?} of the last event",
                window * 7 / 4
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            publishing.elapsed() >= window,
            "let go of before a whole window idle"
        );
        let sent = tokio::spawn(publish(publisher.clone(), object.clone()));
        api.expect(Method::POST, EVENTS).await.echo();
        sent.await.unwrap_or_else(|e| panic!("{e}"));
        api.done().await;
    }

    #[test]
    fn describe_names_the_object() {
        let reference = ObjectReference {
            kind: Some("ValkeyNode".into()),
            namespace: Some("ns".into()),
            name: Some("a".into()),
            ..Default::default()
        };
        assert_eq!(describe(&reference), "ValkeyNode/ns/a");
    }
}
