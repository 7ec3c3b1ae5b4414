//! Records of started processes, so a kubelet that was killed can end what it left behind.
//! A record holds the pid and its start time, which tells a live process from a reused pid.

use std::path::Path;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Field 22 of /proc/<pid>/stat: start time in clock ticks since boot.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

pub fn record(path: &Path, pid: u32) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let started = start_time(pid).unwrap_or_default();
    std::fs::write(path, format!("{pid} {started}\n"))
}

/// Kills the process group of every recorded process still alive under `dir` (recursively).
pub fn kill_recorded(dir: &Path) -> usize {
    let mut killed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            killed += kill_recorded(&path);
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("pid") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut parts = text.split_whitespace();
        let (Some(pid), Some(started)) = (
            parts.next().and_then(|p| p.parse::<u32>().ok()),
            parts.next().and_then(|s| s.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if start_time(pid) == Some(started)
            && let Ok(raw) = i32::try_from(pid)
            && killpg(Pid::from_raw(raw), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let me = std::process::id();
        let a = start_time(me);
        assert!(a.is_some());
        assert_eq!(a, start_time(me));
    }

    #[test]
    fn a_stale_record_is_removed_without_killing() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("lk-procs-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        // A pid that cannot exist (above pid_max's ceiling).
        std::fs::write(dir.join("c.pid"), "4194305 1\n")?;
        assert_eq!(kill_recorded(&dir), 0);
        assert!(!dir.join("c.pid").exists());
        std::fs::remove_dir_all(&dir)
    }
}
