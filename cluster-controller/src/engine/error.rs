//! What can go wrong executing an action.

use thiserror::Error;

use crate::client::ClientError;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A reply that is not what the command returns.
    #[error("{command}: unexpected reply: {reply}")]
    UnexpectedReply { command: String, reply: String },
    /// A reply that could not be parsed.
    #[error("{context}: {source}")]
    Parse {
        context: String,
        source: crate::valkey::ParseError,
    },
    /// An action names a node that is not one of its participants.
    #[error("slot {slot}: the migration step names node {node}, which takes no part in it")]
    UnknownParticipant { slot: u16, node: String },
    /// The action is for the Kubernetes side.
    #[error("{0} is a Kubernetes action; the engine does not carry it out")]
    NotValkey(String),
}
