//! Where benchmarks put their figures: raw in `bench/results/<name>.json`, and as a section of
//! `docs/benchmarks.md` that each run of that benchmark replaces (between two marker comments),
//! so each benchmark owns its section and the others' stay as they were measured.

use std::path::Path;

use serde::Serialize;

use crate::{E2eError, Result};

pub mod charts;

fn begin(name: &str) -> String {
    format!(
        "<!-- {name}: begin (written by `make bench`, bench_{name}; edits here are overwritten) -->"
    )
}

fn end(name: &str) -> String {
    format!("<!-- {name}: end -->")
}

/// Writes `figures` to `bench/results/<name>.json` and `body` (markdown) as the section `name`
/// of `docs/benchmarks.md` (created when missing).
pub fn publish(root: &Path, name: &str, figures: &impl Serialize, body: &str) -> Result<()> {
    let io = |what: &Path, e: std::io::Error| E2eError::Check(format!("{}: {e}", what.display()));
    let results = root.join("bench/results");
    std::fs::create_dir_all(&results).map_err(|e| io(&results, e))?;
    let json = results.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(figures)
        .map_err(|e| E2eError::Check(format!("serializing the figures of {name}: {e}")))?;
    std::fs::write(&json, text + "\n").map_err(|e| io(&json, e))?;
    let docs = root.join("docs/benchmarks.md");
    let existing = std::fs::read_to_string(&docs).unwrap_or_else(|_| {
        "# Benchmarks\n\nFigures `make bench` measured, each section written by the benchmark \
         that measured it (see [bench/README.md](../bench/README.md)).\n\n"
            .to_owned()
    });
    let section = format!("{}\n{}\n{}\n", begin(name), body.trim_end(), end(name));
    std::fs::write(&docs, replace_section(&existing, name, &section)).map_err(|e| io(&docs, e))
}

/// `doc` with the section `name` replaced by `section` (appended when absent).
fn replace_section(doc: &str, name: &str, section: &str) -> String {
    let (begin, end) = (begin(name), end(name));
    match (doc.find(&begin), doc.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            let after = &doc[e + end.len()..];
            let after = after.strip_prefix('\n').unwrap_or(after);
            format!("{}{section}{after}", &doc[..b])
        }
        _ => format!(
            "{}{}{section}",
            doc,
            if doc.ends_with("\n\n") { "" } else { "\n" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_in_place_and_others_are_kept() {
        let (b, e) = (begin("x"), end("x"));
        let (ob, oe) = (begin("other"), end("other"));
        let doc = format!("# B\n\n{b}\nold\n{e}\n\n{ob}\nkept\n{oe}\n");
        let new = format!("{b}\nnew\n{e}\n");
        assert_eq!(
            replace_section(&doc, "x", &new),
            format!("# B\n\n{b}\nnew\n{e}\n\n{ob}\nkept\n{oe}\n")
        );
        assert_eq!(
            replace_section("# B\n\n", "x", &new),
            format!("# B\n\n{new}")
        );
    }
}
