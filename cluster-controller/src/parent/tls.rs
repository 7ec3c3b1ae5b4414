//! The TLS stage, for any parent (a ValkeyCluster, a ValkeyReplication): the Secret every member
//! mounts for `spec.tls`, and the CA the operator verifies its servers against.
//!
//! - The user's Secret (`spec.tls.certificateSecret`, in cert-manager's shape): read, checked,
//!   never written. A new content reaches the servers without a restart (the kubelet rewrites
//!   the mounted files, the servers reload them).
//! - Otherwise the operator's own: a CA it generates in `<name>-tls-ca` (mounted nowhere), and
//!   from it the server certificate in `<name>-tls` (`tls.crt`, `tls.key`, `ca.crt`), renewed
//!   when a third of its lifetime is left, or when the CA changed. Both are owned by the parent,
//!   and a Secret of either name that the operator did not create is reported, never touched.
//!
//! No key ever leaves these Secrets: only certificates reach the return value.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use valkey_api::v1alpha1::StatusReason;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use plumbing::valkey_tls::Trust;
use valkey_api::contract::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
use valkey_api::v1alpha1::{NodeTls, Tls};

use super::auth::{self, SecretPlace};
use super::conditions::Problem;
use super::context::ParentMemory;
use super::error::{Error, api_error};
use super::labels::FIELD_MANAGER;
pub use super::secret_names::{ca_secret_name, certificate_secret_name};
use super::secrets::{Parent, Tools, read_own};
use crate::tls::{self as issue, Pem};

/// The key of the CA's private key in `<name>-tls-ca`.
pub const CA_KEY_KEY: &str = "ca.key";
/// The keys of the operator's copy of its CA in `<name>-operator` (beside its passwords): a
/// deleted `<name>-tls-ca` comes back with the same CA, so no server ever trusts one CA while
/// another serves a certificate of the next.
pub const CA_COPY_CERT_KEY: &str = "tls-ca.crt";
pub const CA_COPY_KEY_KEY: &str = "tls-ca.key";
/// The field manager of that copy: the secrets stage applies the rest of the Secret, and an
/// apply only keeps the fields its own manager sent.
const CA_COPY_MANAGER: &str = "valkey-cluster-controller-ca-copy";

/// How long a certificate the operator issues is valid, by default (renewed with a third left).
pub const DEFAULT_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

/// What TLS gives the rest of the pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// What every member node mounts and serves.
    pub node: NodeTls,
    /// What the operator verifies the servers against.
    pub trust: Trust,
    /// The external names (see [`crate::parent::external`]) that a certificate of the user's
    /// does not name: clients outside that verify the server's name would refuse it.
    pub lacking_names: Vec<String>,
}

/// The names the operator's certificate carries: the parent's Services (`<name>`,
/// `<name>-replicas`, in each short and long form) and loopback.
pub fn certificate_names(parent: &str, namespace: &str) -> Vec<String> {
    let mut names = Vec::new();
    for service in [parent.to_owned(), format!("{parent}-replicas")] {
        names.push(service.clone());
        names.push(format!("{service}.{namespace}"));
        names.push(format!("{service}.{namespace}.svc"));
        names.push(format!("{service}.{namespace}.svc.cluster.local"));
    }
    names.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
    names
}

/// The reason a cluster reports for a TLS setting this version does not serve.
pub const TLS_NOT_SUPPORTED: StatusReason = StatusReason::TLSNotSupported;

/// What of `tls` this version refuses to serve, rather than run plain (or half secured) what was
/// asked to be TLS: the plain-text port beside TLS (the NetworkPolicy does not open it). Every
/// Valkey version is served: 9.1 and later reload a renewed certificate by themselves, older
/// servers are told to by the node-controller.
pub fn unsupported(tls: &Tls) -> Option<Problem> {
    if !(tls.enabled && tls.plaintext) {
        return None;
    }
    Some(Problem {
        reason: TLS_NOT_SUPPORTED,
        message: "spec.tls.plaintext is set, but this version of the operator does not serve a \
                  plain-text port beside TLS yet; turn it off. No member is created or changed \
                  until then."
            .into(),
    })
}

