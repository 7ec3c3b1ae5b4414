//! Who the engine connects as. The password is wrapped so that no `Debug` or `Display` of
//! anything holding it can print it.

use std::fmt;

/// A secret string. `Debug` prints `***`; the value is only reachable through
/// [`Secret::expose`], which call sites use to hand it to the server.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

/// The user the operator authenticates as: an ACL user with a password, the default user with
/// a password, or no authentication at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    pub username: Option<String>,
    pub password: Option<Secret>,
}

impl Credentials {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn user(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: Some(username.into()),
            password: Some(Secret::new(password)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let credentials = Credentials::user("operator", "hunter2");
        let text = format!("{credentials:?}");
        assert!(text.contains("operator"));
        assert!(!text.contains("hunter2"), "{text}");
    }
}
