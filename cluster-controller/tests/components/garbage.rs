//! No input makes a parser panic: real replies cut short, with bytes flipped or fields
//! shuffled, and random reply trees, must come back as a value or a ParseError.

use crate::common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use cluster_controller::valkey::{
    cluster_info, cluster_nodes, cluster_shards, info, slot_migrations,
};

const TEXT_FIXTURES: &[&str] = &[
    "v9/cluster_nodes_primary",
    "v9/cluster_nodes_handshake",
    "v8/cluster_nodes_noaddr",
    "v8/setslot_2_migrating_source",
    "v8/setslot_2_migrating_target",
    "v9/info_primary",
    "v8/info_replica",
    "v9/cluster_info_fail",
];

const RESP_FIXTURES: &[&str] = &[
    "v9/cluster_shards.resp2",
    "v9/cluster_shards.resp3",
    "v8/cluster_shards.resp3",
    "v9/getslotmigrations_source_failed.resp2",
    "v9/getslotmigrations_source_failed.resp3",
];

/// Runs every text parser and every accessor; only panics count as failures.
fn feed_text(text: &str) {
    if let Ok(nodes) = cluster_nodes::parse(text) {
        let _ = nodes.myself();
        let _ = nodes.assigned_slots();
        for slot in [0, 1, 2853, 16383] {
            let _ = nodes.slot_view(slot);
        }
    }
    if let Ok(i) = info::parse(text) {
        let _ = (
            i.server_version(),
            i.redis_version(),
            i.role(),
            i.replicas(),
        );
        let _ = (i.connected_replicas(), i.master_link_status(), i.loading());
        let _ = (
            i.master_repl_offset(),
            i.slave_repl_offset(),
            i.cluster_enabled(),
        );
        let _ = i.master_sync_in_progress();
    }
    let _ = cluster_info::parse(text);
}

fn feed_value(value: &Value) {
    let _ = cluster_shards::parse(value);
    let _ = slot_migrations::parse(value);
}

fn mutate_text(rng: &mut StdRng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    match rng.random_range(0..5) {
        0 => bytes.truncate(rng.random_range(0..=bytes.len())),
        1 => {
            for _ in 0..rng.random_range(1..8) {
                if !bytes.is_empty() {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
            }
        }
        2 => {
            // Drop one whitespace-separated field from every line.
            let lines: Vec<String> = text
                .lines()
                .map(|line| {
                    let mut fields: Vec<&str> = line.split(' ').collect();
                    if !fields.is_empty() {
                        fields.remove(rng.random_range(0..fields.len()));
                    }
                    fields.join(" ")
                })
                .collect();
            bytes = lines.join("\n").into_bytes();
        }
        3 => {
            let at = rng.random_range(0..=bytes.len());
            let pieces = ["-", "[", "]", "@", ":", ",", "->-", "-<-", "99999"];
            let junk = pieces[rng.random_range(0..pieces.len())]
                .as_bytes()
                .to_vec();
            bytes.splice(at..at, junk);
        }
        _ => {
            bytes = (0..rng.random_range(0..200))
                .map(|_| rng.random())
                .collect()
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn mangled_text_replies_never_panic() {
    let mut rng = StdRng::seed_from_u64(11);
    for name in TEXT_FIXTURES {
        let text = common::text(name);
        feed_text(&text);
        for _ in 0..300 {
            feed_text(&mutate_text(&mut rng, &text));
        }
    }
    for text in ["", "\n", "#", ":", "a b c d e f g h", "x:y\r\n# Z\r\n:"] {
        feed_text(text);
    }
}

#[test]
fn truncated_and_flipped_resp_never_panics() {
    let mut rng = StdRng::seed_from_u64(12);
    for name in RESP_FIXTURES {
        let bytes = common::bytes(name);
        for cut in (0..bytes.len()).step_by(7) {
            if let Ok(value) = redis::parse_redis_value(&bytes[..cut]) {
                feed_value(&value);
            }
        }
        for _ in 0..300 {
            let mut mangled = bytes.clone();
            let at = rng.random_range(0..mangled.len());
            mangled[at] = rng.random();
            if let Ok(value) = redis::parse_redis_value(&mangled) {
                feed_value(&value);
            }
        }
    }
}

fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    let words = [
        "slots",
        "nodes",
        "id",
        "state",
        "name",
        "slot_ranges",
        "port",
        "role",
        "health",
    ];
    let leaf = |rng: &mut StdRng| match rng.random_range(0..6) {
        0 => Value::Nil,
        1 => Value::Int(rng.random_range(-3..20000)),
        2 => Value::BulkString(words[rng.random_range(0..words.len())].as_bytes().to_vec()),
        3 => Value::SimpleString("0-99".into()),
        4 => Value::Boolean(rng.random()),
        _ => Value::Double(1.5),
    };
    if depth == 0 || rng.random_bool(0.4) {
        return leaf(rng);
    }
    let n = rng.random_range(0..6);
    match rng.random_range(0..3) {
        0 => Value::Array((0..n).map(|_| random_value(rng, depth - 1)).collect()),
        1 => Value::Map(
            (0..n)
                .map(|_| (leaf(rng), random_value(rng, depth - 1)))
                .collect(),
        ),
        _ => Value::Set((0..n).map(|_| random_value(rng, depth - 1)).collect()),
    }
}

#[test]
fn random_reply_trees_never_panic() {
    let mut rng = StdRng::seed_from_u64(13);
    for _ in 0..5000 {
        feed_value(&random_value(&mut rng, 4));
    }
}
