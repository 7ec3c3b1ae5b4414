//! Backups of Valkey servers, without Kubernetes: what a backup of one shard is made of.
//!
//! - [`capture`]: the RDB a server hands a replica, read over a replication link
//!   (`REPLCONF rdb-only 1`, `PSYNC ? -1`) by a user that may do nothing else, and streamed into
//!   an object as it arrives, with its SHA-256.
//! - [`store`]: the object store (S3-compatible now; the `object_store` crate leaves room for
//!   GCS and Azure), multipart uploads that either complete whole or are aborted.
//! - [`rdb`]: what the stream's header and trailer say (RDB version, complete or cut short).
//! - [`manifest`]: what a backup holds, written last: a backup without one is incomplete.
//! - [`restore`]: one snapshot fetched, checked and put in a data folder before the server
//!   starts (the `valkey-restore` program, the init container of a restored member).
//!
//! A crate of its own rather than a module of the cluster-controller: capture runs in the
//! controller, but restore fetches and checks the object inside the restored member's pod, in a
//! small program that must not carry the controller (or any Kubernetes client) with it. Both
//! sides share the store, the checksum and the manifest from here.

pub mod capture;
pub mod manifest;
pub mod rdb;
pub mod restore;
pub mod store;

pub use capture::{
    Begun, CaptureError, CaptureOptions, Captured, PayloadForm, Source, begin, capture,
};
pub use manifest::Manifest;
pub use store::{Store, StoreConfig, StoreError};
