//! The Sentinels' users kept in step on running Sentinels: a Sentinel reads its ACL file only
//! when it starts, so a changed clients' password (a rotation, authentication turned on) reaches
//! the running ones with `ACL SETUSER`, once per change and Sentinel.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::client::ValkeyClient;

use super::UserSet;

/// Which Sentinel was last given which users (a fingerprint of its file), by address.
#[derive(Debug, Default)]
pub struct SentinelUsers {
    applied: Mutex<BTreeMap<SocketAddr, String>>,
}

impl SentinelUsers {
    /// Gives every Sentinel at `sentinels` the users of `users` it was not given yet; returns
    /// the Sentinels that refused or did not answer (tried again next time).
    pub async fn sync<C: ValkeyClient>(
        &self,
        client: &C,
        sentinels: &[SocketAddr],
        users: &UserSet,
        timeout: Duration,
    ) -> Vec<SocketAddr> {
        let (Some(file), Some(commands)) = (users.sentinel_acl_file(), users.sentinel_setusers())
        else {
            return Vec::new();
        };
        let fingerprint = hex::encode(&Sha256::digest(file.as_bytes())[..8]);
        // Addresses no Sentinel has any more (a pod replaced) are forgotten.
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|address, _| sentinels.contains(address));
        let mut failed = Vec::new();
        for address in sentinels {
            if self.last(address).as_deref() == Some(fingerprint.as_str()) {
                continue;
            }
            let mut ok = true;
            for cmd in &commands {
                if client.command(*address, cmd, timeout).await.is_err() {
                    ok = false;
                    break;
                }
            }
            if ok {
                self.remember(*address, fingerprint.clone());
            } else {
                failed.push(*address);
            }
        }
        failed
    }

    fn last(&self, address: &SocketAddr) -> Option<String> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(address)
            .cloned()
    }

    fn remember(&self, address: SocketAddr, fingerprint: String) {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(address, fingerprint);
    }
}