/// The Secret the members mount for `tls` and the CA to verify them with; `Ok(Ok(None))` when
/// TLS is off, `Ok(Err(problem))` for what a person must fix. `lifetime` is how long a
/// certificate the operator issues is valid.
pub async fn ensure_for<K>(
    tools: &Tools<'_>,
    parent: &Parent<'_, K>,
    tls: &Tls,
    lifetime: Duration,
    memory: &ParentMemory,
    external_names: &[String],
) -> Result<Result<Option<Served>, Problem>, Error>
where
    K: Resource<DynamicType = ()>,
{
    if !tls.enabled {
        return Ok(Ok(None));
    }
    let namespace = parent.object.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(tools.client.clone(), &namespace);
    let (secret, trust, lacking_names) = match &tls.certificate_secret {
        Some(name) => match users_secret(tools, &namespace, name, external_names).await? {
            Ok((trust, lacking)) => (name.clone(), trust, lacking),
            Err(problem) => return Ok(Err(problem)),
        },
        None => {
            let issued =
                operators_secret(tools, parent, &secrets, lifetime, memory, external_names);
            match issued.await? {
                Ok((secret, trust)) => (secret, trust, Vec::new()),
                Err(problem) => return Ok(Err(problem)),
            }
        }
    };
    Ok(Ok(Some(Served {
        node: NodeTls {
            secret_name: secret,
            plaintext_port: tls.plaintext,
        },
        trust,
        lacking_names,
    })))
}

/// The user's Secret, checked: the three keys, each certificate readable.
async fn users_secret(
    tools: &Tools<'_>,
    namespace: &str,
    name: &str,
    external_names: &[String],
) -> Result<Result<(Trust, Vec<String>), Problem>, Error> {
    let found = tools
        .secrets
        .get(namespace, name)
        .await
        .map_err(api_error(format!("reading Secret {name}")))?;
    let Some(secret) = found else {
        return Ok(Err(Problem {
            reason: StatusReason::TLSSecretNotFound,
            message: format!(
                "Secret {name} named by spec.tls.certificateSecret does not exist; create it with keys {TLS_CERT_KEY}, {TLS_KEY_KEY} and {TLS_CA_KEY} (a cert-manager Certificate writes these)."
            ),
        }));
    };
    let value = |key: &str| bytes(&secret, key).filter(|v| !v.is_empty());
    let missing: Vec<&str> = [TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY]
        .into_iter()
        .filter(|key| value(key).is_none())
        .collect();
    let invalid = |why: String| {
        Ok(Err(Problem {
            reason: StatusReason::TLSSecretInvalid,
            message: format!("Secret {name} named by spec.tls.certificateSecret {why}."),
        }))
    };
    if !missing.is_empty() {
        return invalid(format!(
            "has no {}: it needs {TLS_CERT_KEY}, {TLS_KEY_KEY} and {TLS_CA_KEY}",
            missing.join(", ")
        ));
    }
    for key in [TLS_CERT_KEY, TLS_CA_KEY] {
        if value(key)
            .and_then(|v| issue::certificates_in(&v))
            .is_none()
        {
            return invalid(format!(
                "holds in {key} something that is not a PEM certificate"
            ));
        }
    }
    let named = value(TLS_CERT_KEY)
        .and_then(|pem| issue::names_in(&pem))
        .unwrap_or_default();
    let lacking = external_names
        .iter()
        .filter(|wanted| !issue::names_cover(&named, wanted))
        .cloned()
        .collect();
    Ok(Ok((
        Trust::from_pem(value(TLS_CA_KEY).unwrap_or_default()),
        lacking,
    )))
}

