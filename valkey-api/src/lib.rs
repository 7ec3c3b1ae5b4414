//! The operator's API, `valkey.io/v1alpha1`: ValkeyNode (one Valkey pod, written by parent
//! controllers) and ValkeyCluster (what users write), and the constants of their contract.
//!
//! Every type in [`v1alpha1`] is generated at build time from `schema/*.yaml` by the codegen
//! crate; edit the YAML, never the generated code. `docs/api.md` explains every field. The CRDs
//! in the chart are `crd()` of these types, written by `make generate` (the
//! `valkey-api-generate` binary of this crate).

pub mod contract;

pub mod v1alpha1 {
    include!(concat!(env!("OUT_DIR"), "/api.rs"));
}
