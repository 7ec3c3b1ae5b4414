//! `valkey-restore`: the init container of a member restored from a backup. It fetches one
//! snapshot from the object store into the server's data folder and checks it (length, SHA-256,
//! RDB header and end) before `valkey-server` may start, once per data folder (see
//! `backup::restore`). Any error: a message naming the object on stderr (and in the container's
//! termination message), exit status 1, no snapshot left for the server to load.
//!
//! No Kubernetes client: the node-controller passes everything as arguments, and the store's
//! credentials as files of the Secret mounted into this container only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use backup::restore::{InitialData, RestoreOutcome, restore};
use backup::{Store, StoreConfig};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "valkey-restore",
    about = "Fetch one checked RDB snapshot into a Valkey data folder before the server starts"
)]
struct Args {
    /// The server's data folder.
    #[arg(long, default_value = "/data")]
    dir: PathBuf,
    /// The server's dbfilename.
    #[arg(long, default_value = "dump.rdb")]
    dbfilename: String,
    /// The snapshot's key under the store's prefix.
    #[arg(long)]
    object: String,
    /// Its SHA-256, lower-case hex.
    #[arg(long)]
    sha256: String,
    /// Its length in bytes.
    #[arg(long)]
    bytes: u64,
    /// The newest RDB version the server reads (refused before it starts when newer).
    #[arg(long)]
    max_rdb_version: Option<u32>,
    /// `https://host[:port]`; AWS S3 of the region when absent.
    #[arg(long)]
    endpoint: Option<String>,
    #[arg(long)]
    bucket: String,
    #[arg(long, default_value = "")]
    prefix: String,
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Path-style requests (`https://host/bucket/key`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    path_style: bool,
    /// PEM certificates to trust for the endpoint instead of the system's.
    #[arg(long)]
    ca_bundle_file: Option<PathBuf>,
    /// Files holding the access key id and the secret access key (a mounted Secret's keys).
    #[arg(long)]
    access_key_id_file: PathBuf,
    #[arg(long)]
    secret_access_key_file: PathBuf,
    /// How long requests to the store are retried before the restore fails.
    #[arg(long, default_value_t = 120)]
    retry_timeout_seconds: u64,
    /// Where the message of a failure is also written, for the pod's status.
    #[arg(long, default_value = "/dev/termination-log")]
    termination_log: PathBuf,
}

fn read_secret(path: &PathBuf, what: &str) -> Result<String, String> {
    // The path is printed, never the content.
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| format!("reading the {what} from {}: {e}", path.display()))
        .and_then(|s| {
            if s.is_empty() {
                Err(format!("the {what} in {} is empty", path.display()))
            } else {
                Ok(s)
            }
        })
}

fn config(args: &Args) -> Result<StoreConfig, String> {
    Ok(StoreConfig {
        endpoint: args.endpoint.clone(),
        bucket: args.bucket.clone(),
        prefix: args.prefix.clone(),
        region: args.region.clone(),
        path_style: args.path_style,
        ca_bundle: match &args.ca_bundle_file {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| format!("reading the CA bundle {}: {e}", path.display()))?,
            ),
            None => None,
        },
        access_key_id: read_secret(&args.access_key_id_file, "access key id")?,
        secret_access_key: read_secret(&args.secret_access_key_file, "secret access key")?,
        retry_timeout: Duration::from_secs(args.retry_timeout_seconds),
        request_timeout: Duration::from_secs(30),
    })
}

async fn run(args: &Args) -> Result<RestoreOutcome, String> {
    let location = format!("s3://{}/{}", args.bucket, args.object);
    let store = config(args)
        .and_then(|c| Store::new(&c).map_err(|e| e.to_string()))
        .map_err(|e| format!("initial data {location}: {e}"))?;
    let data = InitialData {
        object: args.object.clone(),
        sha256: args.sha256.clone(),
        bytes: args.bytes,
    };
    restore(
        &store,
        &data,
        &args.dir,
        &args.dbfilename,
        args.max_rdb_version,
    )
    .await
    .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("valkey-restore: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(RestoreOutcome::AlreadyRestored) => {
            eprintln!(
                "valkey-restore: {} already holds the snapshot {} (marker present): nothing to do",
                args.dir.display(),
                args.object
            );
            ExitCode::SUCCESS
        }
        Ok(RestoreOutcome::Restored {
            fetched,
            rdb_version,
        }) => {
            eprintln!(
                "valkey-restore: restored {} ({} bytes, SHA-256 {}, RDB version {rdb_version}) into {}",
                args.object,
                fetched.bytes,
                fetched.sha256,
                args.dir.join(&args.dbfilename).display()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("valkey-restore: {message}");
            // Kubernetes shows this file's content as the container's termination message;
            // absent outside a pod.
            if args.termination_log.exists() {
                let _ = std::fs::write(&args.termination_log, &message);
            }
            ExitCode::FAILURE
        }
    }
}
