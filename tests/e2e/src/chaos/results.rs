//! The matrix's results, kept in the repository: `docs/chaos.json` holds the latest report of
//! every scenario that has run (with its seed, the commit it ran on and when), and `docs/chaos.md`
//! shows them as one table in the matrix's order, with the scenarios not yet run named.
//!
//! The whole matrix takes hours on two cores, longer than one sitting may hold the machine: a run
//! of any part of it (`CHAOS_FILTER`) replaces the rows of the scenarios it ran, as each finishes,
//! and leaves the others as they were measured. The table says which commit each row ran on, so a
//! matrix assembled over several runs says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::Report;
use crate::{E2eError, Result};

/// One scenario's latest report, as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// The scenario with what it did and the fault (`scale-out.kill-operator-1 (shards→4; …)`).
    pub scenario: String,
    pub seed: u64,
    pub struck_after_s: f64,
    pub plain_acked: usize,
    pub plain_lost: usize,
    pub plain_loss_allowed: bool,
    pub wait_acked: usize,
    pub wait_lost: usize,
    pub refused: u64,
    pub longest_gap_s: f64,
    pub ready_after_s: f64,
    pub check_ok: bool,
    /// Why the scenario missed the bar; `None` when it passed.
    pub failure: Option<String>,
    /// The commit the run was built from (`+dirty` when the tree had changes).
    pub commit: String,
    /// When the scenario finished, UTC, `YYYY-MM-DD HH:MM`.
    pub finished: String,
}

impl Row {
    pub fn of(report: &Report, commit: &str, finished: &str) -> Self {
        Self {
            scenario: report.scenario.clone(),
            seed: report.seed,
            struck_after_s: round(report.struck_after.as_secs_f64()),
            plain_acked: report.plain_acked,
            plain_lost: report.plain_lost,
            plain_loss_allowed: report.plain_loss_allowed,
            wait_acked: report.replicated_acked,
            wait_lost: report.replicated_lost,
            refused: report.refused,
            longest_gap_s: round(report.longest_gap.as_secs_f64()),
            ready_after_s: round(report.ready_after.as_secs_f64()),
            check_ok: report.check_ok,
            failure: report.failure.clone(),
            commit: commit.to_owned(),
            finished: finished.to_owned(),
        }
    }

    fn markdown(&self, name: &str) -> String {
        format!(
            "| {name} | {} | {} | {:.1}s | {} | {}{} | {} | {} | {} | {:.1}s | {:.1}s | {} | {} | {} |",
            self.scenario
                .strip_prefix(name)
                .unwrap_or(&self.scenario)
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')'),
            self.seed,
            self.struck_after_s,
            self.plain_acked,
            self.plain_lost,
            if self.plain_loss_allowed {
                " (allowed)"
            } else {
                ""
            },
            self.wait_acked,
            self.wait_lost,
            self.refused,
            self.longest_gap_s,
            self.ready_after_s,
            if self.check_ok { "ok" } else { "FAILED" },
            match &self.failure {
                None => "pass".to_owned(),
                Some(why) => format!("FAIL: {}", why.replace('|', "/")),
            },
            self.commit,
        )
    }
}

fn round(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

/// The stored results: scenario name → its latest row.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub rows: BTreeMap<String, Row>,
}

impl Results {
    pub fn json_path(root: &Path) -> PathBuf {
        root.join("docs/chaos.json")
    }

    pub fn markdown_path(root: &Path) -> PathBuf {
        root.join("docs/chaos.md")
    }

    /// The stored results; empty when there are none yet. A file that cannot be read as results
    /// is an error, not a reason to start over and lose them.
    pub fn load(root: &Path) -> Result<Self> {
        let path = Self::json_path(root);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| E2eError::Check(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(E2eError::Check(format!("{}: {e}", path.display()))),
        }
    }

