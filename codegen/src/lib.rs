//! The codegen crate: the API is declared once, in `valkey-api/schema/*.yaml`, and read here into
//! one intermediate representation ([`ir`]: load, check, model), from which it emits
//!
//! - Rust types with serde, schemars and kube's resource traits ([`rust`]), compiled into both
//!   controllers through the `valkey-api` crate's build script; their `crd()` is the CRD (written
//!   into the chart by `make generate`, from the compiled types: one road, no second emitter);
//! - the API reference in markdown ([`docs`]).
//!
//! A library for build scripts: it depends on no Kubernetes client, HTTP or TLS crate.

pub mod docs;
pub mod ir;
pub mod k8s;
mod names;
pub mod openapi;
pub mod rust;

pub use ir::{Api, load_dir, load_sources};
