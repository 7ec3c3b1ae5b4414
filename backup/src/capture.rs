//! Capture: the RDB a Valkey server hands a replica, streamed into one object.
//!
//! The capture connects as a replica would (Valkey's own replication protocol; see
//! `replication.c`, the same on 8.0 and 9.1):
//!
//! 1. `AUTH <user> <password>`: a user with the rights of a replication link and nothing else
//!    ([`BACKUP_RULES`]).
//! 2. `REPLCONF capa eof capa psync2`: it reads the diskless `$EOF:` form, so the server may
//!    stream its snapshot from the fork straight to the socket. Valkey 8.0 does so when
//!    `repl-diskless-sync` is on (the default) and otherwise writes the RDB file and sends it
//!    sized; 9.1 streams to an rdb-only link whatever that setting says. Without `capa eof`
//!    ([`CaptureOptions::offer_diskless`]) every version sends the sized form. No
//!    `capa dual-channel`: a dual-channel sync would send the RDB on a second connection.
//! 3. `REPLCONF rdb-only 1`: the snapshot and nothing after it. The server keeps no replication
//!    buffer for this link and closes it once the RDB is sent; it never counts it as a replica
//!    that could be waited on or promoted. (`REPLCONF rdb-filter-only` exists too, to ask for a
//!    part of the data; a backup wants all of it.)
//! 4. `PSYNC ? -1`, not `SYNC`: the same full sync, but the server first answers
//!    `+FULLRESYNC <replication id> <offset>`, the point of its history the snapshot holds, which
//!    the manifest records. (`SYNC` sends the payload with no such line.)
//!
//! Then the payload: after `\n` keep-alives while the fork starts, either `$<length>\r\n` and
//! that many bytes, or `$EOF:<40 random bytes>\r\n`, the bytes, and the same 40 bytes again as
//! the end mark. Both are read the same way, in chunks, each hashed (SHA-256) and appended to the
//! part being filled; a full part goes to the store while the next fills.
//!
//! Memory is bounded by the parts: at most `parts_in_flight` parts uploading plus the one
//! filling, each `part_size` bytes, plus a 64 KiB read buffer: with the defaults (16 MiB parts,
//! two in flight) at most 48 MiB and 64 KiB per capture, whatever the dataset's size. The
//! store caps a multipart upload at 10,000 parts, so 16 MiB parts allow objects up to 160 GB.
//!
//! The object is completed only when the whole payload arrived and ends as an RDB ends (the EOF
//! opcode before the checksum); any failure before that aborts the multipart upload, so the
//! store never holds a committed object that is not a whole RDB. When the store itself cannot
//! be reached, the abort cannot be either: the upload stays incomplete (never an object), and
//! the error says so. A capture whose future is dropped leaves its upload incomplete the same
//! way. A bucket lifecycle rule that aborts incomplete uploads after a day cleans both up.
//!
//! Not yet: TLS to the server (the same handshake over a rustls stream, verified against the
//! cluster's CA as the rest of the operator does; the store side already speaks TLS).

use std::time::{Duration, Instant};

use bytes::BytesMut;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::rdb;
use crate::store::{Store, StoreError};

/// The ACL rules of a backup user: the handshake of a replication link (AUTH and HELLO are
/// open to every user) and nothing else: no key, no channel, no other command. `SYNC` is the
/// older form of the same request, listed so that tools like `valkey-cli --rdb` work with it
/// too. Every name exists on Valkey 8.0 and 9.x.
pub const BACKUP_RULES: &str = "resetkeys resetchannels -@all +psync +sync +replconf";

/// The length of the `$EOF:` form's end mark.
pub const EOF_MARK_LEN: usize = 40;

const READ_BUFFER: usize = 64 * 1024;
const MAX_LINE: u64 = 4096;

/// The server to capture from, and the backup user's credentials.
#[derive(Clone)]
pub struct Source {
    /// `host:port`.
    pub address: String,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("address", &self.address)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How a capture streams (see the module's doc for the memory these allow).
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub part_size: usize,
    pub parts_in_flight: usize,
    pub connect_timeout: Duration,
    /// The longest silence from the server. While it forks and writes a disk-based snapshot it
    /// sends a `\n` every second, so a minute of nothing is a dead server or link.
    pub idle_timeout: Duration,
    /// Offer the diskless `$EOF:` form (`capa eof`). With it the server streams from its fork
    /// when `repl-diskless-sync` is on (8.0), and always for an rdb-only link (9.1 streams even
    /// with `repl-diskless-sync no`); without it, it must write the RDB file first and send it
    /// sized, which costs the source a file on its volume.
    pub offer_diskless: bool,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        Self {
            part_size: 16 * 1024 * 1024,
            parts_in_flight: 2,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            offer_diskless: true,
        }
    }
}

