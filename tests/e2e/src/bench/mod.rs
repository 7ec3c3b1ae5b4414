//! Where benchmarks put their figures: raw in `bench/results/<name>.json`, and as a section of
//! `docs/benchmarks.md` that each run of that benchmark replaces (between two marker comments),
//! so each benchmark owns its section and the others' stay as they were measured. Its charts,
//! drawn from that JSON, go to `docs/charts/` and into the section.

use std::path::Path;

use serde::Serialize;

use crate::{E2eError, Result};

pub mod charts;
pub mod figures;

fn begin(name: &str) -> String {
    format!(
        "<!-- {name}: begin (written by `make bench`, bench_{name}; edits here are overwritten) -->"
    )
}

fn end(name: &str) -> String {
    format!("<!-- {name}: end -->")
}

/// The environment variable `name` parsed as a `T`, or `default` when it is unset or does not
/// parse: how every benchmark reads its sizes.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Writes `figures` to `bench/results/<name>.json`, the charts of that JSON to `docs/charts/`
/// (`figures::write`), and `body` (markdown) with the charts as the section `name` of
/// `docs/benchmarks.md` (created when missing). Charts that fail to draw leave the figures and
/// the section written, and the error is returned after.
pub fn publish(root: &Path, name: &str, figures: &impl Serialize, body: &str) -> Result<()> {
    let io = |what: &Path, e: std::io::Error| E2eError::Check(format!("{}: {e}", what.display()));
    let results = root.join("bench/results");
    std::fs::create_dir_all(&results).map_err(|e| io(&results, e))?;
    let json = results.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(figures)
        .map_err(|e| E2eError::Check(format!("serializing the figures of {name}: {e}")))?;
    std::fs::write(&json, text + "\n").map_err(|e| io(&json, e))?;
    let charts = self::figures::write(root, name);
    let links: Vec<String> = charts
        .as_ref()
        .map(|charts| charts.iter().map(self::figures::Chart::link).collect())
        .unwrap_or_default();
    let body = with_charts(body, &links);
    let docs = root.join("docs/benchmarks.md");
    let existing = std::fs::read_to_string(&docs).unwrap_or_else(|_| {
        "# Benchmarks\n\nFigures `make bench` measured, each section written by the benchmark \
         that measured it (see [bench/README.md](../bench/README.md)).\n\n"
            .to_owned()
    });
    let section = section(name, body.trim_end());
    std::fs::write(&docs, replace_section(&existing, name, &section)).map_err(|e| io(&docs, e))?;
    charts.map(|_| ())
}

/// Makes the section `name` of `docs/benchmarks.md` show `charts` too, where it does not yet: a
/// section a benchmark wrote before it had those charts, whose charts `make bench-charts` drew
/// from its committed figures. A section not there is left for the benchmark to write.
pub fn link_charts(root: &Path, name: &str, charts: &[self::figures::Chart]) -> Result<()> {
    let docs = root.join("docs/benchmarks.md");
    let io = |e: std::io::Error| E2eError::Check(format!("{}: {e}", docs.display()));
    let doc = match std::fs::read_to_string(&docs) {
        Ok(doc) => doc,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let (begin, end) = (begin(name), end(name));
    let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
        return Ok(());
    };
    let Some(body) = doc.get(b + begin.len()..e) else {
        return Ok(());
    };
    let links: Vec<String> = charts.iter().map(self::figures::Chart::link).collect();
    let updated = replace_section(
        &doc,
        name,
        &section(name, &with_charts(body.trim(), &links)),
    );
    if updated != doc {
        std::fs::write(&docs, updated).map_err(io)?;
    }
    Ok(())
}

/// `body` with the image `links` whose image it does not show yet (whatever their text) after
/// its first paragraph under the heading, so the charts come before the tables they sum up.
fn with_charts(body: &str, links: &[String]) -> String {
    let missing: Vec<&str> = links
        .iter()
        .filter(|l| {
            let image = l.rsplit_once("](").map_or(l.as_str(), |(_, image)| image);
            !body.contains(image)
        })
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return body.to_owned();
    }
    let images = missing.join("\n\n");
    // The heading ends at the first blank line, its introduction at the second.
    match body.match_indices("\n\n").nth(1).map(|(at, _)| at) {
        Some(at) => format!("{}\n\n{images}{}", &body[..at], &body[at..]),
        None => format!("{}\n\n{images}\n", body.trim_end()),
    }
}