    /// Writes the JSON and the table (`matrix`: every scenario's name, in the matrix's order).
    pub fn save(&self, root: &Path, matrix: &[String]) -> Result<()> {
        let io = |p: &Path, e: std::io::Error| E2eError::Check(format!("{}: {e}", p.display()));
        let json = Self::json_path(root);
        if let Some(dir) = json.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| E2eError::Check(format!("serializing the chaos results: {e}")))?;
        std::fs::write(&json, text + "\n").map_err(|e| io(&json, e))?;
        let md = Self::markdown_path(root);
        std::fs::write(&md, self.markdown(matrix)).map_err(|e| io(&md, e))
    }

    /// The table in the matrix's order, with a summary and the scenarios not yet run.
    pub fn markdown(&self, matrix: &[String]) -> String {
        let ran: Vec<(&String, &Row)> = matrix
            .iter()
            .filter_map(|name| self.rows.get(name).map(|row| (name, row)))
            .collect();
        let passed = ran.iter().filter(|(_, r)| r.failure.is_none()).count();
        let missing: Vec<&str> = matrix
            .iter()
            .filter(|name| !self.rows.contains_key(*name))
            .map(String::as_str)
            .collect();
        let mut commits: Vec<&str> = ran.iter().map(|(_, r)| r.commit.as_str()).collect();
        commits.sort_unstable();
        commits.dedup();
        let mut out = String::from(
            "# Chaos: the matrix's latest results\n\n\
             Written by `make chaos` (`tests/e2e/tests/chaos.rs`): each scenario's row is replaced \
             when it runs again, so the table may hold rows of several runs and commits (the last \
             column). The bar and what each column means: `tests/e2e/src/chaos/mod.rs` and the \
             README's *What the operator guarantees*. Raw figures: `docs/chaos.json`.\n\n",
        );
        out.push_str(&format!(
            "**{} of {} scenarios run, {passed} passed, {} failed**; commits: {}.\n\n",
            ran.len(),
            matrix.len(),
            ran.len() - passed,
            if commits.is_empty() {
                "none".to_owned()
            } else {
                commits.join(", ")
            }
        ));
        out.push_str(
            "| scenario | operation; fault | seed | fault at | plain acked | plain lost | WAIT acked | WAIT lost | refused | longest gap | Ready after fault | consistency check | result | commit |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (name, row) in &ran {
            out.push_str(&row.markdown(name));
            out.push('\n');
        }
        if !missing.is_empty() {
            out.push_str(&format!(
                "\nNot run yet ({}): {}.\n",
                missing.len(),
                missing.join(", ")
            ));
        }
        // Rows of scenarios the matrix no longer has (renamed or removed).
        let gone: Vec<&str> = self
            .rows
            .keys()
            .filter(|name| !matrix.contains(name))
            .map(String::as_str)
            .collect();
        if !gone.is_empty() {
            out.push_str(&format!(
                "\nStored rows of scenarios the matrix no longer has: {}.\n",
                gone.join(", ")
            ));
        }
        out
    }
}

/// Keeps each finished scenario's row as it comes: a run stopped halfway keeps what it measured.
pub struct Recorder {
    root: PathBuf,
    matrix: Vec<String>,
    commit: String,
}

impl Recorder {
    pub fn new(root: PathBuf, matrix: Vec<String>) -> Self {
        let commit = commit_of(&root);
        Self {
            root,
            matrix,
            commit,
        }
    }

    /// Stores `report` as the latest of scenario `name`. A failure to store is printed, not
    /// fatal: the run's own table still says everything.
    pub fn record(&self, name: &str, report: &Report) {
        let stored = Results::load(&self.root).and_then(|mut results| {
            results
                .rows
                .insert(name.to_owned(), Row::of(report, &self.commit, &now_utc()));
            results.save(&self.root, &self.matrix)
        });
        if let Err(e) = stored {
            eprintln!("chaos: the result of {name} could not be stored: {e}");
        }
    }
}

/// `git rev-parse --short HEAD`, with `+dirty` when the tree has changes; `unknown` outside git.
fn commit_of(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_owned();
    };
    // Results files themselves do not make the tree dirty.
    let dirty =
        git(&["status", "--porcelain", "--", ".", ":!docs/chaos.*"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}+dirty") } else { head }
}

/// Now, UTC, `YYYY-MM-DD HH:MM` (from `date`, which every machine that runs the matrix has).
fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(scenario: &str, failure: Option<&str>) -> Report {
        Report {
            scenario: format!("{scenario} (idle; primary paused 20s)"),
            seed: 7,
            struck_after: Duration::from_millis(1234),
            plain_acked: 100,
            plain_lost: 0,
            replicated_acked: 50,
            replicated_lost: 0,
            refused: 3,
            longest_gap: Duration::from_millis(15_460),
            gaps: vec![(15.5, Duration::from_millis(15_460))],
            spread_failovers: 0,
            ready_after: Duration::from_millis(2_060),
            check_ok: failure.is_none(),
            plain_loss_allowed: true,
            failure: failure.map(str::to_owned),
        }
    }

    #[test]
    fn a_later_run_replaces_a_scenarios_row_and_keeps_the_others() {
        let dir = std::env::temp_dir().join(format!("chaos-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let matrix: Vec<String> = ["idle.a", "idle.b", "idle.c"].map(String::from).to_vec();
        let first = Recorder {
            root: dir.clone(),
            matrix: matrix.clone(),
            commit: "aaa".into(),
        };
        first.record("idle.a", &report("idle.a", None));
        first.record(
            "idle.b",
            &report("idle.b", Some("1 of 50 WAIT-acknowledged writes lost")),
        );
        let second = Recorder {
            commit: "bbb".into(),
            ..first
        };
        second.record("idle.b", &report("idle.b", None));
        let results = Results::load(&dir).unwrap();
        assert_eq!(results.rows.len(), 2);
        assert_eq!(results.rows["idle.a"].commit, "aaa");
        assert_eq!(results.rows["idle.b"].commit, "bbb");
        assert_eq!(results.rows["idle.b"].failure, None);
        let table = std::fs::read_to_string(Results::markdown_path(&dir)).unwrap();
        assert!(table.contains("**2 of 3 scenarios run, 2 passed, 0 failed**; commits: aaa, bbb."));
        assert!(table.contains("| idle.a | idle; primary paused 20s | 7 | 1.2s | 100 | 0 (allowed) | 50 | 0 | 3 | 15.5s | 2.1s | ok | pass | aaa |"));
        assert!(table.contains("Not run yet (1): idle.c."));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unreadable_results_are_an_error_not_a_fresh_start() {
        let dir = std::env::temp_dir().join(format!("chaos-broken-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(Results::json_path(&dir), "{not json").unwrap();
        assert!(Results::load(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
