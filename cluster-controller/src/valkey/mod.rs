//! Valkey's vocabulary, the bottom layer: hash slots and slot sets ([`slots`]), every command
//! the operator sends ([`commands`]), and parsers for Valkey's replies. No I/O: a command is
//! built here and sent by a client; the text or `redis::Value` a client received goes in, typed
//! data comes out, and malformed input is a [`ParseError`], never a panic. Imports nothing of
//! this crate.

pub mod acl;
pub mod cluster_info;
pub mod cluster_nodes;
pub mod cluster_shards;
pub mod commands;
mod error;
pub mod info;
mod kv;
pub mod slot_migrations;
pub mod slots;
pub mod value;
pub mod version;

pub use error::ParseError;
pub use version::{Version, supports_atomic_slot_migration};