/// The operator's CA and server certificate, created, renewed or kept. A CA Secret that is
/// gone comes back from the operator's copy (its operator Secret, else its memory), announced
/// with a Warning: a new CA would make the servers, which reload the mounted files each at its
/// own moment, refuse each other's certificates until the last had reloaded.
async fn operators_secret<K>(
    tools: &Tools<'_>,
    parent: &Parent<'_, K>,
    secrets: &Api<Secret>,
    lifetime: Duration,
    memory: &ParentMemory,
    external_names: &[String],
) -> Result<Result<(String, Trust), Problem>, Error>
where
    K: Resource<DynamicType = ()>,
{
    let object = parent.object;
    let name = object.name_any();
    let namespace = object.namespace().unwrap_or_default();
    let (ca_name, cert_name) = (ca_secret_name(&name), certificate_secret_name(&name));
    let copy_name = auth::operator_secret_name(&name);
    let consequence = "it will not overwrite or use a Secret it did not create; delete or rename it, or name a certificate of yours in spec.tls.certificateSecret";
    let current = match read_own(
        tools,
        parent,
        &[&ca_name, &cert_name, &copy_name],
        consequence,
    )
    .await?
    {
        Ok(current) => current,
        Err(problem) => return Ok(Err(problem)),
    };
    let owner = object
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid(format!("the {} has no uid", K::kind(&()))))?;
    let place = SecretPlace {
        parent: &name,
        label: parent.label,
        namespace: &namespace,
        owner,
    };
    let now = unix_now();
    let failed = |e: issue::IssueError| Error::Invalid(format!("issuing a certificate: {e}"));

    let stored_ca = current.get(&ca_name).and_then(|s| {
        Some(Pem {
            cert: string(s, TLS_CA_KEY)?,
            key: string(s, CA_KEY_KEY)?,
        })
    });
    let copy = current
        .get(&copy_name)
        .and_then(|s| {
            Some(Pem {
                cert: string(s, CA_COPY_CERT_KEY)?,
                key: string(s, CA_COPY_KEY_KEY)?,
            })
        })
        .or_else(|| memory.ca())
        .filter(issue::usable_ca);
    let ca = match (stored_ca.filter(issue::usable_ca), copy) {
        (Some(ca), _) => ca,
        (None, kept) => {
            let restored = kept.is_some();
            let ca = match kept {
                Some(ca) => ca,
                None => issue::new_ca(&name, &namespace, now).map_err(failed)?,
            };
            let data =
                BTreeMap::from([(TLS_CA_KEY, ca.cert.clone()), (CA_KEY_KEY, ca.key.clone())]);
            write(
                tools,
                secrets,
                auth::owned_secret(&place, ca_name.clone(), data),
            )
            .await?;
            if restored {
                let message = format!(
                    "Secret {ca_name} was gone; it is created again with the same CA from the \
                     operator's copy, so every server keeps trusting every other's certificate."
                );
                tracing::warn!(secret = %ca_name, "{message}");
                tools
                    .events
                    .warning(object, "CASecretRestored", "Certificate", &message)
                    .await;
            }
            ca
        }
    };
    memory.remember_ca(&ca);
    let copied = current.get(&copy_name).is_some_and(|s| {
        string(s, CA_COPY_CERT_KEY).as_deref() == Some(ca.cert.as_str())
            && string(s, CA_COPY_KEY_KEY).as_deref() == Some(ca.key.as_str())
    });
    if !copied {
        let data = BTreeMap::from([
            (CA_COPY_CERT_KEY, ca.cert.clone()),
            (CA_COPY_KEY_KEY, ca.key.clone()),
        ]);
        let copy = auth::owned_secret(&place, copy_name.clone(), data);
        let written = secrets
            .patch(
                &copy_name,
                &PatchParams::apply(CA_COPY_MANAGER).force(),
                &Patch::Apply(&copy),
            )
            .await
            .map_err(api_error(format!(
                "keeping the CA's copy in Secret {copy_name}"
            )))?;
        tools.secrets.written(written).await;
    }

    let stored_cert = current.get(&cert_name).map(AsRef::as_ref);
    let signed_by_ca = stored_cert.and_then(|s| string(s, TLS_CA_KEY)).as_deref() == Some(&ca.cert);
    let leaf = stored_cert.and_then(|s| string(s, TLS_CERT_KEY));
    let due = leaf
        .as_deref()
        .is_none_or(|cert| issue::renewal_due(cert.as_bytes(), now, lifetime));
    // A new external address or name is a reason to issue it again.
    let names_all = leaf
        .as_deref()
        .and_then(|cert| issue::names_in(cert.as_bytes()))
        .is_some_and(|named| external_names.iter().all(|w| issue::names_cover(&named, w)));
    if !signed_by_ca
        || due
        || !names_all
        || stored_cert.and_then(|s| string(s, TLS_KEY_KEY)).is_none()
    {
        let mut names = certificate_names(&name, &namespace);
        names.extend(external_names.iter().cloned());
        let issued = issue::issue_server(&ca, &names, now, lifetime).map_err(failed)?;
        let data = BTreeMap::from([
            (TLS_CERT_KEY, issued.cert),
            (TLS_KEY_KEY, issued.key),
            (TLS_CA_KEY, ca.cert.clone()),
        ]);
        write(
            tools,
            secrets,
            auth::owned_secret(&place, cert_name.clone(), data),
        )
        .await?;
        let (reason, verb) = if stored_cert.is_some() {
            ("CertificateRenewed", "Renewed")
        } else {
            ("CertificateIssued", "Issued")
        };
        let message = format!(
            "{verb} the servers' TLS certificate in Secret {cert_name} (valid {} days, renewed with a third left), signed by the CA in Secret {ca_name}; the servers load it without a restart.",
            lifetime.as_secs() / 86400
        );
        tracing::info!(secret = %cert_name, "{message}");
        tools
            .events
            .normal(object, reason, "Certificate", &message)
            .await;
    }
    Ok(Ok((cert_name, Trust::from_pem(ca.cert.into_bytes()))))
}

