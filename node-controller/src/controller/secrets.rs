//! The secrets stage: the credentials Secret a node names, read for the node-controller's own
//! PING, and the CA of its TLS Secret, to verify the server with. The credentials' values never
//! leave this module except as the `Credentials` whose Debug hides the password; of the TLS
//! Secret only the CA (no secret) is read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use plumbing::secret_cache::SecretCache;
use plumbing::valkey_tls::Trust;
use valkey_api::contract::TLS_CA_KEY;
use valkey_api::v1alpha1::ValkeyNode;

use super::error::Error;
use crate::probe::Credentials;
use crate::status::CredentialsState;

/// How long credentials found in a Secret are used without looking at it again; at once when
/// the server refuses what was remembered (see [`Known::forget`]). A look costs no request while
/// the Secret is unchanged (the Secrets come from a watch of their metadata, see
/// [`SecretCache`]). A Secret deleted or emptied is said in the `Credentials` condition within
/// this long.
pub const CREDENTIALS_FRESH: Duration = Duration::from_secs(60);

/// Where a node's credentials come from, in the Secret it names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Source {
    namespace: String,
    secret: String,
    key: String,
    username: String,
}

impl Source {
    fn of(node: &ValkeyNode) -> Option<Self> {
        let spec = node.spec.credentials.as_ref()?;
        Some(Self {
            namespace: node.namespace().unwrap_or_default(),
            secret: spec.secret_name.clone(),
            key: spec.password_key.clone(),
            username: spec.username.clone(),
        })
    }
}

/// The credentials last found in each Secret, and when they were read: held in this process's
/// memory only, never written anywhere, and dropped once stale.
#[derive(Default)]
pub struct Known(Mutex<HashMap<Source, (Credentials, Instant)>>);

impl Known {
    /// The credentials `node` names, from memory when read from its Secret less than
    /// [`CREDENTIALS_FRESH`] ago, else from the Secret (`remembered` says which).
    pub async fn read(&self, node: &ValkeyNode, secrets: &SecretCache) -> Result<Read, Error> {
        let Some(source) = Source::of(node) else {
            return Ok(Read::default());
        };
        if let Some(credentials) = self.fresh(&source) {
            return Ok(Read {
                state: Some(CredentialsState::Found),
                credentials: Some(credentials),
                remembered: true,
            });
        }
        let (state, credentials) = read(node, secrets).await?;
        let mut known = self.lock();
        known.retain(|_, (_, read_at)| read_at.elapsed() < CREDENTIALS_FRESH);
        match &credentials {
            Some(found) => known.insert(source, (found.clone(), Instant::now())),
            None => known.remove(&source),
        };
        Ok(Read {
            state,
            credentials,
            remembered: false,
        })
    }

    /// Forgets what `node`'s Secret held: the server refused it, so the next read asks the API.
    pub fn forget(&self, node: &ValkeyNode) {
        if let Some(source) = Source::of(node) {
            self.lock().remove(&source);
        }
    }

