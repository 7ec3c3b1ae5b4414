//! Counting the requests a controller sends to the Kubernetes API: a tower layer on the kube
//! client's service that counts every request by verb and resource into
//! `kube_api_requests_total{verb, resource}` before passing it on. The API server's own metrics
//! see every client at once; this says what one controller costs it (the fleet benchmark reads it
//! to show a fleet at rest writes nothing).
//!
//! The verb is Kubernetes' own, from the method, the path and the `watch` parameter: `GET` (one
//! object), `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE` (`OTHER` for anything else). The
//! resource is the plural name, with the subresource after a slash (`valkeynodes/status`);
//! `discovery` for the API's own descriptions, `other` for a path that names no resource. Both
//! labels come from a fixed set (the kinds a controller touches), never from object names.
//!
//! The layer wraps the client's whole stack, so it counts the requests the controller makes: one
//! that kube's own retry layer (inside the stack) sends again after a 429 or 503 counts once.

use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Method, Request, Uri};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The labels of `kube_api_requests_total`. `verb` comes first, so that a reader can sum a
/// verb's lines by the prefix `kube_api_requests_total{verb="PATCH"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    pub verb: &'static str,
    pub resource: String,
}

/// The verbs that only read: everything else changes something (or tries to).
pub const READ_VERBS: [&str; 3] = ["GET", "LIST", "WATCH"];

/// Kubernetes' verb and the resource of a request.
pub fn classify(method: &Method, uri: &Uri) -> ApiRequestLabels {
    let target = Target::of(uri.path());
    let verb = match *method {
        Method::GET if is_watch(uri.query()) => "WATCH",
        Method::GET if target.named => "GET",
        Method::GET => "LIST",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    };
    ApiRequestLabels {
        verb,
        resource: target.resource,
    }
}

/// What a path names: a resource (and subresource), and whether one object of it.
struct Target {
    resource: String,
    named: bool,
}

impl Target {
    fn of(path: &str) -> Self {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // `/api/v1/...` (the core group) or `/apis/<group>/<version>/...`; shorter paths are
        // discovery (`/api`, `/apis`, `/apis/<group>/<version>`), as are `/version` and
        // `/openapi/...`.
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => rest,
            ["apis", _group, _version, rest @ ..] if !rest.is_empty() => rest,
            ["api" | "apis" | "version" | "openapi", ..] => return Self::named("discovery", true),
            _ => return Self::named("other", true),
        };
        // A namespaced path starts `namespaces/<ns>/<resource>`; `namespaces` and
        // `namespaces/<ns>` (and its subresources, such as `finalize`) are the Namespace kind.
        let rest = match rest {
            ["namespaces", _namespace, inner @ ..]
                if !inner.is_empty() && !is_namespace_sub(inner) =>
            {
                inner
            }
            other => other,
        };
        match rest {
            [resource] => Self::named(resource, false),
            [resource, _name] => Self::named(resource, true),
            [resource, _name, sub, ..] => Self::named(&format!("{resource}/{sub}"), true),
            [] => Self::named("other", true),
        }
    }

    fn named(resource: &str, named: bool) -> Self {
        Self {
            resource: resource.to_owned(),
            named,
        }
    }
}

/// `namespaces/<ns>/status` and `namespaces/<ns>/finalize` are subresources of the Namespace,
/// not a resource inside it.
fn is_namespace_sub(inner: &[&str]) -> bool {
    matches!(inner, ["status" | "finalize"])
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair.split_once('='), Some(("watch", "true" | "1"))))
    })
}

/// The layer to add to the kube client's service (`ClientBuilder::with_layer`): each request is
/// counted into `family` when it is sent.
#[derive(Clone, Debug)]
pub struct CountApiRequests {
    family: Family<ApiRequestLabels, Counter>,
}

impl CountApiRequests {
    pub fn new(family: Family<ApiRequestLabels, Counter>) -> Self {
        Self { family }
    }
}

