//! The object store a backup goes to: S3 or any S3-compatible server (endpoint, bucket, prefix,
//! region, path-style requests, a CA bundle, credentials).
//!
//! The client is the `object_store` crate (Apache Arrow's), chosen over `aws-sdk-s3` and
//! `rust-s3`:
//! - one `ObjectStore` trait over S3, GCS and Azure Blob, so the API's store can grow those kinds
//!   without another client; `aws-sdk-s3` is S3 alone, and `rust-s3` too;
//! - everything the capture needs from S3: multipart uploads part by part (`put_multipart`,
//!   parts uploaded while the next one fills, `abort`), any endpoint, path-style or
//!   virtual-hosted requests, plain HTTP for a test server, a CA bundle of the caller's (with the
//!   system's trust store off, so only that CA is trusted), retries with backoff and a deadline;
//! - checksums the server checks: with `x-amz-checksum-sha256` on every part and in the
//!   completion, S3 refuses a part whose bytes changed on the way. S3's checksum of a multipart
//!   object is a checksum of the parts' checksums, so the SHA-256 of the whole object is computed
//!   here while streaming and kept in the manifest, where restore checks it;
//! - small: it signs requests itself over reqwest and hyper (both already in the workspace
//!   through kube) and can use ring, the workspace's crypto, where `aws-sdk-s3` brings the whole
//!   AWS SDK runtime and aws-lc-rs (a C build of its own) and takes minutes to compile on two
//!   cores.
//!
//! Credentials are read from the caller (in the operator: a Secret) and never printed: the
//! configuration's `Debug` leaves them out.

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::path::Path;
use object_store::{
    BackoffConfig, Certificate, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig,
};
use sha2::{Digest, Sha256};

/// Where backups go, and how to reach it.
#[derive(Clone)]
pub struct StoreConfig {
    /// `https://host:port` or `http://host:port`; `None` for AWS itself (from `region`).
    pub endpoint: Option<String>,
    pub bucket: String,
    /// Every object's key starts with this (no leading or trailing `/` needed).
    pub prefix: String,
    pub region: String,
    /// `https://endpoint/bucket/key` rather than `https://bucket.endpoint/key`: what most
    /// S3-compatible servers inside a cluster need (no wildcard DNS for bucket names).
    pub path_style: bool,
    /// PEM certificates to trust instead of the system's.
    pub ca_bundle: Option<Vec<u8>>,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// How long one request may retry before the error is the caller's.
    pub retry_timeout: Duration,
    /// How long a request may wait for the server's answer.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("ca_bundle", &self.ca_bundle.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl StoreConfig {
    /// An S3-compatible server at `endpoint`, path-style, with object_store's request timeout
    /// and a retry deadline of a minute.
    pub fn s3_compatible(
        endpoint: impl Into<String>,
        bucket: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
            bucket: bucket.into(),
            prefix: String::new(),
            region: "us-east-1".to_owned(),
            path_style: true,
            ca_bundle: None,
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            retry_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("object store configuration: {0}")]
    Config(String),
    #[error("object store {bucket}: {source}")]
    Request {
        bucket: String,
        #[source]
        source: object_store::Error,
    },
}

/// A bucket and prefix, ready for requests.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
}

/// What a download holds: its length and SHA-256, computed as it streamed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
    pub sha256: String,
}

impl Store {
    pub fn new(config: &StoreConfig) -> Result<Self, StoreError> {
        // reqwest's rustls is built without a crypto provider of its own (the workspace uses
        // ring, not aws-lc-rs): give the process ring if nothing else did first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut client = ClientOptions::new().with_timeout(config.request_timeout);
        if let Some(endpoint) = &config.endpoint {
            client = client.with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(pem) = &config.ca_bundle {
            for cert in Certificate::from_pem_bundle(pem)
                .map_err(|e| StoreError::Config(format!("CA bundle: {e}")))?
            {
                client = client.with_root_certificate(cert);
            }
            client = client.with_no_system_certificates(true);
        }
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 10,
            retry_timeout: config.retry_timeout,
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            .with_virtual_hosted_style_request(!config.path_style)
            .with_checksum_algorithm(Checksum::SHA256)
            .with_retry(retry)
            .with_client_options(client);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
        }
        let inner = builder
            .build()
            .map_err(|e| StoreError::Config(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(inner),
            bucket: config.bucket.clone(),
            prefix: config.prefix.trim_matches('/').to_owned(),
        })
    }

