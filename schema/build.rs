//! Generates the API's Rust types from `api/*.yaml` into `OUT_DIR/api.rs` (included by lib.rs).

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    generate(&manifest.join("api"), &out.join("api.rs"));
    generate(
        &manifest.join("../codegen/tests/fixtures/widget"),
        &out.join("fixture_widget.rs"),
    );
}

fn generate(schema_dir: &Path, out: &Path) {
    println!("cargo::rerun-if-changed={}", schema_dir.display());
    let api = codegen::load_dir(schema_dir)
        .unwrap_or_else(|e| panic!("schema {} is invalid: {e}", schema_dir.display()));
    let source = codegen::rust::generate(&api).unwrap_or_else(|e| {
        panic!(
            "generated Rust for {} does not parse: {e}",
            schema_dir.display()
        )
    });
    std::fs::write(out, source).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
