//! The benchmark's keys: a deterministic data set (every value can be rebuilt from its index and
//! the seed, so checking a million keys needs no copy of them in memory), loaded and read back by
//! pipelines sent straight to each slot's owner.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use redis::IntoConnectionInfo;
use redis::aio::MultiplexedConnection;

use super::view::ClusterView;
use crate::{E2eError, Result};

/// Commands per pipeline when loading or reading back.
const PIPELINE: usize = 256;
/// Pipelines in flight per server.
const IN_FLIGHT: usize = 4;

/// `keys` keys `rk:<i>` whose values average `value_bytes` bytes (each between half and one and a
/// half times that), cut from a pool of pseudo-random bytes at offsets drawn from `seed`:
/// incompressible, like the serialized objects a cache holds, and of mixed sizes. A value is
/// rebuilt from its index, so checking a million keys keeps no copy of them.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub keys: u64,
    pub value_bytes: u64,
    pub seed: u64,
    pool: Arc<Vec<u8>>,
}

/// Bytes the values are cut from: large enough that two values rarely share their bytes.
const POOL: usize = 8 << 20;

impl Dataset {
    pub fn new(keys: u64, value_bytes: u64, seed: u64) -> Self {
        let mut pool = Vec::with_capacity(POOL + 8);
        let mut state = seed;
        while pool.len() < POOL {
            state = splitmix64(state);
            pool.extend_from_slice(&state.to_le_bytes());
        }
        Self {
            keys,
            value_bytes: value_bytes.max(1),
            seed,
            pool: Arc::new(pool),
        }
    }

    pub fn key(&self, i: u64) -> String {
        format!("rk:{i}")
    }

    pub fn value_len(&self, i: u64) -> usize {
        let mean = self.value_bytes;
        let spread = splitmix64(self.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % (mean + 1);
        usize::try_from(mean / 2 + spread).unwrap_or(usize::MAX)
    }

    pub fn value(&self, i: u64) -> &[u8] {
        let len = self.value_len(i).min(self.pool.len());
        let room = (self.pool.len() - len + 1) as u64;
        let offset = usize::try_from(splitmix64(self.seed.rotate_left(17) ^ i) % room).unwrap_or(0);
        &self.pool[offset..offset + len]
    }

    /// Key and value bytes of key `i`.
    pub fn bytes_of(&self, i: u64) -> u64 {
        (self.key(i).len() + self.value_len(i)) as u64
    }

    pub fn slot_of(&self, i: u64) -> u16 {
        key_slot(self.key(i).as_bytes())
    }

    /// How many keys and bytes (keys and values) fall in each slot.
    pub fn per_slot(&self) -> Vec<(u64, u64)> {
        let mut slots = vec![(0u64, 0u64); 16384];
        for i in 0..self.keys {
            let entry = &mut slots[usize::from(self.slot_of(i))];
            entry.0 += 1;
            entry.1 += self.bytes_of(i);
        }
        slots
    }

    /// The smallest and largest value, in bytes.
    pub fn value_range(&self) -> (u64, u64) {
        let mean = self.value_bytes;
        (mean / 2, mean / 2 + mean)
    }
}

/// One step of SplitMix64: a fast generator whose output is fine for filler bytes.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The cluster hash slot of a key: CRC16 (XMODEM) of the key, or of its `{hash tag}` when it has
/// a non-empty one, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A connection to one server that waits long for replies: big pipelines take a while, and so
/// may any command while the machine is busy (the default gives up after half a second).
pub async fn bulk_connection(ip: &str) -> Result<MultiplexedConnection> {
    bulk_connection_as(ip, None).await
}

/// [`bulk_connection`] as the default user with `password` (the clients' password of a cluster
/// with auth on).
pub async fn bulk_connection_as(ip: &str, password: Option<&str>) -> Result<MultiplexedConnection> {
    let err = |source| E2eError::Valkey {
        addr: ip.to_owned(),
        source,
    };
    let mut info = redis::ConnectionAddr::Tcp(ip.to_owned(), 6379)
        .into_connection_info()
        .map_err(err)?;
    if let Some(password) = password {
        info =
            info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(password));
    }
    let client = redis::Client::open(info).map_err(err)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(120)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(err)
}

/// A pipeline's failure, shortened: one error per command would fill a screen.
fn failed(ip: &str, e: &redis::RedisError) -> E2eError {
    let text = e.to_string();
    let cut: String = text.chars().take(300).collect();
    E2eError::Check(format!("pipeline to {ip} failed: {cut}"))
}

