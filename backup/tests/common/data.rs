//! A dataset of varied keys, written and then checked key by key: strings from a few bytes to
//! tens of kilobytes, hashes, lists, sorted sets, and keys with a time to live.

use std::collections::BTreeMap;

/// What key `i` holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
    SortedSet(Vec<(String, f64)>),
}

pub fn key(i: usize) -> String {
    format!("key:{{{}}}:{i}", i % 97)
}

/// Bytes that differ from key to key and position to position (not one repeated byte, which
/// RDB's LZF compression would shrink to nothing).
fn bytes(i: usize, len: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 251) as u8
        })
        .collect()
}

pub fn value(i: usize) -> Value {
    match i % 50 {
        0 => Value::Hash(
            (0..(i % 20 + 2))
                .map(|f| (format!("f{f}"), format!("{i}-{f}")))
                .collect(),
        ),
        1 => Value::List((0..(i % 30 + 1)).map(|e| format!("{i}:{e}")).collect()),
        2 => Value::SortedSet(
            (0..(i % 15 + 1))
                .map(|m| (format!("m{m}"), (i * m) as f64 / 3.0))
                .collect(),
        ),
        // One key in ten: 8 to 40 KiB; the rest small.
        n if n % 10 == 3 => Value::String(bytes(i, 8 * 1024 + (i * 131) % (32 * 1024))),
        _ => Value::String(bytes(i, 1 + (i * 7) % 300)),
    }
}

/// Keys with a time to live: every 13th (an hour; they must come back with one).
pub fn expires(i: usize) -> bool {
    i.is_multiple_of(13)
}

pub fn write(conn: &mut redis::Connection, n: usize) {
    for start in (0..n).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1000).min(n) {
            let k = key(i);
            match value(i) {
                Value::String(v) => {
                    pipe.set(&k, v).ignore();
                }
                Value::Hash(h) => {
                    let pairs: Vec<(String, String)> = h.into_iter().collect();
                    pipe.hset_multiple(&k, &pairs).ignore();
                }
                Value::List(l) => {
                    pipe.rpush(&k, l).ignore();
                }
                Value::SortedSet(z) => {
                    let members: Vec<(f64, String)> = z.into_iter().map(|(m, s)| (s, m)).collect();
                    pipe.zadd_multiple(&k, &members).ignore();
                }
            }
            if expires(i) {
                pipe.expire(&k, 3600).ignore();
            }
        }
        pipe.query::<()>(conn).expect("writing the dataset");
    }
}

/// Checks every key's value (and time to live) and that there is nothing else.
pub fn check(conn: &mut redis::Connection, n: usize) {
    let size: usize = redis::cmd("DBSIZE").query(conn).expect("DBSIZE");
    assert_eq!(size, n, "keys in the restored server");
    for start in (0..n).step_by(500) {
        let range: Vec<usize> = (start..(start + 500).min(n)).collect();
        let mut pipe = redis::pipe();
        for &i in &range {
            let k = key(i);
            match value(i) {
                Value::String(_) => pipe.get(&k),
                Value::Hash(_) => pipe.hgetall(&k),
                Value::List(_) => pipe.lrange(&k, 0, -1),
                Value::SortedSet(_) => pipe.zrange_withscores(&k, 0, -1),
            };
            pipe.ttl(&k);
        }
        let replies: Vec<redis::Value> = pipe.query(conn).expect("reading the dataset");
        for (pair, &i) in replies.chunks(2).zip(&range) {
            let got = &pair[0];
            let expected = value(i);
            let same = match &expected {
                Value::String(v) => {
                    redis::from_redis_value_ref::<Vec<u8>>(got).ok().as_ref() == Some(v)
                }
                Value::Hash(h) => {
                    redis::from_redis_value_ref::<BTreeMap<String, String>>(got)
                        .ok()
                        .as_ref()
                        == Some(h)
                }
                Value::List(l) => {
                    redis::from_redis_value_ref::<Vec<String>>(got)
                        .ok()
                        .as_ref()
                        == Some(l)
                }
                Value::SortedSet(z) => {
                    redis::from_redis_value_ref::<Vec<(String, f64)>>(got)
                        .ok()
                        .as_ref()
                        == Some(z)
                }
            };
            assert!(same, "{} holds {got:?}, not {expected:?}", key(i));
            let ttl: i64 = redis::from_redis_value_ref(&pair[1]).expect("ttl");
            if expires(i) {
                assert!(ttl > 0 && ttl <= 3600, "{} has TTL {ttl}", key(i));
            } else {
                assert_eq!(ttl, -1, "{} has a TTL", key(i));
            }
        }
    }
}