async fn write(tools: &Tools<'_>, secrets: &Api<Secret>, secret: Secret) -> Result<(), Error> {
    let name = secret.name_any();
    let written = secrets
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(api_error(format!("writing Secret {name}")))?;
    tools.secrets.written(written).await;
    Ok(())
}

fn bytes(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret.data.as_ref()?.get(key).map(|v| v.0.clone())
}

fn string(secret: &Secret, key: &str) -> Option<String> {
    bytes(secret, key).and_then(|v| String::from_utf8(v).ok())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_with_a_plain_port_is_refused_with_a_reason_and_any_version_is_served() {
        let tls = |enabled, plaintext| Tls {
            enabled,
            plaintext,
            certificate_secret: None,
        };
        assert_eq!(unsupported(&tls(false, false)), None);
        assert_eq!(unsupported(&tls(true, false)), None);
        let plain = unsupported(&tls(true, true));
        assert!(plain.is_some_and(
            |p| p.reason == TLS_NOT_SUPPORTED && p.message.contains("spec.tls.plaintext")
        ));
    }

    /// `<name>-tls-ca` deleted: the CA comes back from the operator's copy, the same CA, with a
    /// Warning; a new CA would split the servers while each reloads the files at its own moment.
    #[tokio::test]
    async fn a_deleted_ca_secret_comes_back_with_the_same_ca() {
        use crate::cluster::fixtures::{CLUSTER, cluster, context};
        use http::Method;
        let (ctx, mut api, _nodes) = context();
        let c = cluster(&format!("{CLUSTER}  tls: {{enabled: true}}\n"));
        let ca = issue::new_ca("cache", "prod", unix_now()).unwrap_or_else(|e| panic!("{e}"));
        let encoded = |v: &str| {
            serde_json::to_value(k8s_openapi::ByteString(v.as_bytes().to_vec()))
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let operator = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cache-operator", "namespace": "prod",
                "labels": {"app.kubernetes.io/managed-by": "valkey-cluster-controller", "valkey.io/cluster": "cache"},
                "ownerReferences": [{"apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyCluster",
                    "name": "cache", "uid": "0000-1", "controller": true}]},
            "data": {CA_COPY_CERT_KEY: encoded(&ca.cert), CA_COPY_KEY_KEY: encoded(&ca.key)},
        });
        let kept = ca.cert.clone();
        let script = tokio::spawn(async move {
            const SECRETS: &str = "/api/v1/namespaces/prod/secrets";
            for name in ["cache-tls-ca", "cache-tls"] {
                api.expect(Method::GET, &format!("{SECRETS}/{name}"))
                    .await
                    .not_found();
            }
            api.expect(Method::GET, &format!("{SECRETS}/cache-operator"))
                .await
                .answer(http::StatusCode::OK, &operator);
            let restored = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-tls-ca?"))
                .await;
            let cert = restored.body["data"][TLS_CA_KEY]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            restored.echo();
            let event = api.event().await;
            assert_eq!(event["reason"], "CASecretRestored");
            let issued = api
                .expect(Method::PATCH, &format!("{SECRETS}/cache-tls?"))
                .await;
            issued.echo();
            assert_eq!(api.event().await["reason"], "CertificateIssued");
            api.done().await;
            cert
        });
        let (tools, parent) = crate::cluster::secrets::cluster_parent(&ctx, &c);
        let memory = ParentMemory::default();
        let served = ensure_for(
            &tools,
            &parent,
            &c.spec.tls,
            DEFAULT_CERTIFICATE_LIFETIME,
            &memory,
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|p| panic!("{p:?}"));
        let written = script.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, encoded(&kept), "the same CA, not a new one");
        assert!(served.is_some());
        assert_eq!(memory.ca().map(|ca| ca.cert), Some(kept));
    }

    #[test]
    fn the_certificate_names_the_parents_services_and_loopback() {
        let names = certificate_names("cache", "prod");
        for name in [
            "cache",
            "cache.prod.svc",
            "cache-replicas.prod.svc.cluster.local",
            "127.0.0.1",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }
}