    /// The full key of `name` under the prefix.
    pub fn path(&self, name: &str) -> Path {
        let name = name.trim_start_matches('/');
        if self.prefix.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub(crate) fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    pub(crate) fn error(&self, source: object_store::Error) -> StoreError {
        StoreError::Request {
            bucket: self.bucket.clone(),
            source,
        }
    }

    /// A small object in one request (the manifest).
    pub async fn put(&self, name: &str, body: Vec<u8>) -> Result<(), StoreError> {
        self.inner
            .put(&self.path(name), body.into())
            .await
            .map(|_| ())
            .map_err(|e| self.error(e))
    }

    /// A whole small object in memory (the manifest).
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let got = self
            .inner
            .get(&self.path(name))
            .await
            .map_err(|e| self.error(e))?;
        got.bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| self.error(e))
    }

    /// Streams an object into `sink` (a file, a pipe), chunk by chunk, and says how long it was
    /// and its SHA-256: what restore checks against the manifest before anything loads it.
    pub async fn fetch_into<W>(&self, name: &str, sink: &mut W) -> Result<Fetched, StoreError>
    where
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::AsyncWriteExt;
        let got = self
            .inner
            .get(&self.path(name))
            .await
            .map_err(|e| self.error(e))?;
        let mut stream = got.into_stream();
        let mut hash = Sha256::new();
        let mut bytes = 0u64;
        while let Some(chunk) = stream.try_next().await.map_err(|e| self.error(e))? {
            hash.update(&chunk);
            bytes += chunk.len() as u64;
            sink.write_all(&chunk).await.map_err(|e| {
                self.error(object_store::Error::Generic {
                    store: "sink",
                    source: Box::new(e),
                })
            })?;
        }
        sink.flush().await.map_err(|e| {
            self.error(object_store::Error::Generic {
                store: "sink",
                source: Box::new(e),
            })
        })?;
        Ok(Fetched {
            bytes,
            sha256: hex::encode(hash.finalize()),
        })
    }

    /// Whether an object exists (a committed one: an incomplete multipart upload is none).
    pub async fn exists(&self, name: &str) -> Result<bool, StoreError> {
        match self.inner.head(&self.path(name)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        match self.inner.delete(&self.path(name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The names (under the prefix) of the committed objects below `dir`.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let base = self.path(dir);
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        self.inner
            .list(Some(&base))
            .map_ok(|meta| {
                let key = meta.location.to_string();
                key.strip_prefix(&strip).unwrap_or(&key).to_owned()
            })
            .try_collect()
            .await
            .map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sit_under_the_prefix_whatever_its_slashes() {
        let mut config = StoreConfig::s3_compatible("http://127.0.0.1:1", "b", "k", "s");
        config.prefix = "/team/backups/".to_owned();
        let store = Store::new(&config).expect("store");
        assert_eq!(
            store.path("/vkb-1/shard-0.rdb").as_ref(),
            "team/backups/vkb-1/shard-0.rdb"
        );
        config.prefix = String::new();
        let store = Store::new(&config).expect("store");
        assert_eq!(store.path("m.json").as_ref(), "m.json");
    }

    #[test]
    fn debug_leaves_the_credentials_out() {
        let config = StoreConfig::s3_compatible("http://h", "b", "AKIDVISIBLE", "very-secret");
        let text = format!("{config:?}");
        assert!(
            !text.contains("very-secret") && !text.contains("AKIDVISIBLE"),
            "{text}"
        );
    }
}
