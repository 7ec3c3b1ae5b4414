//! A Kubernetes API that is a script, for tests of a controller's Kubernetes glue (kube-rs
//! controller-rs's `fixtures.rs` style): the test names each request it expects the code under
//! test to send, checks it, and answers it, so a stage runs in milliseconds without a cluster.
//! Enabled by the `testing` feature, for dev-dependencies only.
//!
//! ```ignore
//! let (client, mut api) = plumbing::testing::mock_client();
//! let script = tokio::spawn(async move {
//!     api.expect(Method::GET, "/api/v1/namespaces/ns/secrets/s").await.not_found();
//!     api.done().await;
//! });
//! stage_under_test(&client).await;
//! script.await?;
//! ```

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

/// A client whose every request goes to the returned script.
pub fn mock_client() -> (kube::Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), ApiServer(handle))
}

/// The API server's side of the script.
pub struct ApiServer(Handle<Request<Body>, Response<Body>>);

/// One request the stage sent, read.
pub struct Received {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    pub body: Value,
    respond: SendResponse<Response<Body>>,
}

impl Received {
    /// Answers with `status` and a JSON body.
    pub fn answer(self, status: StatusCode, body: &Value) {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.respond.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(bytes))
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }

    /// Answers 200 with the request's own body, as an apply or a create would.
    pub fn echo(self) {
        let body = self.body.clone();
        self.answer(StatusCode::OK, &body);
    }

    /// Answers a status write with `object` carrying the status the request sent, as the status
    /// subresource does.
    pub fn with_status_of(self, object: &Value) {
        let mut answer = object.clone();
        answer["status"] = self.body["status"].clone();
        self.answer(StatusCode::OK, &answer);
    }

    /// Answers 404, as for an object that does not exist.
    pub fn not_found(self) {
        self.answer(
            StatusCode::NOT_FOUND,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        );
    }
}

impl ApiServer {
    /// The next request, which must be `method` on a path that starts with `path`.
    pub async fn expect(&mut self, method: Method, path: &str) -> Received {
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("no request came; expected {method} {path}"));
        let (request, respond) =
            next.unwrap_or_else(|| panic!("the client is gone; expected {method} {path}"));
        let uri = request.uri().to_string();
        let got = request.method().clone();
        assert!(
            got == method && uri.starts_with(path),
            "expected {method} {path}, got {got} {uri}"
        );
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{uri}: {e}"))
        };
        Received {
            method: got,
            uri,
            body,
            respond,
        }
    }

    /// The next request, whatever it is, if one comes within `within`: for a script that answers
    /// what a stage sends without naming each request.
    pub async fn next(&mut self, within: std::time::Duration) -> Option<Received> {
        let (request, respond) = tokio::time::timeout(within, self.0.next_request())
            .await
            .ok()??;
        let uri = request.uri().to_string();
        let method = request.method().clone();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Some(Received {
            method,
            uri,
            body,
            respond,
        })
    }

    /// Answers the Event the stage publishes next, and returns it.
    pub async fn event(&mut self) -> Value {
        let received = self
            .expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/")
            .await;
        let event = received.body.clone();
        received.echo();
        event
    }

    /// Fails if the stage sent anything more.
    pub async fn done(mut self) {
        let more =
            tokio::time::timeout(std::time::Duration::from_millis(100), self.0.next_request())
                .await;
        if let Ok(Some((request, _))) = more {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}
