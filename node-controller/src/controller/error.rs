//! What can end a pass of the ValkeyNode controller early. A spec the build refuses and an
//! apply the API refuses as invalid are not errors: they become the node's status.

use plumbing::ReconcileError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("reading Secret {name}: {source}")]
    Secret { name: String, source: kube::Error },
    #[error("writing the status: {0}")]
    Status(#[source] plumbing::apply::ApplyError),
    #[error("labelling pod {name} with its role: {source}")]
    Label { name: String, source: kube::Error },
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Secret { .. } => "secret",
            Error::Status(_) => "status",
            Error::Label { .. } => "label",
        }
    }
}