    fn fresh(&self, source: &Source) -> Option<Credentials> {
        self.lock()
            .get(source)
            .filter(|(_, read_at)| read_at.elapsed() < CREDENTIALS_FRESH)
            .map(|(credentials, _)| credentials.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Source, (Credentials, Instant)>> {
        // The map holds no invariant a panicking holder could break.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A node's credentials: the state to report, the credentials when found, and whether they came
/// from memory rather than from the Secret just now.
#[derive(Debug, Default)]
pub struct Read {
    pub state: Option<CredentialsState>,
    pub credentials: Option<Credentials>,
    pub remembered: bool,
}

/// The credentials Secret, read for the node-controller's own PING. Its values never leave this
/// function except as the `Credentials` whose Debug hides the password.
pub async fn read(
    node: &ValkeyNode,
    secrets: &SecretCache,
) -> Result<(Option<CredentialsState>, Option<Credentials>), Error> {
    let Some(spec) = &node.spec.credentials else {
        return Ok((None, None));
    };
    let secret = secrets
        .get(&node.namespace().unwrap_or_default(), &spec.secret_name)
        .await
        .map_err(|source| Error::Secret {
            name: spec.secret_name.clone(),
            source,
        })?;
    let Some(secret) = secret else {
        return Ok((
            Some(CredentialsState::SecretMissing {
                secret: spec.secret_name.clone(),
            }),
            None,
        ));
    };
    let password = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&spec.password_key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok());
    Ok(match password {
        Some(password) => (
            Some(CredentialsState::Found),
            Some(Credentials {
                username: spec.username.clone(),
                password,
            }),
        ),
        None => (
            Some(CredentialsState::KeyMissing {
                secret: spec.secret_name.clone(),
                key: spec.password_key.clone(),
            }),
            None,
        ),
    })
}

/// The CA of the TLS Secret a node names: `None` for a plain node, `Some(Err(why))` when the
/// Secret or its `ca.crt` is missing (the pod cannot start without it either).
pub async fn read_trust(
    node: &ValkeyNode,
    secrets: &SecretCache,
) -> Result<Option<Result<Trust, String>>, Error> {
    let Some(tls) = &node.spec.tls else {
        return Ok(None);
    };
    let secret = secrets
        .get(&node.namespace().unwrap_or_default(), &tls.secret_name)
        .await
        .map_err(|source| Error::Secret {
            name: tls.secret_name.clone(),
            source,
        })?;
    let ca = secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(TLS_CA_KEY))
        .filter(|v| !v.0.is_empty());
    Ok(Some(match (&secret, ca) {
        (None, _) => Err(format!(
            "the TLS Secret {} of spec.tls does not exist",
            tls.secret_name
        )),
        (Some(_), None) => Err(format!(
            "the TLS Secret {} has no {TLS_CA_KEY} to verify the server with",
            tls.secret_name
        )),
        (Some(_), Some(ca)) => Ok(Trust::from_pem(ca.0.clone())),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{NODE, node};
    use http::Method;

    #[tokio::test]
    async fn a_missing_secret_or_key_is_a_state_to_report_and_a_found_one_gives_credentials() {
        let yaml = format!(
            "{NODE}  credentials: {{secretName: cache-acl, username: healthcheck, passwordKey: healthcheck-password}}\n"
        );
        let with_credentials = node(&yaml);
        let (client, mut api) = plumbing::testing::mock_client();
        let cache = SecretCache::unwatched(client);
        let script = tokio::spawn(async move {
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .not_found();
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .answer(
                    http::StatusCode::OK,
                    &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cache-acl"}, "data": {"other": "eA=="}}),
                );
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .answer(
                    http::StatusCode::OK,
                    // "s3cret", base64
                    &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cache-acl"}, "data": {"healthcheck-password": "czNjcmV0"}}),
                );
            api.done().await;
        });
        let missing = read(&with_credentials, &cache)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            missing,
            (Some(CredentialsState::SecretMissing { .. }), None)
        ));
        let no_key = read(&with_credentials, &cache)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            no_key,
            (Some(CredentialsState::KeyMissing { .. }), None)
        ));
        let found = read(&with_credentials, &cache)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        script.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(found.0, Some(CredentialsState::Found)));
        let credentials = found.1.unwrap_or_else(|| panic!("no credentials"));
        assert_eq!(
            (credentials.username.as_str(), credentials.password.as_str()),
            ("healthcheck", "s3cret")
        );

        // A node without credentials reads nothing.
        let (client, api) = plumbing::testing::mock_client();
        let cache = SecretCache::unwatched(client);
        assert!(matches!(read(&node(NODE), &cache).await, Ok((None, None))));
        api.done().await;
    }

    /// The Secret is read once for all the reads within [`CREDENTIALS_FRESH`], whichever node
    /// names it, and again after `forget`; a Secret without the password is not remembered.
    #[tokio::test]
    async fn credentials_are_read_once_a_minute_and_again_once_forgotten() {
        let yaml = |name: &str| {
            format!(
                "{}  credentials: {{secretName: cache-acl, username: healthcheck, passwordKey: healthcheck-password}}\n",
                NODE.replace("name: cache-0-0", &format!("name: {name}"))
            )
        };
        let (first, second) = (node(&yaml("cache-0-0")), node(&yaml("cache-0-1")));
        let (client, mut api) = plumbing::testing::mock_client();
        let cache = SecretCache::unwatched(client);
        let script = tokio::spawn(async move {
            for password in ["czNjcmV0", "bmV3"] {
                api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                    .await
                    .answer(
                        http::StatusCode::OK,
                        &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cache-acl"}, "data": {"healthcheck-password": password}}),
                    );
            }
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .not_found();
            api.expect(Method::GET, "/api/v1/namespaces/prod/secrets/cache-acl")
                .await
                .not_found();
            api.done().await;
        });
        let known = Known::default();
        let password = |read: &Read| read.credentials.as_ref().map(|c| c.password.clone());
        let read = async |node: &ValkeyNode| {
            known
                .read(node, &cache)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let read_first = read(&first).await;
        assert!(!read_first.remembered);
        let again = read(&second).await;
        assert!(again.remembered, "read again within the minute");
        assert_eq!(password(&again).as_deref(), Some("s3cret"));
        assert!(matches!(again.state, Some(CredentialsState::Found)));
        known.forget(&first);
        let refreshed = read(&second).await;
        assert!(!refreshed.remembered);
        assert_eq!(password(&refreshed).as_deref(), Some("new"));
        known.forget(&first);
        let gone = read(&first).await;
        assert!(matches!(
            gone.state,
            Some(CredentialsState::SecretMissing { .. })
        ));
        let still_gone = read(&first).await;
        assert!(!still_gone.remembered, "a missing Secret was remembered");
        script.await.unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn a_node_without_credentials_reads_nothing_and_remembers_nothing() {
        let (client, api) = plumbing::testing::mock_client();
        let cache = SecretCache::unwatched(client);
        let known = Known::default();
        let read = known.read(&node(NODE), &cache).await;
        assert!(matches!(
            read,
            Ok(Read {
                state: None,
                credentials: None,
                remembered: false
            })
        ));
        api.done().await;
    }
}
