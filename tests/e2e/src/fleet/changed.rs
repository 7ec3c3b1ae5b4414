//! What the writes in a window changed: the objects whose resourceVersion moved between two
//! snapshots of a watch cache, and for a few of them which status fields moved and how. A
//! controller's request counter says it wrote; this says whether the writes changed anything
//! (a write of what the server already holds moves no resourceVersion) and what, which tells
//! churn (a field flipping between values) from a tail of work still being caught up on.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;

/// How many changed objects are described.
const SAMPLE: usize = 3;
/// The longest value quoted in a description.
const QUOTE: usize = 160;

/// One object as a snapshot keeps it: its resourceVersion and its status.
#[derive(Clone, Debug)]
pub struct Kept {
    version: String,
    status: Value,
}

/// A snapshot of objects by name.
pub type Snapshot = BTreeMap<String, Kept>;

/// The objects of `objects` as they are now.
pub fn snapshot<K>(objects: &[Arc<K>]) -> Snapshot
where
    K: Resource + serde::Serialize,
{
    objects
        .iter()
        .map(|o| {
            let status = serde_json::to_value(o.as_ref())
                .ok()
                .and_then(|v| v.get("status").cloned())
                .unwrap_or(Value::Null);
            (
                o.name_any(),
                Kept {
                    version: o.resource_version().unwrap_or_default(),
                    status,
                },
            )
        })
        .collect()
}

/// What changed between two snapshots.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Changed {
    /// Objects whose resourceVersion moved (created and deleted ones included).
    pub objects: usize,
    /// For the first few of them: `name: field: before → after`, one line per status field
    /// that moved (a condition by its type).
    pub sample: Vec<String>,
}

pub fn between(before: &Snapshot, after: &Snapshot) -> Changed {
    let mut changed = Changed::default();
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        let (was, is) = (before.get(name), after.get(name));
        if was.map(|k| &k.version) == is.map(|k| &k.version) {
            continue;
        }
        changed.objects += 1;
        if changed.objects > SAMPLE {
            continue;
        }
        let null = Value::Null;
        let (was, is) = (
            was.map_or(&null, |k| &k.status),
            is.map_or(&null, |k| &k.status),
        );
        let moved = fields(was, is);
        if moved.is_empty() {
            changed
                .sample
                .push(format!("{name}: metadata or spec only"));
        }
        for (field, from, to) in moved {
            changed.sample.push(format!(
                "{name}: {field}: {} → {}",
                quote(&from),
                quote(&to)
            ));
        }
    }
    changed
}

/// The status fields that differ, conditions compared one type at a time.
fn fields(was: &Value, is: &Value) -> Vec<(String, Value, Value)> {
    let keys: std::collections::BTreeSet<&String> = [was, is]
        .iter()
        .filter_map(|v| v.as_object())
        .flat_map(|o| o.keys())
        .collect();
    let mut moved = Vec::new();
    for key in keys {
        let (a, b) = (&was[key.as_str()], &is[key.as_str()]);
        if a == b {
            continue;
        }
        if key == "conditions" {
            let (a, b) = (by_type(a), by_type(b));
            let types: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for t in types {
                let (x, y) = (a.get(t), b.get(t));
                if x != y {
                    moved.push((
                        format!("condition {t}"),
                        x.cloned().unwrap_or(Value::Null),
                        y.cloned().unwrap_or(Value::Null),
                    ));
                }
            }
        } else {
            moved.push((key.clone(), a.clone(), b.clone()));
        }
    }
    moved
}

fn by_type(conditions: &Value) -> BTreeMap<String, Value> {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c.get("type")?.as_str()?.to_owned(), c.clone())))
        .collect()
}

fn quote(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(QUOTE) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    fn config_map(name: &str, version: &str) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "resourceVersion": version},
            }))
            .unwrap_or_default(),
        )
    }

    fn kept(version: &str, status: Value) -> Kept {
        Kept {
            version: version.into(),
            status,
        }
    }

    #[test]
    fn only_objects_whose_version_moved_count_and_a_flipping_condition_is_named() {
        let ready = |message: &str| {
            json!({"ready": false, "conditions": [
                {"type": "Ready", "status": "False", "reason": "ValkeyNotResponding", "message": message},
                {"type": "WorkloadReady", "status": "True", "reason": "Ready", "message": ""},
            ]})
        };
        let before: Snapshot = [
            ("a".to_owned(), kept("1", ready("timed out"))),
            ("b".to_owned(), kept("2", ready("timed out"))),
        ]
        .into();
        let after: Snapshot = [
            ("a".to_owned(), kept("5", ready("refused"))),
            ("b".to_owned(), kept("2", ready("timed out"))),
        ]
        .into();
        let changed = between(&before, &after);
        assert_eq!(changed.objects, 1);
        assert_eq!(changed.sample.len(), 1, "{:?}", changed.sample);
        assert!(
            changed.sample[0].starts_with("a: condition Ready: ")
                && changed.sample[0].contains("timed out")
                && changed.sample[0].contains("refused"),
            "{:?}",
            changed.sample
        );
    }

    #[test]
    fn a_new_version_with_the_same_status_says_so_and_the_sample_is_bounded() {
        let before: Snapshot = (0..5)
            .map(|i| (format!("n{i}"), kept("1", json!({"ready": true}))))
            .collect();
        let after: Snapshot = (0..5)
            .map(|i| (format!("n{i}"), kept("2", json!({"ready": true}))))
            .collect();
        let changed = between(&before, &after);
        assert_eq!(changed.objects, 5);
        assert_eq!(changed.sample.len(), SAMPLE);
        assert_eq!(changed.sample[0], "n0: metadata or spec only");
    }

    #[test]
    fn a_snapshot_keeps_each_objects_version() {
        // A ConfigMap has no status: kept as null.
        let snap = snapshot(&[config_map("x", "7")]);
        assert_eq!(snap.get("x").map(|k| k.version.as_str()), Some("7"));
        assert_eq!(snap.get("x").map(|k| &k.status), Some(&Value::Null));
    }
}