/// The key indexes each primary of `view` owns, by its address.
fn by_owner(data: &Dataset, view: &ClusterView) -> Result<Vec<(String, Vec<u64>)>> {
    let owners = view.owners();
    let mut groups: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for i in 0..data.keys {
        let slot = data.slot_of(i);
        let owner = owners[usize::from(slot)]
            .as_ref()
            .ok_or_else(|| E2eError::Check(format!("slot {slot} has no owner")))?;
        let ip = view
            .node(owner)
            .map(|n| n.ip.clone())
            .ok_or_else(|| E2eError::Check(format!("no address for node {owner}")))?;
        groups.entry(ip).or_default().push(i);
    }
    Ok(groups.into_iter().collect())
}

/// Writes every key of `data` to its owner in `view`.
pub async fn load(data: &Dataset, view: &ClusterView) -> Result<()> {
    load_as(data, view, None).await
}

/// [`load`] with the clients' `password`.
pub async fn load_as(data: &Dataset, view: &ClusterView, password: Option<&str>) -> Result<()> {
    let groups = by_owner(data, view)?;
    let servers = groups.into_iter().map(|(ip, keys)| async move {
        let conn = bulk_connection_as(&ip, password).await?;
        futures::stream::iter(keys.chunks(PIPELINE).map(Ok::<_, E2eError>))
            .try_for_each_concurrent(IN_FLIGHT, |chunk| {
                let mut conn = conn.clone();
                let ip = ip.clone();
                async move {
                    let mut pipe = redis::pipe();
                    for i in chunk {
                        pipe.cmd("SET")
                            .arg(data.key(*i))
                            .arg(data.value(*i))
                            .ignore();
                    }
                    pipe.query_async::<()>(&mut conn)
                        .await
                        .map_err(|e| failed(&ip, &e))
                }
            })
            .await
    });
    futures::future::try_join_all(servers).await.map(|_| ())
}

/// What reading every key back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readback {
    /// Keys read back with their exact value.
    pub intact: u64,
    /// Keys missing, or read back with another value (or an error), a few of them named.
    pub lost: u64,
    pub examples: Vec<String>,
}

/// Reads every key of `data` from its owner in `view` and compares it with its value.
pub async fn read_back(data: &Dataset, view: &ClusterView) -> Result<Readback> {
    read_back_as(data, view, None).await
}

/// [`read_back`] with the clients' `password`.
pub async fn read_back_as(
    data: &Dataset,
    view: &ClusterView,
    password: Option<&str>,
) -> Result<Readback> {
    let groups = by_owner(data, view)?;
    let servers = groups.into_iter().map(|(ip, keys)| async move {
        let conn = bulk_connection_as(&ip, password).await?;
        let results: Vec<Readback> = futures::stream::iter(keys.chunks(PIPELINE))
            .map(|chunk| {
                let mut conn = conn.clone();
                let ip = ip.clone();
                async move {
                    let mut pipe = redis::pipe();
                    for i in chunk {
                        pipe.cmd("GET").arg(data.key(*i));
                    }
                    // One reply per key; an error reply (MOVED, say) counts as a lost key.
                    let replies: Vec<redis::Value> = pipe
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| failed(&ip, &e))?;
                    let mut found = Readback::default();
                    for (i, reply) in chunk.iter().zip(replies) {
                        match reply {
                            redis::Value::BulkString(bytes) if bytes == data.value(*i) => {
                                found.intact += 1;
                            }
                            _ => {
                                found.lost += 1;
                                if found.examples.len() < 5 {
                                    found.examples.push(data.key(*i));
                                }
                            }
                        }
                    }
                    Ok::<_, E2eError>(found)
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await?;
        Ok::<_, E2eError>(results)
    });
    let mut total = Readback::default();
    for part in futures::future::try_join_all(servers)
        .await?
        .into_iter()
        .flatten()
    {
        total.intact += part.intact;
        total.lost += part.lost;
        if total.examples.len() < 10 {
            total.examples.extend(part.examples);
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_valkeys() {
        // Reference values from CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag hashes the whole key.
        assert_eq!(key_slot(b"{}foo"), crc16(b"{}foo") % 16384);
        // The CRC16 check value of "123456789" (0x31c3) is below 16384.
        assert_eq!(key_slot(b"123456789"), 0x31c3);
    }

    #[test]
    fn values_are_rebuilt_alike_and_sized_around_the_mean() {
        let data = Dataset::new(10_000, 1000, 7);
        assert_eq!(data.value(42), data.value(42));
        assert_ne!(data.value(42), data.value(43));
        let total: u64 = (0..data.keys).map(|i| data.value_len(i) as u64).sum();
        let mean = total / data.keys;
        assert!((950..=1050).contains(&mean), "mean {mean}");
        let (min, max) = data.value_range();
        assert!((0..data.keys).all(|i| (min..=max).contains(&(data.value_len(i) as u64))));
    }
}
