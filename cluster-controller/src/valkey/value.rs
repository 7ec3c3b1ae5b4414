//! Reading the `redis` crate's `Value` the same way whether the server answered in RESP2
//! (flat arrays, bulk strings) or RESP3 (maps, verbatim strings).

use redis::Value;

use super::ParseError;

/// The text of a string-like reply.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// An integer reply, or a string holding one (RESP2 servers send some numbers as strings).
pub fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.trim().parse().ok(),
    }
}

/// The elements of an array or set reply.
pub fn list(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(items) | Value::Set(items) => Some(items),
        Value::Attribute { data, .. } => list(data),
        _ => None,
    }
}

/// The key/value pairs of a map reply (RESP3) or of a flat `[k1, v1, k2, v2, ...]` array
/// (RESP2), with the keys as text.
pub fn pairs(value: &Value) -> Option<Vec<(String, &Value)>> {
    match value {
        Value::Map(entries) => entries.iter().map(|(k, v)| Some((text(k)?, v))).collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks_exact(2)
            .map(|kv| Some((text(&kv[0])?, &kv[1])))
            .collect(),
        Value::Attribute { data, .. } => pairs(data),
        _ => None,
    }
}

/// A short description of a value for error messages (never the whole reply).
pub fn describe(value: &Value) -> String {
    let mut text = format!("{value:?}");
    if text.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Looks `key` up in `fields`.
pub fn field<'a>(
    reply: &'static str,
    fields: &[(String, &'a Value)],
    key: &str,
) -> Result<&'a Value, ParseError> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| ParseError::Missing {
            reply,
            key: key.to_owned(),
        })
}

/// The text of `key` in `fields`, `None` when absent.
pub fn opt_text(
    reply: &'static str,
    fields: &[(String, &Value)],
    key: &str,
) -> Result<Option<String>, ParseError> {
    match fields.iter().find(|(k, _)| k == key) {
        None | Some((_, Value::Nil)) => Ok(None),
        Some((_, v)) => text(v).map(Some).ok_or_else(|| bad(reply, key, v)),
    }
}

/// The integer of `key` in `fields`, `None` when absent.
pub fn opt_int(
    reply: &'static str,
    fields: &[(String, &Value)],
    key: &str,
) -> Result<Option<i64>, ParseError> {
    match fields.iter().find(|(k, _)| k == key) {
        None | Some((_, Value::Nil)) => Ok(None),
        Some((_, v)) => int(v).map(Some).ok_or_else(|| bad(reply, key, v)),
    }
}

pub fn bad(reply: &'static str, key: &str, value: &Value) -> ParseError {
    ParseError::BadValue {
        reply,
        key: key.to_owned(),
        value: describe(value),
    }
}

pub fn shape(reply: &'static str, expected: &'static str, value: &Value) -> ParseError {
    ParseError::Shape {
        reply,
        expected,
        got: describe(value),
    }
}