/// How the server sent its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PayloadForm {
    /// `$<length>`: the RDB file the server wrote (`repl-diskless-sync no`).
    Sized,
    /// `$EOF:<mark>`: streamed from the fork (`repl-diskless-sync yes`).
    Diskless,
}

/// What a completed capture holds and what the server said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The object's name under the store's prefix.
    pub object: String,
    /// From `+FULLRESYNC`: the replication history and the offset in it that the snapshot holds.
    pub replication_id: String,
    pub offset: u64,
    pub rdb_version: u32,
    pub bytes: u64,
    /// SHA-256 of the whole object, hex.
    pub sha256: String,
    pub form: PayloadForm,
    pub parts: usize,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("connecting to {address}: {detail}")]
    Connect { address: String, detail: String },
    #[error("{address} refused {command}: {reply}")]
    Refused {
        address: String,
        command: &'static str,
        reply: String,
    },
    #[error("{address}: unexpected reply: {detail}")]
    Protocol { address: String, detail: String },
    #[error("reading the snapshot from {address} after {bytes} bytes: {detail}")]
    Stream {
        address: String,
        bytes: u64,
        detail: String,
    },
    #[error("the snapshot from {address} is not a whole RDB: {detail}")]
    NotRdb { address: String, detail: String },
    #[error("uploading {object}: {source}{}", abort_note(.abort))]
    Store {
        object: String,
        #[source]
        source: Box<StoreError>,
        /// Why aborting the upload failed too, if it did: the upload is then left incomplete
        /// (no object) until the bucket's lifecycle rule or a later abort removes it.
        abort: Option<String>,
    },
}

fn abort_note(abort: &Option<String>) -> String {
    match abort {
        Some(e) => format!(
            "; aborting the upload failed too ({e}): it is left incomplete, never an object"
        ),
        None => "; the upload was aborted".to_owned(),
    }
}

/// One RESP command.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The line that starts the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PayloadHeader {
    Sized(u64),
    Diskless([u8; EOF_MARK_LEN]),
}

fn payload_header(line: &[u8]) -> Result<PayloadHeader, String> {
    let text = line
        .strip_prefix(b"$")
        .ok_or_else(|| format!("{:?} where the snapshot should start", lossy(line)))?;
    if let Some(mark) = text.strip_prefix(b"EOF:") {
        let mark: [u8; EOF_MARK_LEN] = mark
            .try_into()
            .map_err(|_| format!("an EOF mark of {} bytes, not {EOF_MARK_LEN}", mark.len()))?;
        return Ok(PayloadHeader::Diskless(mark));
    }
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .map(PayloadHeader::Sized)
        .ok_or_else(|| format!("a payload length that is not a number: {:?}", lossy(line)))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}

/// Finds the `$EOF:` form's end mark in a stream read in chunks of any size: it holds back the
/// last 40 bytes seen, which are either payload or the mark.
#[derive(Debug)]
struct EofScanner {
    mark: [u8; EOF_MARK_LEN],
    held: Vec<u8>,
}

impl EofScanner {
    fn new(mark: [u8; EOF_MARK_LEN]) -> Self {
        Self {
            mark,
            held: Vec::with_capacity(2 * EOF_MARK_LEN),
        }
    }

    /// Takes a chunk; hands `emit` the bytes now known to be payload; true once the mark ended
    /// the stream.
    fn push(&mut self, chunk: &[u8], emit: &mut impl FnMut(&[u8])) -> bool {
        if chunk.len() >= EOF_MARK_LEN {
            emit(&self.held);
            let (payload, tail) = chunk.split_at(chunk.len() - EOF_MARK_LEN);
            emit(payload);
            self.held.clear();
            self.held.extend_from_slice(tail);
        } else {
            self.held.extend_from_slice(chunk);
            let excess = self.held.len().saturating_sub(EOF_MARK_LEN);
            emit(&self.held[..excess]);
            self.held.drain(..excess);
        }
        self.held.len() == EOF_MARK_LEN && self.held == self.mark
    }
}

