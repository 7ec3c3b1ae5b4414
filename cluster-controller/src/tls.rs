//! Certificates the operator issues for a parent's servers when the user names none: a CA of the
//! parent's own, and from it one server certificate that every member presents. Pure: the clock
//! is an argument, and nothing here reads or writes Kubernetes (`parent::tls` does).
//!
//! Servers are reached by pod IP, which no certificate can name ahead of the pod, so the names a
//! certificate carries are the parent's Service names (for clients that verify the host name
//! through a Service) and loopback; the operator and Valkey itself verify the chain against the
//! CA. One certificate for every member keeps renewal a single write that the kubelet carries to
//! every pod.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;

/// How long a CA the operator generates is valid: it is replaced (with a new one, which every
/// member then trusts at once, since they all mount the same Secret) only when it is lost.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A certificate and its private key, as PEM. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pem")
            .field("cert_bytes", &self.cert.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the time {0} is outside what a certificate can say")]
    Clock(i64),
}

/// A new CA for the parent `parent` in `namespace`, valid from `now` (Unix seconds) for
/// [`CA_LIFETIME`].
pub fn new_ca(parent: &str, namespace: &str, now: i64) -> Result<Pem, IssueError> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("{parent}.{namespace} Valkey CA"),
    );
    params
        .distinguished_name
        .push(DnType::OrganizationName, "valkey-operator");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, now, CA_LIFETIME)?;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A server certificate for `names` (DNS names or IP addresses), signed by `ca`, valid from
/// `now` for `lifetime`. It serves TLS and, since Valkey presents it when it connects to a peer
/// (replication, the cluster bus), authenticates a client too.
pub fn issue_server(
    ca: &Pem,
    names: &[String],
    now: i64,
    lifetime: Duration,
) -> Result<Pem, IssueError> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let mut params = CertificateParams::new(names.to_vec())?;
    if let Some(first) = names.first() {
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, now, lifetime)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Whether `ca` is a CA this module can sign with: its certificate and key parse.
pub fn usable_ca(ca: &Pem) -> bool {
    KeyPair::from_pem(&ca.key)
        .ok()
        .is_some_and(|key| Issuer::from_ca_cert_pem(&ca.cert, key).is_ok())
}

/// When the first certificate of `pem` expires (Unix seconds); `None` when it does not parse.
pub fn expires_at(pem: &[u8]) -> Option<i64> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = block.parse_x509().ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The DNS names and IP addresses the first certificate of `pem` names (its subject alternative
/// names); `None` when it does not parse.
pub fn names_in(pem: &[u8]) -> Option<Vec<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = block.parse_x509().ok()?;
    let Ok(Some(sans)) = cert.subject_alternative_name() else {
        return Some(Vec::new());
    };
    Some(
        sans.value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes)
                        .ok()
                        .map(|b| std::net::Ipv4Addr::from(b).to_string()),
                    16 => <[u8; 16]>::try_from(*bytes)
                        .ok()
                        .map(|b| std::net::Ipv6Addr::from(b).to_string()),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
    )
}

/// Whether a certificate naming `names` serves a client that asks for `wanted`: an exact name,
/// or a wildcard `*.example.com` for one label in its place.
pub fn names_cover(names: &[String], wanted: &str) -> bool {
    names.iter().any(|name| {
        name == wanted
            || name.strip_prefix("*.").is_some_and(|rest| {
                wanted
                    .split_once('.')
                    .is_some_and(|(label, tail)| !label.is_empty() && tail == rest)
            })
    })
}

/// How many certificates `pem` holds, each of which parses; `None` when any does not (or there
/// is none): what a `ca.crt` or a `tls.crt` must pass before servers are pointed at it.
pub fn certificates_in(pem: &[u8]) -> Option<usize> {
    let mut count = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        block.ok()?.parse_x509().ok()?;
        count += 1;
    }
    (count > 0).then_some(count)
}

/// Whether a certificate issued for `lifetime` is due for renewal at `now`: when less than a
/// third of its lifetime is left (as cert-manager does by default), or it cannot be read.
pub fn renewal_due(cert: &[u8], now: i64, lifetime: Duration) -> bool {
    let third = i64::try_from(lifetime.as_secs() / 3).unwrap_or(i64::MAX);
    expires_at(cert).is_none_or(|expiry| expiry.saturating_sub(now) < third)
}

