//! Connections to Valkey over TLS, as every client of the operator makes them (the
//! cluster-controller's engine, the node-controller's probe and live config, the tests).
//!
//! Servers are reached by pod IP, which no certificate names (a pod's IP is known only once it
//! runs, and a user's certificate names Services), so the server's chain is verified against the
//! CA the caller trusts and its host name is not: the check Valkey itself makes of its peers on
//! the replication link and the cluster bus. The CA is the object's own (generated for it, or the
//! `ca.crt` of the user's Secret), never the system's store.

use redis::{
    ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, RedisResult, TlsCertificates,
};

/// The CA a server's certificate must chain to: PEM, one or more certificates (a bundle of the
/// old and the new CA while a CA changes).
#[derive(Clone, PartialEq, Eq)]
pub struct Trust {
    pem: Vec<u8>,
}

impl Trust {
    pub fn from_pem(pem: impl Into<Vec<u8>>) -> Self {
        Self { pem: pem.into() }
    }

    pub fn pem(&self) -> &[u8] {
        &self.pem
    }

    /// The certificates, for a cluster client's builder.
    pub fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: None,
            root_cert: Some(self.pem.clone()),
        }
    }
}

impl std::fmt::Debug for Trust {
    /// A CA is no secret, but a page of base64 helps nobody reading a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("pem_bytes", &self.pem.len())
            .finish()
    }
}

/// A client for the server at `host:port` that logs in with `settings`: plain TCP without
/// `trust`, TLS verified against `trust` with it.
pub fn client(
    host: &str,
    port: u16,
    trust: Option<&Trust>,
    settings: RedisConnectionInfo,
) -> RedisResult<redis::Client> {
    let Some(trust) = trust else {
        let info = ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()?
            .set_redis_settings(settings);
        return redis::Client::open(info);
    };
    let info = ConnectionAddr::TcpTls {
        host: host.to_owned(),
        port,
        insecure: false,
        tls_params: None,
    }
    .into_connection_info()?
    .set_redis_settings(settings);
    // `build_with_tls` parses the CA into the address's TLS parameters; the host-name check is
    // then turned off on those parameters (the chain is still verified against the CA).
    let with_ca = redis::Client::build_with_tls(info, trust.certificates())?;
    let info = with_ca.get_connection_info().clone();
    let mut addr = info.addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    redis::Client::open(info.set_addr(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_client_keeps_its_ca_and_a_plain_one_has_none() {
        let plain = client("10.0.0.1", 6379, None, RedisConnectionInfo::default());
        assert!(matches!(
            plain.map(|c| c.get_connection_info().addr().clone()),
            Ok(ConnectionAddr::Tcp(host, 6379)) if host == "10.0.0.1"
        ));
        // Not a CA: refused when the client is built, not when it first connects.
        let trust = Trust::from_pem(
            b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".to_vec(),
        );
        assert!(
            client(
                "10.0.0.1",
                6379,
                Some(&trust),
                RedisConnectionInfo::default()
            )
            .is_err()
        );
        assert!(!format!("{trust:?}").contains("BEGIN"));
    }
}