/// The section `name` of `docs/benchmarks.md` holding `body`, between its markers.
fn section(name: &str, body: &str) -> String {
    format!("{}\n{body}\n{}\n", begin(name), end(name))
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

    #[test]
    fn charts_drawn_again_are_linked_once_in_a_section_written_without_them() {
        let root = std::env::temp_dir().join(format!("bench-link-{}", std::process::id()));
        let docs = root.join("docs/benchmarks.md");
        let written = std::fs::create_dir_all(root.join("docs")).and_then(|()| {
            let (b, e) = (begin("fleet"), end("fleet"));
            std::fs::write(
                &docs,
                format!("# B\n\n{b}\n## Fleet\n\nintro\n\n| table |\n{e}\n"),
            )
        });
        let chart = self::figures::Chart {
            file: "fleet-rss".into(),
            bars: self::charts::Bars {
                title: "Fleet".into(),
                unit: "MiB".into(),
                categories: Vec::new(),
                series: Vec::new(),
                goals: Vec::new(),
            },
        };
        let first = link_charts(&root, "fleet", std::slice::from_ref(&chart)).and_then(|()| {
            std::fs::read_to_string(&docs).map_err(|e| E2eError::Check(e.to_string()))
        });
        let second = link_charts(&root, "fleet", std::slice::from_ref(&chart)).and_then(|()| {
            std::fs::read_to_string(&docs).map_err(|e| E2eError::Check(e.to_string()))
        });
        let absent = link_charts(&root, "formation", &[chart]);
        let _ = std::fs::remove_dir_all(&root);
        assert!(written.is_ok() && absent.is_ok());
        let first = first.expect("linked");
        let image = first.find("(charts/fleet-rss.svg)").expect("the image");
        assert!(first.find("intro").is_some_and(|i| i < image));
        assert!(first.find("| table |").is_some_and(|t| image < t));
        assert_eq!(second.expect("linked again"), first, "linked twice");
    }

    #[test]
    fn publish_writes_the_figures_their_charts_and_the_section_showing_them() {
        let root = std::env::temp_dir().join(format!("bench-publish-{}", std::process::id()));
        let figures = serde_json::json!([{"valkey": "9.1", "fault": "pod deleted",
            "longest_gap_s": 0.7, "ready_after_s": 6.8}]);
        let published = publish(&root, "failover", &figures, "## F\n\nintro\n\n| table |");
        let docs = std::fs::read_to_string(root.join("docs/benchmarks.md"));
        let chart = std::fs::read_to_string(root.join("docs/charts/failover-ready.svg"));
        let json = std::fs::read_to_string(root.join("bench/results/failover.json"));
        let _ = std::fs::remove_dir_all(&root);
        assert!(published.is_ok(), "{published:?}");
        assert!(json.is_ok_and(|j| j.contains("pod deleted")));
        assert!(chart.is_ok_and(|c| c.contains("\npod deleted\n</text>")));
        let docs = docs.expect("docs/benchmarks.md");
        let intro = docs.find("intro").expect("the section");
        let image = docs
            .find("](charts/failover-ready.svg)")
            .expect("the chart's image");
        let table = docs.find("| table |").expect("the table");
        assert!(intro < image && image < table, "{docs}");
    }

    #[test]
    fn charts_go_after_the_introduction_once() {
        let links = [
            "![a](charts/a.svg)".to_owned(),
            "![b](charts/b.svg)".to_owned(),
        ];
        let body = "## T\n\nintro\n\n| table |";
        let with = with_charts(body, &links);
        assert_eq!(
            with,
            "## T\n\nintro\n\n![a](charts/a.svg)\n\n![b](charts/b.svg)\n\n| table |"
        );
        assert_eq!(with_charts(&with, &links), with);
        let retitled = ["![A, renamed](charts/a.svg)".to_owned()];
        assert_eq!(with_charts(&with, &retitled), with);
        assert_eq!(
            with_charts("## T\n\nintro", &links[..1]),
            "## T\n\nintro\n\n![a](charts/a.svg)\n"
        );
    }
}