/// Valid from a minute before `now` (clocks differ a little) for `lifetime`.
fn validity(
    params: &mut CertificateParams,
    now: i64,
    lifetime: Duration,
) -> Result<(), IssueError> {
    let at = |t: i64| OffsetDateTime::from_unix_timestamp(t).map_err(|_| IssueError::Clock(t));
    let lifetime = i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX / 2);
    params.not_before = at(now.saturating_sub(60))?;
    params.not_after = at(now.saturating_add(lifetime))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_ca_signs_a_server_certificate_that_expires_when_asked_and_is_renewed_in_its_last_third() {
        let ca = new_ca("cache", "prod", NOW).unwrap_or_else(|e| panic!("{e}"));
        assert!(usable_ca(&ca));
        assert!(!format!("{ca:?}").contains("PRIVATE"), "Debug shows no key");
        let names = vec!["cache.prod.svc".to_owned(), "127.0.0.1".to_owned()];
        let leaf = issue_server(&ca, &names, NOW, 90 * DAY).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(expires_at(leaf.cert.as_bytes()), Some(NOW + 90 * 86400));
        assert_eq!(certificates_in(leaf.cert.as_bytes()), Some(1));
        let bundle = format!("{}{}", ca.cert, leaf.cert);
        assert_eq!(certificates_in(bundle.as_bytes()), Some(2));
        assert_eq!(certificates_in(b"no certificate"), None);

        assert!(!renewal_due(leaf.cert.as_bytes(), NOW, 90 * DAY));
        assert!(!renewal_due(
            leaf.cert.as_bytes(),
            NOW + 59 * 86400,
            90 * DAY
        ));
        assert!(renewal_due(
            leaf.cert.as_bytes(),
            NOW + 61 * 86400,
            90 * DAY
        ));
        assert!(
            renewal_due(b"garbage", NOW, 90 * DAY),
            "unreadable: issue anew"
        );
    }

    #[test]
    fn the_server_certificate_chains_to_the_ca_and_names_what_it_was_given() {
        let ca = new_ca("cache", "prod", NOW).unwrap_or_else(|e| panic!("{e}"));
        let names = vec!["cache.prod.svc".to_owned(), "127.0.0.1".to_owned()];
        let leaf = issue_server(&ca, &names, NOW, DAY).unwrap_or_else(|e| panic!("{e}"));
        let parse = |pem: &str| {
            let (_, block) =
                x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            block
        };
        let (ca_block, leaf_block) = (parse(&ca.cert), parse(&leaf.cert));
        let ca_cert = ca_block.parse_x509().unwrap_or_else(|e| panic!("{e}"));
        let leaf_cert = leaf_block.parse_x509().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(leaf_cert.issuer(), ca_cert.subject());
        assert!(ca_cert.is_ca() && !leaf_cert.is_ca());
        leaf_cert
            .verify_signature(Some(ca_cert.public_key()))
            .unwrap_or_else(|e| panic!("not signed by the CA: {e}"));
        let sans = leaf_cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|ext| format!("{:?}", ext.value.general_names))
            .unwrap_or_default();
        assert!(sans.contains("cache.prod.svc"), "{sans}");
        let read = names_in(leaf.cert.as_bytes()).unwrap_or_default();
        assert_eq!(read, names, "the names read back are the names given");
        assert!(names_cover(&read, "127.0.0.1"));
        assert!(!names_cover(&read, "10.0.0.1"));
        let wildcard = vec!["*.valkey.example.com".to_owned()];
        assert!(names_cover(&wildcard, "a.valkey.example.com"));
        assert!(!names_cover(&wildcard, "a.b.valkey.example.com"));
        assert!(!names_cover(&wildcard, "valkey.example.com"));

        // A CA whose key is gone cannot sign: the caller generates a new one.
        let broken = Pem {
            cert: ca.cert.clone(),
            key: "not a key".into(),
        };
        assert!(!usable_ca(&broken));
        assert!(issue_server(&broken, &names, NOW, DAY).is_err());
    }
}