impl<S> tower::Layer<S> for CountApiRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            family: self.family.clone(),
        }
    }
}

/// A service that counts each request, then hands it to the service it wraps unchanged.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    family: Family<ApiRequestLabels, Counter>,
}

impl<S, B> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.family
            .get_or_create(&classify(request.method(), request.uri()))
            .inc();
        self.inner.call(request)
    }
}

/// The longest a request waits for the API server to send anything. kube sets no such limit,
/// so a request on a connection that died unseen (opened while the API server was restarting,
/// or cut by a partition) waits forever, and with it the pass that sent it. Longer than a
/// watch's own time ([`crate::cache::WATCH_TIMEOUT_SECONDS`]), so a watch with nothing to say
/// ends the server's way first.
pub const READ_TIMEOUT: Duration = Duration::from_secs(70);

/// A kube client from the environment (in-cluster, else `KUBECONFIG`), as
/// `kube::Client::try_default` builds it, with every request counted into `family` and
/// [`READ_TIMEOUT`] on every read.
pub async fn counted_client(
    family: Family<ApiRequestLabels, Counter>,
) -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    client_from(config, family, READ_TIMEOUT)
}

/// A client for `config`, counted into `family`, giving up on a response after `read_timeout`
/// without a byte. The timeout counts from when the request was sent, not from when its pooled
/// connection was last used (`reset_reader_on_write`).
pub fn client_from(
    mut config: kube::Config,
    family: Family<ApiRequestLabels, Counter>,
    read_timeout: Duration,
) -> Result<kube::Client, kube::Error> {
    config.read_timeout = Some(read_timeout);
    config.reset_reader_on_write = true;
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&CountApiRequests::new(family))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> (&'static str, String) {
        let uri: Uri = uri.parse().unwrap_or_default();
        let labels = classify(&method, &uri);
        (labels.verb, labels.resource)
    }

    fn pair(verb: &'static str, resource: &str) -> (&'static str, String) {
        (verb, resource.to_owned())
    }

    /// A connection that died unseen: the server takes the request and never answers. Without a
    /// read timeout the request, and the pass that sent it, would wait forever.
    #[tokio::test]
    async fn a_request_the_server_never_answers_fails_after_the_read_timeout()
    -> Result<(), Box<dyn std::error::Error>> {
        use k8s_openapi::api::core::v1::ConfigMap;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let read_timeout = Duration::from_millis(500);
        let client = client_from(
            kube::Config::new(url.parse()?),
            Family::default(),
            read_timeout,
        )?;
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(20), api.get("any")).await;
        silent.abort();
        let Ok(answer) = outcome else {
            panic!("the request was still waiting 20 s later");
        };
        assert!(
            answer.is_err(),
            "a silent server cannot have answered: {answer:?}"
        );
        assert!(
            started.elapsed() >= read_timeout,
            "it gave up before the timeout"
        );
        Ok(())
    }

    #[test]
    fn verbs_of_reads() {
        let path = "/api/v1/namespaces/prod/pods";
        assert_eq!(of(Method::GET, path), pair("LIST", "pods"));
        assert_eq!(
            of(
                Method::GET,
                &format!("{path}?labelSelector=a%3Db&limit=500")
            ),
            pair("LIST", "pods")
        );
        assert_eq!(
            of(Method::GET, &format!("{path}?watch=true&resourceVersion=7")),
            pair("WATCH", "pods")
        );
        assert_eq!(
            of(Method::GET, &format!("{path}?resourceVersion=7&watch=1")),
            pair("WATCH", "pods")
        );
        // `watch=false` is a list.
        assert_eq!(
            of(Method::GET, &format!("{path}?watch=false")),
            pair("LIST", "pods")
        );
        assert_eq!(of(Method::GET, &format!("{path}/p-0")), pair("GET", "pods"));
        assert_eq!(
            of(
                Method::GET,
                "/apis/valkey.io/v1alpha1/valkeynodes?watch=true"
            ),
            pair("WATCH", "valkeynodes")
        );
    }

    #[test]
    fn verbs_of_writes_and_subresources() {
        let node = "/apis/valkey.io/v1alpha1/namespaces/prod/valkeynodes/cache-0-0";
        assert_eq!(
            of(Method::PATCH, &format!("{node}/status?fieldManager=x")),
            pair("PATCH", "valkeynodes/status")
        );
        assert_eq!(of(Method::PUT, node), pair("PUT", "valkeynodes"));
        assert_eq!(of(Method::DELETE, node), pair("DELETE", "valkeynodes"));
        assert_eq!(
            of(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/prod/events"
            ),
            pair("POST", "events")
        );
        assert_eq!(
            of(Method::POST, "/api/v1/namespaces/prod/pods/p-0/eviction"),
            pair("POST", "pods/eviction")
        );
        assert_eq!(
            of(Method::HEAD, "/api/v1/namespaces/prod/pods/p-0"),
            pair("OTHER", "pods")
        );
    }

    #[test]
    fn namespaces_nodes_and_discovery() {
        assert_eq!(
            of(Method::GET, "/api/v1/namespaces"),
            pair("LIST", "namespaces")
        );
        assert_eq!(
            of(Method::GET, "/api/v1/namespaces/prod"),
            pair("GET", "namespaces")
        );
        assert_eq!(
            of(Method::PUT, "/api/v1/namespaces/prod/finalize"),
            pair("PUT", "namespaces/finalize")
        );
        assert_eq!(of(Method::GET, "/api/v1/nodes/n-1"), pair("GET", "nodes"));
        assert_eq!(
            of(
                Method::PATCH,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.valkey.io"
            ),
            pair("PATCH", "customresourcedefinitions")
        );
        for path in [
            "/api",
            "/apis",
            "/apis/valkey.io/v1alpha1",
            "/version",
            "/api/v1",
        ] {
            assert_eq!(of(Method::GET, path), pair("GET", "discovery"), "{path}");
        }
        assert_eq!(of(Method::GET, "/healthz"), pair("GET", "other"));
    }

    /// A kube client whose every request gets an empty 200 answer, wrapped in the layer: the
    /// requests kube's own `Api` builds are counted by verb and resource.
    #[tokio::test]
    async fn the_layer_counts_what_a_kube_client_sends() {
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, ListParams, Patch, PatchParams, WatchParams};

        let family = Family::<ApiRequestLabels, Counter>::default();
        let answer = tower::service_fn(|_: Request<kube::client::Body>| async {
            Ok::<_, std::convert::Infallible>(axum::http::Response::new(kube::client::Body::from(
                b"{}".to_vec(),
            )))
        });
        let service = tower::Layer::layer(&CountApiRequests::new(family.clone()), answer);
        let client = kube::Client::new(service, "default");
        let pods: Api<Pod> = Api::namespaced(client, "prod");
        // The answers do not parse as pods: only what was sent matters here.
        let _ = pods.get("p-0").await;
        let _ = pods.get("p-1").await;
        let _ = pods.list(&ListParams::default()).await;
        let _ = pods.watch(&WatchParams::default(), "0").await;
        let patch = Patch::Merge(serde_json::json!({"metadata": {"labels": {"a": "b"}}}));
        let _ = pods.patch("p-0", &PatchParams::default(), &patch).await;
        let _ = pods
            .patch_status("p-0", &PatchParams::default(), &patch)
            .await;

        let count = |verb, resource: &str| {
            family
                .get_or_create(&ApiRequestLabels {
                    verb,
                    resource: resource.to_owned(),
                })
                .get()
        };
        assert_eq!(count("GET", "pods"), 2);
        assert_eq!(count("LIST", "pods"), 1);
        assert_eq!(count("WATCH", "pods"), 1);
        assert_eq!(count("PATCH", "pods"), 1);
        assert_eq!(count("PATCH", "pods/status"), 1);
        assert_eq!(count("DELETE", "pods"), 0);
    }
}
