//! What `ACL GETUSER` says of a user, as far as the operator reads it: whether it may log in.
//! The reply also holds password hashes, which go nowhere.

use redis::Value;

use super::value;

/// Whether an `ACL GETUSER` reply's flags say `on` (RESP2 list or RESP3 map). Only the flags are
/// read.
pub fn user_enabled(reply: &Value) -> Option<bool> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((c.first()?, c.get(1)?)))
            .collect(),
        Value::Map(entries) => entries.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    let (_, flags) = pairs
        .into_iter()
        .find(|(k, _)| value::text(k).as_deref() == Some("flags"))?;
    let flags: Vec<String> = match flags {
        Value::Array(items) | Value::Set(items) => items.iter().filter_map(value::text).collect(),
        _ => return None,
    };
    Some(flags.iter().any(|f| f == "on"))
}
