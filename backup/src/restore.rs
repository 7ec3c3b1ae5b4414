//! Restore's half inside the pod: one shard's snapshot fetched into the server's data folder
//! before `valkey-server` starts, checked against what the parent says it must be, or nothing.
//!
//! Fail closed: the snapshot is written to `<dbfilename>.partial`, its length and SHA-256
//! computed as it streams, its RDB header and end checked; only then is it renamed to the
//! server's `dbfilename` and the marker `.initial-data-<sha256>` written. Any error leaves no
//! `dbfilename` of ours behind, and the caller (the init container) exits non-zero, so the pod
//! never starts serving from a snapshot that is not the one asked for.
//!
//! The marker makes it happen once per data folder: a restarted pod whose folder already loaded
//! this snapshot (and may since hold newer writes) is left alone.

use std::path::{Path, PathBuf};

use crate::rdb;
use crate::store::{Fetched, Store};

/// What the parent asked for (the ValkeyNode's `spec.initialData` without the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialData {
    /// The key under the store's prefix.
    pub object: String,
    /// Lower-case hex.
    pub sha256: String,
    pub bytes: u64,
}

/// What a restore did to the data folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// The snapshot is now the server's `dbfilename`.
    Restored { fetched: Fetched, rdb_version: u32 },
    /// The marker was there: this folder has loaded it before; nothing was touched.
    AlreadyRestored,
}

/// Why the snapshot was not restored; the message names the object.
#[derive(Debug, thiserror::Error)]
#[error("initial data {location}: {problem}")]
pub struct RestoreError {
    /// `s3://<bucket>/<key>`: the object, never a credential.
    pub location: String,
    pub problem: String,
}

/// Where the server keeps its append-only files (Valkey's default `appenddirname`). A server
/// with `appendonly yes` loads these and ignores `dbfilename`, so a folder that has them already
/// holds a server's data, which a snapshot must not be put beside.
pub const AOF_DIR: &str = "appendonlydir";

/// The marker's file name in the data folder.
pub fn marker_name(sha256: &str) -> String {
    format!(".initial-data-{sha256}")
}

/// Fetches `data.object` into `dir/dbfilename` unless `dir` has this snapshot's marker.
/// `max_rdb_version`: the newest RDB version the server that will load it reads, when known.
pub async fn restore(
    store: &Store,
    data: &InitialData,
    dir: &Path,
    dbfilename: &str,
    max_rdb_version: Option<u32>,
) -> Result<RestoreOutcome, RestoreError> {
    let location = format!("s3://{}/{}", store.bucket(), store.path(&data.object));
    let fail = |problem: String| RestoreError {
        location: location.clone(),
        problem,
    };
    if data.sha256.len() != 64
        || !data
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(fail(format!(
            "the expected SHA-256 {:?} is not 64 lower-case hex digits",
            data.sha256
        )));
    }
    if dbfilename.is_empty() || dbfilename.contains('/') || dbfilename.starts_with('.') {
        return Err(fail(format!(
            "dbfilename {dbfilename:?} is not a plain file name"
        )));
    }
    let marker = dir.join(marker_name(&data.sha256));
    if marker.exists() {
        return Ok(RestoreOutcome::AlreadyRestored);
    }
    if dir.join(AOF_DIR).exists() {
        return Err(fail(format!(
            "the data folder {} already holds append-only files ({AOF_DIR}) and no marker of this \
             snapshot: it is a server's data, not loaded over",
            dir.display()
        )));
    }
    let partial = dir.join(format!("{dbfilename}.partial"));
    let result = fetch_checked(store, data, &partial, max_rdb_version).await;
    let rdb_version = match result {
        Ok(v) => v,
        Err(problem) => {
            let _ = std::fs::remove_file(&partial);
            return Err(fail(problem));
        }
    };
    let target = dir.join(dbfilename);
    let committed = std::fs::rename(&partial, &target)
        .map_err(|e| {
            format!(
                "renaming {} to {}: {e}",
                partial.display(),
                target.display()
            )
        })
        .and_then(|()| sync_dir(dir))
        .and_then(|()| write_marker(dir, &marker, data));
    if let Err(problem) = committed {
        // Neither the snapshot without its marker (a restart would fetch it again anyway, but a
        // server must not start from it in between) nor a half-written marker.
        let _ = std::fs::remove_file(&partial);
        let _ = std::fs::remove_file(&target);
        return Err(fail(problem));
    }
    Ok(RestoreOutcome::Restored {
        fetched: Fetched {
            bytes: data.bytes,
            sha256: data.sha256.clone(),
        },
        rdb_version,
    })
}