/// What the payload loop keeps: the hash, the count, the header and the last bytes.
struct Tally {
    hash: Sha256,
    bytes: u64,
    header: Vec<u8>,
    last: Vec<u8>,
}

impl Tally {
    fn new() -> Self {
        Self {
            hash: Sha256::new(),
            bytes: 0,
            header: Vec::with_capacity(rdb::HEADER_LEN),
            last: Vec::with_capacity(2 * rdb::TRAILER_LEN),
        }
    }

    fn add(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.hash.update(data);
        self.bytes += data.len() as u64;
        if self.header.len() < rdb::HEADER_LEN {
            let want = (rdb::HEADER_LEN - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..want]);
        }
        if data.len() >= rdb::TRAILER_LEN {
            self.last.clear();
            self.last
                .extend_from_slice(&data[data.len() - rdb::TRAILER_LEN..]);
        } else {
            self.last.extend_from_slice(data);
            let excess = self.last.len().saturating_sub(rdb::TRAILER_LEN);
            self.last.drain(..excess);
        }
    }
}

/// Parts on their way to the store, at most `limit` at once.
struct Parts {
    upload: Box<dyn MultipartUpload>,
    filling: BytesMut,
    part_size: usize,
    limit: usize,
    running: JoinSet<object_store::Result<()>>,
    sent: usize,
}

impl Parts {
    fn add(&mut self, data: &[u8]) {
        self.filling.extend_from_slice(data);
    }

    /// Sends the filling part once it is full (or, at the end, whatever it holds), after
    /// waiting for room.
    async fn flush(&mut self, last: bool) -> object_store::Result<()> {
        while self.filling.len() >= self.part_size || (last && !self.filling.is_empty()) {
            while self.running.len() >= self.limit {
                self.join_one().await?;
            }
            let take = self.filling.len().min(self.part_size);
            let part = self.filling.split_to(take).freeze();
            self.running
                .spawn(self.upload.put_part(PutPayload::from(part)));
            self.sent += 1;
            if self.filling.capacity() < self.part_size {
                self.filling.reserve(self.part_size - self.filling.len());
            }
        }
        Ok(())
    }

    async fn join_one(&mut self) -> object_store::Result<()> {
        match self.running.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(join)) => Err(object_store::Error::Generic {
                store: "S3",
                source: Box::new(join),
            }),
            None => Ok(()),
        }
    }

    async fn finish(&mut self) -> object_store::Result<()> {
        self.flush(true).await?;
        while !self.running.is_empty() {
            self.join_one().await?;
        }
        self.upload.complete().await.map(|_| ())
    }
}

/// Where a capture went wrong once its upload had begun: the upload is aborted and the error
/// tells whether that worked.
enum Failure {
    Capture(CaptureError),
    Store(object_store::Error),
}

