//! `make bench-charts`: draws every benchmark's charts (`docs/charts/`) again from the figures in
//! `bench/results/`, without running a benchmark: after a change to the charts, or after
//! `make bench-engine`, whose test lives in another crate. A section of `docs/benchmarks.md`
//! written before its benchmark had a chart gets the chart's image.

fn main() -> std::process::ExitCode {
    let root = e2e::repo_root();
    match e2e::bench::figures::write_all(&root) {
        Ok(charts) => {
            for chart in charts {
                println!(
                    "{}",
                    e2e::bench::figures::chart_path(&root, &chart.file).display()
                );
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-charts: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
