//! The codegen crate: the API is declared once, in `schema/api/*.yaml`, and everything else is
//! emitted from it in one pass over one intermediate representation:
//!
//! - Rust types with serde, schemars and kube's resource traits ([`rust`]), compiled into both
//!   controllers through the `valkey-api` crate's build script;
//! - CustomResourceDefinition manifests with structural OpenAPI v3 schemas ([`crd`]), with
//!   Kubernetes types expanded from k8s-openapi;
//! - the API reference in markdown ([`docs`]).

pub mod crd;
pub mod docs;
pub mod ir;
pub mod k8s;
mod names;
pub mod openapi;
pub mod rust;

pub use ir::{Api, load_dir, load_sources};
