//! Cutting the network between servers on loopback, with nftables: a table of this test's own
//! that drops every packet between two sets of addresses, deleted when the guard drops (also
//! when the test panics). Only the test's own addresses are named, so other tests on the
//! machine are untouched.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A partition between `a` and `b`, both ways, until dropped.
pub struct Partition {
    table: String,
}

impl Partition {
    pub fn between(a: &[Ipv4Addr], b: &[Ipv4Addr]) -> Self {
        let table = format!(
            "valkey_engine_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let set = |ips: &[Ipv4Addr]| {
            ips.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (a, b) = (set(a), set(b));
        let script = format!(
            "table ip {table} {{\n\
               chain out {{\n\
                 type filter hook output priority 0; policy accept;\n\
                 ip saddr {{ {a} }} ip daddr {{ {b} }} drop\n\
                 ip saddr {{ {b} }} ip daddr {{ {a} }} drop\n\
               }}\n\
             }}\n"
        );
        nft(&["-f", "-"], Some(&script));
        Self { table }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        nft(&["delete", "table", "ip", &self.table], None);
    }
}

fn nft(args: &[&str], input: Option<&str>) {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("nft {args:?}: {e} (the partition tests need nftables and root)")
        });
    if let Some(text) = input
        && let Some(mut stdin) = child.stdin.take()
    {
        stdin
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("nft {args:?}: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("nft {args:?}: {e}"));
    // Dropping a guard while panicking must not panic again.
    if !out.status.success() && !std::thread::panicking() {
        panic!(
            "nft {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
