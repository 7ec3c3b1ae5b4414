//! What can go wrong when reading a Valkey reply.

use thiserror::Error;

/// A Valkey reply that could not be understood. Each variant names the reply and the part of it
/// that was wrong, so a log line says what Valkey sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("CLUSTER NODES line {line}: missing field {field}")]
    NodesMissingField { line: usize, field: &'static str },
    #[error("CLUSTER NODES line {line}: bad {field} `{value}`")]
    NodesBadField {
        line: usize,
        field: &'static str,
        value: String,
    },
    #[error("CLUSTER NODES: no line is flagged `myself`")]
    NodesNoMyself,
    #[error("{reply}: bad value `{value}` for `{key}`")]
    BadValue {
        reply: &'static str,
        key: String,
        value: String,
    },
    #[error("{reply}: missing `{key}`")]
    Missing { reply: &'static str, key: String },
    #[error("{reply}: expected {expected}, got {got}")]
    Shape {
        reply: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("bad version `{0}`")]
    BadVersion(String),
}
