//! What a controller process uses, read from `/proc/<pid>`: resident memory now (VmRSS, and of
//! it the anonymous pages, RssAnon, and the file pages, RssFile) and at its highest (VmHWM), and
//! the CPU time it has had (utime + stime of `/proc/<pid>/stat`).
//!
//! The split says what the resident set is: anonymous pages are what the process holds (its heap,
//! stacks, what the allocator kept); file pages are its binary's code and read-only data, clean,
//! shared with every process that maps the same file, and the first thing the kernel drops under
//! memory pressure.

use std::time::Duration;

use crate::{E2eError, Result};

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub rss_kib: u64,
    /// Of `rss_kib`: anonymous pages, and pages of mapped files (the binary).
    pub anonymous_kib: u64,
    pub file_kib: u64,
    pub peak_rss_kib: u64,
    /// User and system CPU time since the process started.
    pub cpu: Duration,
}

impl Usage {
    /// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`.
    pub fn of(pid: u32) -> Result<Self> {
        let read = |file: &str| {
            let path = format!("/proc/{pid}/{file}");
            std::fs::read_to_string(&path).map_err(|e| E2eError::Check(format!("{path}: {e}")))
        };
        let status = read("status")?;
        let stat = read("stat")?;
        let field = |name: &str| {
            kib_field(&status, name)
                .ok_or_else(|| E2eError::Check(format!("/proc/{pid}/status has no {name}")))
        };
        let ticks = cpu_ticks(&stat)
            .ok_or_else(|| E2eError::Check(format!("/proc/{pid}/stat: no utime/stime")))?;
        Ok(Self {
            rss_kib: field("VmRSS")?,
            anonymous_kib: field("RssAnon")?,
            file_kib: field("RssFile")?,
            peak_rss_kib: field("VmHWM")?,
            cpu: Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64),
        })
    }
}

/// `VmRSS:    1234 kB` → 1234.
fn kib_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// utime + stime (fields 14 and 15) of `/proc/<pid>/stat`, in clock ticks. The command name
/// (field 2, in parentheses) may hold spaces and parentheses, so fields are counted from the
/// last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime (14) is index 11, stime (15) index 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `getconf CLK_TCK`: the unit of `/proc/<pid>/stat` times (100 on every common Linux).
fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

/// Readings of a process over a window: CPU from its first and last, memory from every one.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub samples: Vec<Usage>,
    pub elapsed: Duration,
}

impl Window {
    /// CPU seconds the process had per minute of the window.
    pub fn cpu_seconds_per_minute(&self) -> f64 {
        match (self.samples.first(), self.samples.last()) {
            (Some(first), Some(last)) if !self.elapsed.is_zero() => {
                last.cpu.saturating_sub(first.cpu).as_secs_f64() * 60.0 / self.elapsed.as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// The median resident memory of the window's readings: the process at rest.
    pub fn steady_rss_kib(&self) -> u64 {
        self.median(|s| s.rss_kib)
    }

    /// The median of the anonymous part of the resident memory (see the module's comment).
    pub fn steady_anonymous_kib(&self) -> u64 {
        self.median(|s| s.anonymous_kib)
    }

    /// The median of the file-backed part of the resident memory.
    pub fn steady_file_kib(&self) -> u64 {
        self.median(|s| s.file_kib)
    }

    fn median(&self, of: impl Fn(&Usage) -> u64) -> u64 {
        let mut values: Vec<u64> = self.samples.iter().map(of).collect();
        values.sort_unstable();
        values.get(values.len() / 2).copied().unwrap_or(0)
    }

    /// The highest resident memory the process ever had, as of the last reading.
    pub fn peak_rss_kib(&self) -> u64 {
        self.samples
            .iter()
            .map(|s| s.peak_rss_kib)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_memory_and_cpu_fields() {
        let status = "Name:\tnode-controller\nVmHWM:\t   41234 kB\nVmRSS:\t   20480 kB\nRssAnon:\t   12288 kB\nRssFile:\t    8192 kB\n";
        assert_eq!(kib_field(status, "VmRSS"), Some(20480));
        assert_eq!(kib_field(status, "RssAnon"), Some(12288));
        assert_eq!(kib_field(status, "RssFile"), Some(8192));
        assert_eq!(kib_field(status, "VmHWM"), Some(41234));
        assert_eq!(kib_field(status, "VmSwap"), None);
        // A command name with a space and a parenthesis does not shift the fields.
        let stat =
            "4242 (node (ctl) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 8 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("4242 (short) S 1"), None);
    }

    #[test]
    fn a_window_gives_cpu_per_minute_and_median_memory() {
        let at = |cpu_s: u64, rss: u64, peak: u64| Usage {
            rss_kib: rss,
            anonymous_kib: rss - 5,
            file_kib: 5,
            peak_rss_kib: peak,
            cpu: Duration::from_secs(cpu_s),
        };
        let window = Window {
            samples: vec![at(10, 30, 50), at(11, 10, 50), at(13, 20, 60)],
            elapsed: Duration::from_secs(120),
        };
        assert!((window.cpu_seconds_per_minute() - 1.5).abs() < 1e-9);
        assert_eq!(window.steady_rss_kib(), 20);
        assert_eq!(window.steady_anonymous_kib(), 15);
        assert_eq!(window.steady_file_kib(), 5);
        assert_eq!(window.peak_rss_kib(), 60);
        assert_eq!(Window::default().cpu_seconds_per_minute(), 0.0);
    }

    #[test]
    fn reads_this_process() -> Result<()> {
        let usage = Usage::of(std::process::id())?;
        crate::check(usage.rss_kib > 0, "no resident memory")?;
        crate::check(usage.peak_rss_kib >= usage.rss_kib, "peak below current")
    }
}
