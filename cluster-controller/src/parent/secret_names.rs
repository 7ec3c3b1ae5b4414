//! The names of the Secrets the operator makes for a parent: in one module, since the Secrets'
//! watch ([`super::secret_cache`]), the users' stage ([`super::auth`]) and TLS ([`super::tls`])
//! all name them.

/// The ACL file and the replication login the pods mount.
pub fn acl_secret_name(parent: &str) -> String {
    format!("{parent}-acl")
}

/// The operator's own logins.
pub fn operator_secret_name(parent: &str) -> String {
    format!("{parent}-operator")
}

/// The clients' password the operator generates when the spec names none.
pub fn generated_password_secret_name(parent: &str) -> String {
    format!("{parent}-password")
}

/// The operator's server certificate for the parent `parent`.
pub fn certificate_secret_name(parent: &str) -> String {
    format!("{parent}-tls")
}

/// The CA the operator generated for the parent `parent`.
pub fn ca_secret_name(parent: &str) -> String {
    format!("{parent}-tls-ca")
}
