//! Generates, from `schema/*.yaml`, the API's Rust types into `OUT_DIR/api.rs` (included by
//! lib.rs) and its reference into `OUT_DIR/api.md` (written out by the `valkey-api-generate`
//! binary, with the CRDs of the compiled types).

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let schema = manifest.join("schema");
    println!("cargo::rerun-if-changed={}", schema.display());
    let api = codegen::load_dir(&schema)
        .unwrap_or_else(|e| panic!("schema {} is invalid: {e}", schema.display()));
    let source = codegen::rust::generate(&api).unwrap_or_else(|e| {
        panic!(
            "the Rust generated for {} does not parse: {e}",
            schema.display()
        )
    });
    write(&out.join("api.rs"), &source);
    let docs = codegen::docs::generate(&api)
        .unwrap_or_else(|e| panic!("rendering the reference of {}: {e}", schema.display()));
    write(&out.join("api.md"), &docs);
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
