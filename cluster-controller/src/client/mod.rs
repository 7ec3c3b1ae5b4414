//! Talking to Valkey: one small trait the engine is written against, and its implementation
//! with the `redis` crate.
//!
//! The engine never holds a connection itself; it names an address and a command, and the
//! client decides how to reach it (a cached connection, a reconnect after an error, a test
//! double in unit tests).

mod credentials;
mod error;
mod redis_client;
mod valkey_client;

pub use credentials::{Credentials, Secret};
pub use error::ClientError;
pub use redis_client::{RedisClient, RedisClientConfig};
pub use valkey_client::{ValkeyClient, command_label};
