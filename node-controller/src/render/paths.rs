//! Where the pod sees its volumes: the server's container and the restore's init container both
//! mount them.

pub const CONFIG_DIR: &str = "/etc/valkey/config";
pub use valkey_api::contract::CREDENTIALS_DIR;
pub const DATA_DIR: &str = "/data";
