//! The operator's API, `valkey.io/v1alpha1`: ValkeyNode (one Valkey pod, written by parent
//! controllers) and ValkeyCluster (what users write).
//!
//! Every type here is generated at build time from `schema/api/*.yaml` by the codegen crate;
//! edit the YAML, never the generated code. `docs/api.md` explains every field.

pub mod v1alpha1 {
    include!(concat!(env!("OUT_DIR"), "/api.rs"));
}

/// The test-only Widget kind of `codegen/tests/fixtures/widget`: it proves that a schema file
/// alone yields compiling types and a CRD.
#[cfg(test)]
pub mod fixture_widget {
    include!(concat!(env!("OUT_DIR"), "/fixture_widget.rs"));
}

#[cfg(test)]
mod drift_tests;
