//! Memory a controller freed goes back to the system.
//!
//! A controller allocates in bursts (a fleet created, every watch listed again after the API
//! server came back, a roll of every member) and little at rest. glibc's allocator keeps the
//! pages of what was freed in its arenas (one per thread that allocated, up to eight per core) and
//! on its own gives back only the top of the main heap, so after a burst the resident set stays
//! near the burst's peak for as long as the process lives: memory a platform pays for and no one
//! uses. `malloc_trim(0)` gives every whole free page of every arena back. Once a minute costs
//! nothing a controller would notice (a walk of a heap of tens of MiB, well under a millisecond),
//! and nothing is given back that is in use, so it changes no behaviour, only the resident set.
//!
//! Measured in `make bench`'s fleet section (bench/README.md, "Memory at rest").

use std::time::Duration;

use tokio::task::JoinHandle;

/// How often freed memory is given back.
pub const GIVE_BACK_EVERY: Duration = Duration::from_secs(60);

/// How many arenas glibc's allocator may keep. By default it takes one per thread that
/// allocates, up to eight per core of the machine (not of the pod's CPU limit): on a node of many
/// cores every runtime thread gets its own, and each keeps its own free pages and fragments. Two
/// serve a controller's few threads without contention worth measuring (at 100 clusters on 2
/// cores, 1 to 3 MiB less anonymous memory a controller: docs/benchmarks.md, "Arenas and runtime
/// threads").
pub const ARENAS: i32 = 2;

/// Caps the allocator's arenas at [`ARENAS`]; true when the allocator took it. Call it first
/// thing in `main`, before any thread starts: a thread keeps the arena it first allocated in.
/// Where the allocator is not glibc's, there is nothing to cap.
pub fn few_arenas() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes no pointer; M_ARENA_MAX only bounds how many arenas later
        // allocations may create (existing ones stay valid), and glibc takes its own lock.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENAS) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Gives the allocator's free pages back to the system; true when some were. Where the
/// allocator is not glibc's, there is nothing to call and nothing is given back.
pub fn give_back_freed() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointer and only releases pages no allocation holds; glibc
        // documents it as safe to call from any thread at any time (it takes each arena's lock).
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Gives freed memory back every `every`, for the life of the runtime.
pub fn spawn_giving_back(every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let gave = give_back_freed();
            tracing::trace!(gave, "gave freed memory back");
        }
    })
}

#[cfg(test)]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// This process's anonymous resident memory, in KiB.
    fn resident_anonymous_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon in /proc/self/status")
    }

    #[test]
    fn the_allocator_takes_the_arena_cap() {
        assert!(few_arenas(), "glibc refused M_ARENA_MAX");
    }

    #[test]
    fn pages_freed_under_a_live_allocation_are_given_back() {
        // 48 MiB in small chunks (each under the allocator's mmap threshold, so they live in an
        // arena), touched so that they are resident; then all freed but the last, which pins the
        // heap's top: glibc would not give these pages back on its own.
        const CHUNK: usize = 4 * 1024;
        const CHUNKS: usize = 48 * 1024 * 1024 / CHUNK;
        let mut chunks: Vec<Vec<u8>> = (0..CHUNKS).map(|i| vec![i as u8 | 1; CHUNK]).collect();
        let pin = chunks.pop();
        drop(chunks);
        let before = resident_anonymous_kib();

        assert!(give_back_freed(), "glibc said it gave nothing back");
        let after = resident_anonymous_kib();

        assert!(
            before.saturating_sub(after) >= 24 * 1024,
            "resident anonymous memory went from {before} KiB to {after} KiB: at least 24 MiB of \
             the 48 MiB freed should have gone back"
        );
        drop(pin);
    }
}
