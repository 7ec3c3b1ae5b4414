//! What the metrics tests share: reading an exporter's `/metrics` at a pod IP, and the Prometheus
//! operator's PodMonitor kind, installed in its smallest form when a test needs it to exist.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::{E2eError, Result, kubectl, kubectl_stdin};

/// The exporters' port (`spec.metrics`), named `metrics` in the pod.
pub const METRICS_PORT: u16 = valkey_api::contract::METRICS_PORT;

/// `GET http://<ip>:<port><path>`: the body of a 200 answer, else what went wrong.
pub async fn http_get(ip: &str, port: u16, path: &str) -> std::result::Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, port))
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("{ip}:{port}{path} timed out"))??;
    match response.split_once("\r\n\r\n") {
        Some((head, body))
            if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") =>
        {
            Ok(body.to_owned())
        }
        Some((head, _)) => Err(head.lines().next().unwrap_or_default().to_owned()),
        None => Err("no HTTP response".into()),
    }
}

/// The samples of a Prometheus text exposition: each series (name and labels, as written) and
/// its value.
pub fn samples(body: &str) -> BTreeMap<String, String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| (series.to_owned(), value.to_owned()))
        .collect()
}

/// The value of the series `name` with no labels, or of the first with labels.
pub fn value_of<'a>(samples: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    samples
        .iter()
        .find(|(series, _)| {
            *series == name
                || series
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
        })
        .map(|(_, v)| v.as_str())
}

/// The metric names a scrape serves (its `# TYPE` lines).
pub fn metric_names(body: &str) -> std::collections::BTreeSet<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The PodMonitor kind in its smallest form: the group, version and names the Prometheus
/// operator's CRD has, and a schema that keeps every field. Cluster-scoped and shared by every
/// test on the cluster: applied server-side, so two test processes applying it at once both
/// succeed, and never deleted (a test elsewhere may be using it; the real CRD, where one is
/// installed, is left as it is).
const POD_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podmonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: podmonitors, singular: podmonitor, kind: PodMonitor, listKind: PodMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

static POD_MONITOR_KIND: OnceCell<()> = OnceCell::const_new();

/// Makes sure the PodMonitor kind exists (once per test process).
pub async fn install_pod_monitor_kind() -> Result<()> {
    POD_MONITOR_KIND
        .get_or_try_init(|| async {
            let present = kubectl(&[
                "get",
                "crd",
                "podmonitors.monitoring.coreos.com",
                "-o",
                "name",
            ])
            .await
            .is_ok();
            if !present {
                kubectl_stdin(
                    &[
                        "apply",
                        "--server-side",
                        "--field-manager=valkey-operator-e2e",
                        "-f",
                        "-",
                    ],
                    POD_MONITOR_CRD,
                )
                .await?;
            }
            kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/podmonitors.monitoring.coreos.com",
            ])
            .await
            .map_err(|e| E2eError::Check(format!("the PodMonitor kind: {e}")))?;
            Ok(())
        })
        .await
        .copied()
}
