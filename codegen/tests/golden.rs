//! Golden files of everything the codegen emits for the Widget fixture kind: the Rust types and the
//! API reference (the CRD is the compiled types' own: see `fixture_kind.rs`).
//! `UPDATE_GOLDEN=1 cargo test -p codegen` rewrites them after an intended change; review the diff.

use std::path::{Path, PathBuf};

fn fixture() -> codegen::Api {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/widget");
    codegen::load_dir(&dir).unwrap_or_else(|e| panic!("fixture: {e}"))
}

pub fn assert_golden(name: &str, actual: &str) {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from what codegen emits (UPDATE_GOLDEN=1 to accept):\n{actual}",
        path.display()
    );
}

#[test]
fn rust_types_match_golden() {
    let source = codegen::rust::generate(&fixture()).unwrap_or_else(|e| panic!("{e}"));
    assert_golden("widget.rs", &source);
}

#[test]
fn docs_match_golden() {
    let docs = codegen::docs::generate(&fixture()).unwrap_or_else(|e| panic!("{e}"));
    assert_golden("widget.md", &docs);
}

#[test]
fn a_schema_error_names_the_file_and_the_field() {
    let bad = "kind: Bad\ngroup: g\nversion: v1\nplural: bads\ndescription: d\nspec: BadSpec\ntypes:\n  BadSpec:\n    description: d\n    fields:\n      count:\n        type: integr\n        description: d\n";
    let err = codegen::load_sources(&[("bad.yaml".into(), bad.into())])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("bad.yaml: BadSpec.count") && err.contains("unknown type `integr`"),
        "{err}"
    );

    let no_description = bad.replace(
        "type: integr\n        description: d",
        "type: integer\n        description: ' '",
    );
    let err = codegen::load_sources(&[("bad.yaml".into(), no_description)])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("BadSpec.count: needs a description"), "{err}");
}

#[test]
fn a_fragment_is_included_once_and_misuse_is_named() {
    let api = fixture();
    assert!(
        api.emitted_types().all(|t| t.name != "Sizing"),
        "a fragment is no type of its own"
    );
    let spec = api
        .type_def("WidgetSpec")
        .unwrap_or_else(|| panic!("no WidgetSpec"));
    assert_eq!(spec.includes, ["Sizing"]);

    let kind = "kind: K\ngroup: g\nversion: v1\nplural: ks\ndescription: d\nspec: KSpec\ntypes:\n";
    let fragment = "  Shared:\n    description: d\n    fragment: true\n    fields:\n      size:\n        type: integer\n        description: d\n";
    let load = |spec: &str| {
        codegen::load_sources(&[
            ("k.yaml".into(), format!("{kind}{spec}")),
            ("shared.yaml".into(), format!("types:\n{fragment}")),
        ])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let twice = load(
        "  KSpec:\n    description: d\n    include: [Shared]\n    fields:\n      size:\n        type: integer\n        description: d\n",
    );
    assert!(
        twice.contains("KSpec includes Shared") && twice.contains("field size is declared both"),
        "{twice}"
    );
    let unknown = load("  KSpec:\n    description: d\n    include: [Nothing]\n    fields: {}\n");
    assert!(
        unknown.contains("includes Nothing, which is not a fragment"),
        "{unknown}"
    );
    let as_type = load(
        "  KSpec:\n    description: d\n    fields:\n      shared:\n        type: list<Shared>\n        description: d\n",
    );
    assert!(
        as_type.contains("KSpec.shared: Shared is a fragment"),
        "{as_type}"
    );
}

#[test]
fn rules_on_a_field_and_on_its_type_are_refused() {
    let schema = "kind: K\ngroup: g\nversion: v1\nplural: ks\ndescription: d\nspec: KSpec\ntypes:\n  KSpec:\n    description: d\n    fields:\n      inner:\n        type: Inner\n        description: d\n        immutable: true\n  Inner:\n    description: d\n    validations:\n      - rule: has(self.a)\n    fields:\n      a:\n        type: string\n        description: d\n";
    let err = codegen::load_sources(&[("k.yaml".into(), schema.into())])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("k.yaml: KSpec.inner: has CEL rules") && err.contains("its type Inner"),
        "{err}"
    );
    // Without the field's own rule the same schema loads.
    let fine = schema.replace("        immutable: true\n", "");
    assert!(codegen::load_sources(&[("k.yaml".into(), fine)]).is_ok());
}
