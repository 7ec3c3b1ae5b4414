//! Why a node's children could not be built.

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("the ValkeyNode has no {0}")]
    MissingMetadata(&'static str),
    #[error("spec.config: {0}")]
    InvalidConfig(String),
    #[error("rendering {template}: {message}")]
    Template {
        template: &'static str,
        message: String,
    },
    #[error("the rendered {template} is not a valid object: {message}")]
    Parse {
        template: &'static str,
        message: String,
    },
}

impl RenderError {
    /// A CamelCase reason for conditions and metrics.
    pub fn reason(&self) -> valkey_api::v1alpha1::StatusReason {
        use valkey_api::v1alpha1::StatusReason;
        match self {
            RenderError::InvalidConfig(_) => StatusReason::InvalidConfig,
            RenderError::MissingMetadata(_) => StatusReason::InvalidObject,
            RenderError::Template { .. } | RenderError::Parse { .. } => StatusReason::RenderFailed,
        }
    }
}