/// Captures `source`'s snapshot into the object `name` under `store`'s prefix. `progress` is
/// told the bytes received so far each time a part is handed to the store.
pub async fn capture(
    source: &Source,
    store: &Store,
    name: &str,
    options: &CaptureOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Captured, CaptureError> {
    begin(source, options)
        .await?
        .finish(store, name, options, progress)
        .await
}

/// A capture whose server has answered `+FULLRESYNC`: its snapshot is fixed (the server forked,
/// or joined a fork, before it answered), at [`Begun::offset`] of [`Begun::replication_id`];
/// nothing written to the server from now on is in it. [`Begun::finish`] streams it. Split
/// from [`capture`] so that a backup can begin every shard's capture while the primaries'
/// writes are paused, and let them go on as soon as every snapshot is fixed.
pub struct Begun {
    conn: Conn,
    address: String,
    started: Instant,
    pub replication_id: String,
    pub offset: u64,
}

impl std::fmt::Debug for Begun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Begun")
            .field("address", &self.address)
            .field("replication_id", &self.replication_id)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// Connects to `source` and asks for its snapshot, up to `+FULLRESYNC` (see [`Begun`]).
pub async fn begin(source: &Source, options: &CaptureOptions) -> Result<Begun, CaptureError> {
    let started = Instant::now();
    let (conn, replication_id, offset) = handshake(source, options).await?;
    Ok(Begun {
        conn,
        address: source.address.clone(),
        started,
        replication_id,
        offset,
    })
}

impl Begun {
    /// Streams the begun snapshot into the object `name` (see [`capture`]).
    pub async fn finish(
        self,
        store: &Store,
        name: &str,
        options: &CaptureOptions,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Captured, CaptureError> {
        let Begun {
            mut conn,
            address,
            started,
            replication_id,
            offset,
        } = self;
        let header = payload_header_of(&mut conn, &address, options).await?;
        streamed(
            conn,
            Fixed {
                address,
                started,
                replication_id,
                offset,
                header,
            },
            store,
            name,
            options,
            progress,
        )
        .await
    }
}

/// What is known of a capture once its payload's header was read.
struct Fixed {
    address: String,
    started: Instant,
    replication_id: String,
    offset: u64,
    header: PayloadHeader,
}

async fn streamed(
    mut conn: Conn,
    fixed: Fixed,
    store: &Store,
    name: &str,
    options: &CaptureOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Captured, CaptureError> {
    let Fixed {
        address,
        started,
        replication_id,
        offset,
        header,
    } = fixed;

    // The upload starts only once the server has agreed to send: a refused handshake leaves
    // nothing in the store.
    let path = store.path(name);
    let object = name.to_owned();
    let upload = store
        .inner()
        .put_multipart(&path)
        .await
        .map_err(|e| CaptureError::Store {
            object: object.clone(),
            source: Box::new(store.error(e)),
            abort: None,
        })?;
    let mut parts = Parts {
        upload,
        filling: BytesMut::with_capacity(options.part_size),
        part_size: options.part_size.max(5 * 1024 * 1024),
        limit: options.parts_in_flight.max(1),
        running: JoinSet::new(),
        sent: 0,
    };
    let mut tally = Tally::new();
    let result = stream(
        &mut conn, &address, &header, options, &mut tally, &mut parts, progress,
    )
    .await;
    let result = match result {
        Ok(()) => check_rdb(&address, &tally).map_err(Failure::Capture),
        Err(failure) => Err(failure),
    };
    let result = match result {
        Ok(()) => parts.finish().await.map_err(Failure::Store),
        Err(failure) => Err(failure),
    };
    if let Err(failure) = result {
        parts.running.shutdown().await;
        let abort = parts.upload.abort().await.err().map(|e| e.to_string());
        return Err(match failure {
            Failure::Store(source) => CaptureError::Store {
                object,
                source: Box::new(store.error(source)),
                abort,
            },
            // The snapshot was the problem; an abort that failed as well is worth a log line,
            // not a second error.
            Failure::Capture(error) => {
                if let Some(abort) = abort {
                    tracing::warn!(%object, %abort, "aborting the upload of a failed capture failed");
                }
                error
            }
        });
    }
    let rdb_version = rdb::version(&tally.header).map_err(|detail| CaptureError::NotRdb {
        address: address.clone(),
        detail,
    })?;
    Ok(Captured {
        object,
        replication_id,
        offset,
        rdb_version,
        bytes: tally.bytes,
        sha256: hex::encode(tally.hash.finalize()),
        form: match header {
            PayloadHeader::Sized(_) => PayloadForm::Sized,
            PayloadHeader::Diskless(_) => PayloadForm::Diskless,
        },
        parts: parts.sent,
        duration: started.elapsed(),
    })
}

fn check_rdb(address: &str, tally: &Tally) -> Result<(), CaptureError> {
    let not_rdb = |detail: String| CaptureError::NotRdb {
        address: address.to_owned(),
        detail,
    };
    rdb::version(&tally.header).map_err(not_rdb)?;
    if !rdb::ends_complete(&tally.last) {
        return Err(not_rdb(format!(
            "its {} bytes do not end with the RDB end marker",
            tally.bytes
        )));
    }
    Ok(())
}

type Conn = BufReader<TcpStream>;

async fn handshake(
    source: &Source,
    options: &CaptureOptions,
) -> Result<(Conn, String, u64), CaptureError> {
    let address = source.address.clone();
    let connect_error = |detail: String| CaptureError::Connect {
        address: address.clone(),
        detail,
    };
    let tcp = tokio::time::timeout(options.connect_timeout, TcpStream::connect(&address))
        .await
        .map_err(|_| connect_error(format!("no answer in {:?}", options.connect_timeout)))?
        .map_err(|e| connect_error(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let mut conn = BufReader::with_capacity(READ_BUFFER, tcp);

    let steps: [(&'static str, Vec<u8>); 3] = [
        (
            "AUTH",
            command(&[b"AUTH", source.user.as_bytes(), source.password.as_bytes()]),
        ),
        (
            "REPLCONF capa",
            if options.offer_diskless {
                command(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
            } else {
                command(&[b"REPLCONF", b"capa", b"psync2"])
            },
        ),
        (
            "REPLCONF rdb-only",
            command(&[b"REPLCONF", b"rdb-only", b"1"]),
        ),
    ];
    for (name, bytes) in steps {
        send(&mut conn, &address, &bytes, options).await?;
        let line = read_line(&mut conn, &address, options).await?;
        if line != b"+OK" {
            return Err(refused(&address, name, &line));
        }
    }
    send(
        &mut conn,
        &address,
        &command(&[b"PSYNC", b"?", b"-1"]),
        options,
    )
    .await?;
    let line = read_line(&mut conn, &address, options).await?;
    let (replication_id, offset) = full_resync(&line).ok_or_else(|| {
        if line.starts_with(b"-") {
            refused(&address, "PSYNC", &line)
        } else {
            CaptureError::Protocol {
                address: address.clone(),
                detail: format!("{:?} where +FULLRESYNC was expected", lossy(&line)),
            }
        }
    })?;
    Ok((conn, replication_id, offset))
}

/// The payload's first line after `+FULLRESYNC` (past the `\n` keep-alives): its form.
async fn payload_header_of(
    conn: &mut Conn,
    address: &str,
    options: &CaptureOptions,
) -> Result<PayloadHeader, CaptureError> {
    let line = read_line(conn, address, options).await?;
    payload_header(&line).map_err(|detail| {
        if line.starts_with(b"-") {
            refused(address, "PSYNC", &line)
        } else {
            CaptureError::Protocol {
                address: address.to_owned(),
                detail,
            }
        }
    })
}

fn refused(address: &str, command: &'static str, line: &[u8]) -> CaptureError {
    CaptureError::Refused {
        address: address.to_owned(),
        command,
        reply: lossy(line.strip_prefix(b"-").unwrap_or(line)),
    }
}

fn full_resync(line: &[u8]) -> Option<(String, u64)> {
    let text = std::str::from_utf8(line.strip_prefix(b"+FULLRESYNC ")?).ok()?;
    let (id, offset) = text.split_once(' ')?;
    (id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(())
        .and_then(|()| Some((id.to_owned(), offset.trim().parse().ok()?)))
}

async fn send(
    conn: &mut Conn,
    address: &str,
    bytes: &[u8],
    options: &CaptureOptions,
) -> Result<(), CaptureError> {
    tokio::time::timeout(options.idle_timeout, conn.get_mut().write_all(bytes))
        .await
        .map_err(|_| "timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|detail| CaptureError::Connect {
            address: address.to_owned(),
            detail,
        })
}

/// One reply line without its `\r\n`, skipping the bare `\n` keep-alives a server sends while
/// it prepares the snapshot.
async fn read_line(
    conn: &mut Conn,
    address: &str,
    options: &CaptureOptions,
) -> Result<Vec<u8>, CaptureError> {
    loop {
        let mut line = Vec::new();
        let read = tokio::time::timeout(
            options.idle_timeout,
            (&mut *conn).take(MAX_LINE).read_until(b'\n', &mut line),
        )
        .await
        .map_err(|_| format!("no reply in {:?}", options.idle_timeout))
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|detail| CaptureError::Protocol {
            address: address.to_owned(),
            detail,
        })?;
        if read == 0 || line.last() != Some(&b'\n') {
            return Err(CaptureError::Protocol {
                address: address.to_owned(),
                detail: if read == 0 {
                    "the server closed the connection".to_owned()
                } else {
                    format!("a reply line longer than {MAX_LINE} bytes")
                },
            });
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        if !line.is_empty() {
            return Ok(line);
        }
    }
}

async fn stream(
    conn: &mut Conn,
    address: &str,
    header: &PayloadHeader,
    options: &CaptureOptions,
    tally: &mut Tally,
    parts: &mut Parts,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), Failure> {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut remaining = match header {
        PayloadHeader::Sized(len) => Some(*len),
        PayloadHeader::Diskless(_) => None,
    };
    let mut scanner = match header {
        PayloadHeader::Diskless(mark) => Some(EofScanner::new(*mark)),
        PayloadHeader::Sized(_) => None,
    };
    let stream_error = |bytes: u64, detail: String| {
        Failure::Capture(CaptureError::Stream {
            address: address.to_owned(),
            bytes,
            detail,
        })
    };
    loop {
        let want = match remaining {
            Some(0) => return Ok(()),
            Some(n) => buf.len().min(usize::try_from(n).unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        let read = tokio::time::timeout(options.idle_timeout, conn.read(&mut buf[..want]))
            .await
            .map_err(|_| {
                stream_error(
                    tally.bytes,
                    format!("nothing for {:?}", options.idle_timeout),
                )
            })?
            .map_err(|e| stream_error(tally.bytes, e.to_string()))?;
        if read == 0 {
            let expected = match remaining {
                Some(n) => format!("{n} bytes short of the announced length"),
                None => "before the end mark".to_owned(),
            };
            return Err(stream_error(
                tally.bytes,
                format!("the server closed the connection {expected}"),
            ));
        }
        let chunk = &buf[..read];
        let done = match (&mut scanner, &mut remaining) {
            (Some(scanner), _) => scanner.push(chunk, &mut |data| {
                tally.add(data);
                parts.add(data);
            }),
            (None, Some(n)) => {
                tally.add(chunk);
                parts.add(chunk);
                *n -= read as u64;
                *n == 0
            }
            (None, None) => unreachable!("a sized payload has a length"),
        };
        if parts.filling.len() >= parts.part_size {
            parts.flush(false).await.map_err(Failure::Store)?;
            progress(tally.bytes);
        }
        if done {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(mark: [u8; EOF_MARK_LEN], chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut scanner = EofScanner::new(mark);
        let mut out = Vec::new();
        let mut done = false;
        for chunk in chunks {
            assert!(!done, "data after the end mark");
            done = scanner.push(chunk, &mut |d| out.extend_from_slice(d));
        }
        (out, done)
    }

    #[test]
    fn the_end_mark_is_found_across_any_chunking() {
        let mark = *b"0123456789abcdef0123456789abcdef01234567";
        let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut whole = payload.clone();
        whole.extend_from_slice(&mark);
        for size in [1, 7, 39, 40, 41, 100, 1040] {
            let chunks: Vec<&[u8]> = whole.chunks(size).collect();
            let (out, done) = scan(mark, &chunks);
            assert!(done, "chunks of {size}");
            assert_eq!(out, payload, "chunks of {size}");
        }
    }

    #[test]
    fn a_stream_cut_before_the_mark_is_not_done() {
        let mark = [b'm'; EOF_MARK_LEN];
        let (out, done) = scan(mark, &[b"REDIS0011", &[b'm'; 39]]);
        assert!(!done);
        assert_eq!(out.len(), 9 + 39 - EOF_MARK_LEN);
    }

    #[test]
    fn payload_headers() {
        assert_eq!(payload_header(b"$1234"), Ok(PayloadHeader::Sized(1234)));
        let mark = [b'a'; EOF_MARK_LEN];
        let mut line = b"$EOF:".to_vec();
        line.extend_from_slice(&mark);
        assert_eq!(payload_header(&line), Ok(PayloadHeader::Diskless(mark)));
        assert!(payload_header(b"$EOF:short").is_err());
        assert!(payload_header(b"$-1").is_err());
        assert!(payload_header(b"+OK").is_err());
    }

    #[test]
    fn full_resync_lines() {
        let id = "a".repeat(40);
        assert_eq!(
            full_resync(format!("+FULLRESYNC {id} 1234").as_bytes()),
            Some((id.clone(), 1234))
        );
        assert_eq!(full_resync(b"+FULLRESYNC short 1"), None);
        assert_eq!(full_resync(format!("+CONTINUE {id}").as_bytes()), None);
        assert_eq!(full_resync(format!("+FULLRESYNC {id} x").as_bytes()), None);
    }

    #[test]
    fn tally_keeps_the_header_and_the_last_bytes() {
        let mut tally = Tally::new();
        for chunk in [&b"RED"[..], b"IS0011\x01\x02", b"abc", b"\xff1234567", b"8"] {
            tally.add(chunk);
        }
        assert_eq!(tally.header, b"REDIS0011");
        assert_eq!(tally.last, b"\xff12345678");
        assert!(rdb::ends_complete(&tally.last));
        assert_eq!(tally.bytes, 23);
    }

    #[test]
    fn resp_commands() {
        assert_eq!(
            command(&[b"PSYNC", b"?", b"-1"]),
            b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n"
        );
    }
}
