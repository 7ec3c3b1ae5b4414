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

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The API server rejects an event note larger than this many bytes.
pub const MAX_NOTE_BYTES: usize = 1024;
/// The API server rejects a reason or an action longer than this many bytes.
pub const MAX_REASON_BYTES: usize = 128;

/// Publishes Events with the controller's name as reporter. Cheap to clone; share one per binary
/// so repeated events are folded into series.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

impl EventPublisher {
    /// `controller`: the reporting controller, e.g. `valkey.io/node-controller`.
    /// `instance`: this replica, e.g. the pod name (the hostname when `None`).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
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
        if let Err(error) = self.recorder.publish(&event, reference).await {
            tracing::debug!(
                %error,
                reason = %event.reason,
                object = %describe(reference),
                "could not publish an event"
            );
        }
    }
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