/// Downloads into `partial` and checks it; returns the RDB version.
async fn fetch_checked(
    store: &Store,
    data: &InitialData,
    partial: &Path,
    max_rdb_version: Option<u32>,
) -> Result<u32, String> {
    let mut file = tokio::fs::File::create(partial)
        .await
        .map_err(|e| format!("creating {}: {e}", partial.display()))?;
    let fetched = store
        .fetch_into(&data.object, &mut file)
        .await
        .map_err(|e| format!("fetching: {}", one_line(&error_chain(&e))))?;
    file.sync_all()
        .await
        .map_err(|e| format!("writing {}: {e}", partial.display()))?;
    drop(file);
    if fetched.bytes != data.bytes {
        return Err(format!(
            "length {} bytes, expected {}: not the snapshot the backup recorded",
            fetched.bytes, data.bytes
        ));
    }
    if fetched.sha256 != data.sha256 {
        return Err(format!(
            "SHA-256 {} does not match the expected {}: the snapshot changed since it was taken",
            fetched.sha256, data.sha256
        ));
    }
    let (head, tail) = ends(partial).map_err(|e| format!("reading {}: {e}", partial.display()))?;
    let version = rdb::version(&head)?;
    if let Some(max) = max_rdb_version.filter(|max| version > *max) {
        return Err(format!(
            "RDB version {version} is newer than {max}, the newest this server reads"
        ));
    }
    if !rdb::ends_complete(&tail) {
        return Err("the RDB has no end (EOF opcode and checksum): it was cut short".to_owned());
    }
    Ok(version)
}

/// The first and last bytes of a file (the RDB header and trailer).
fn ends(path: &Path) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(rdb::HEADER_LEN);
    (&mut file)
        .take(rdb::HEADER_LEN as u64)
        .read_to_end(&mut head)?;
    let len = file.metadata()?.len();
    let mut tail = Vec::with_capacity(rdb::TRAILER_LEN);
    file.seek(SeekFrom::Start(len.saturating_sub(rdb::TRAILER_LEN as u64)))?;
    file.read_to_end(&mut tail)?;
    Ok((head, tail))
}

/// The marker, written whole or not at all: a temporary file synced, then renamed.
fn write_marker(dir: &Path, marker: &Path, data: &InitialData) -> Result<(), String> {
    use std::io::Write;
    let tmp: PathBuf = dir.join(".initial-data.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        writeln!(file, "{} {} {}", data.object, data.bytes, data.sha256)?;
        file.sync_all()?;
        std::fs::rename(&tmp, marker)
    };
    write()
        .map_err(|e| format!("writing the marker {}: {e}", marker.display()))
        .and_then(|()| sync_dir(dir))
}

/// A rename is durable once the folder is synced.
fn sync_dir(dir: &Path) -> Result<(), String> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("syncing the folder {}: {e}", dir.display()))
}

/// At most 512 characters on one line: the store's error can carry its XML answer, and the
/// message ends up in a condition.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(512) {
        Some((cut, _)) => format!("{}...", &flat[..cut]),
        None => flat,
    }
}

/// An error with its sources, on one line: object_store's top message alone often says only
/// "Generic S3 error".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_become_one_short_line() {
        assert_eq!(one_line("a\n  b\t<x>\n"), "a b <x>");
        let long = "y".repeat(600);
        assert_eq!(one_line(&long).len(), 515);
    }

    #[test]
    fn the_marker_is_named_after_the_checksum() {
        assert_eq!(marker_name("ab12"), ".initial-data-ab12");
    }

    #[tokio::test]
    async fn a_malformed_checksum_or_file_name_is_refused_before_any_request() {
        // Port 1 of loopback: nothing answers there, so a request would fail differently.
        let store = Store::new(&crate::StoreConfig::s3_compatible(
            "http://127.0.0.1:1",
            "b",
            "k",
            "s",
        ))
        .expect("store");
        let dir = std::env::temp_dir().join(format!("restore-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut data = InitialData {
            object: "x/shard-0.rdb".into(),
            sha256: "ABC".into(),
            bytes: 1,
        };
        let e = restore(&store, &data, &dir, "dump.rdb", None)
            .await
            .expect_err("bad checksum");
        assert!(e.to_string().contains("s3://b/x/shard-0.rdb"), "{e}");
        assert!(e.problem.contains("64 lower-case hex"), "{e}");
        data.sha256 = "0".repeat(64);
        let e = restore(&store, &data, &dir, "../dump.rdb", None)
            .await
            .expect_err("bad file name");
        assert!(e.problem.contains("plain file name"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
