//! What can end a pass of any parent kind's controller early. A user's mistake (a missing
//! Secret) is not an error: it becomes the parent's status. These are the API failing, or an
//! object the API should never have handed out.

use plumbing::ReconcileError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("writing the status: {0}")]
    Status(#[source] plumbing::apply::ApplyError),
    #[error("{0}")]
    Invalid(String),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
            Error::Status(_) => "status",
            Error::Invalid(_) => "invalid",
        }
    }
}

/// Wraps an API error with what was being done.
pub fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}
