//! How actions are carried out, and what carrying one out achieved: what both the single-command
//! actions ([`super::execute`]) and the legacy slot mover ([`super::legacy`]) speak.

use std::time::Duration;

use crate::client::Credentials;
use crate::valkey::commands::MigrateAuth;

/// How actions are carried out.
#[derive(Debug, Clone)]
pub struct ExecuteConfig {
    /// Timeout of ordinary commands.
    pub command_timeout: Duration,
    /// How long one pass may spend moving slots the legacy way before it returns.
    pub pass_budget: Duration,
    /// Keys per MIGRATE.
    pub keys_per_migrate: u32,
    /// How many slots a legacy migration moves side by side.
    pub parallel_slots: usize,
    /// MIGRATE's own timeout (the time the destination may take per batch).
    pub migrate_timeout: Duration,
    /// Credentials MIGRATE passes to the destination.
    pub migrate_auth: Option<MigrateAuth>,
    /// How long to wait for a planned failover to show before returning.
    pub failover_wait: Duration,
}

impl Default for ExecuteConfig {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(5),
            // A scale-in of 4,096 slots of a 1 GiB cluster moves within one pass; a longer move
            // reports its progress between passes.
            pass_budget: Duration::from_secs(10),
            keys_per_migrate: 100,
            // Per pair of primaries: each round reads both views once for all of them, so the
            // fewer rounds the faster (a direct script moves 128 slots a round).
            parallel_slots: 128,
            migrate_timeout: Duration::from_secs(5),
            migrate_auth: None,
            failover_wait: Duration::from_secs(10),
        }
    }
}

/// What MIGRATE must carry so the destination accepts the keys as the user the client connects
/// as. (Here, not in the client: the client knows nothing of the commands it sends.)
pub fn migrate_auth(credentials: &Credentials) -> Option<MigrateAuth> {
    let password = credentials.password.as_ref()?.expose().to_owned();
    Some(match &credentials.username {
        Some(username) => MigrateAuth::User {
            username: username.clone(),
            password,
        },
        None => MigrateAuth::Password(password),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Secret;

    #[test]
    fn migrate_auth_follows_the_user_and_hides_the_password() {
        assert_eq!(migrate_auth(&Credentials::none()), None);
        let default_user = Credentials {
            username: None,
            password: Some(Secret::new("p")),
        };
        assert_eq!(
            migrate_auth(&default_user),
            Some(MigrateAuth::Password("p".into()))
        );
        let operator = migrate_auth(&Credentials::user("operator", "hunter2"));
        assert!(!format!("{operator:?}").contains("hunter2"));
    }
}
