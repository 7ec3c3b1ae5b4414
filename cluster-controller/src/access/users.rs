//! The users every server of a parent holds, as one value: rendered as the ACL file a server
//! starts with, and as the `ACL SETUSER` commands that bring a running server to the same state
//! without a restart. Passwords appear only as SHA-256 hashes.

use redis::Cmd;
use sha2::{Digest, Sha256};

use super::rights::{
    self, BACKUP_RULES, BACKUP_USER, CLIENT_DENY, DEFAULT_CLIENT_RULES, DEFAULT_USER,
    HEALTHCHECK_RULES, HEALTHCHECK_USER, OPERATOR_RULES, OPERATOR_USER, REPLICATION_RULES,
    REPLICATION_USER, SENTINEL_CLIENT_RULES, SENTINEL_HEALTHCHECK_RULES, SENTINEL_OPERATOR_RULES,
    SENTINEL_PEER_RULES, SENTINEL_RULES, SENTINEL_START_RULES, SENTINEL_USER,
};
use crate::valkey::Version;
use crate::valkey::commands;

/// The operator's own users: never fenced with the clients.
const OPERATORS: [&str; 5] = [
    OPERATOR_USER,
    HEALTHCHECK_USER,
    REPLICATION_USER,
    BACKUP_USER,
    SENTINEL_USER,
];

/// The SHA-256 of a password, as Valkey's ACL takes it (`#<hex>`).
pub fn password_hash(password: &str) -> String {
    hex::encode(Sha256::digest(password.as_bytes()))
}

/// How a user logs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// With any of these passwords, given as hashes (more than one while a password rotates).
    Hashes(Vec<String>),
    /// With any password or none (the default user when authentication is off).
    NoPassword,
}

/// One Valkey user: who, how it logs in, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    pub name: String,
    pub login: Login,
    /// The complete rules (keys, channels, commands), after a reset.
    pub rules: String,
    /// Off in the ACL file, so off whenever a server starts, until the engine admits the server
    /// (the replication fence, and with it the clients of a server that keeps no data): a change of
    /// users never switches it on a server the engine has not admitted (see
    /// [`AclUser::setuser`]).
    pub fenced: bool,
    /// The rules it has, on, from a server's start until the engine admits the server, when
    /// they are fewer than `rules` (the `sentinel` user: see [`rights::SENTINEL_START_RULES`]).
    pub start_rules: Option<String>,
}

impl AclUser {
    /// A user for clients: its own rules, then no administration whatever they say.
    pub fn client(name: &str, login: Login, rules: &str) -> Self {
        Self {
            name: name.to_owned(),
            login,
            rules: format!("{} {CLIENT_DENY}", rules.trim()),
            fenced: false,
            start_rules: None,
        }
    }

    fn operator(name: &str, password: &str, rules: &str, fenced: bool) -> Self {
        Self {
            name: name.to_owned(),
            login: Login::Hashes(vec![password_hash(password)]),
            rules: rules.to_owned(),
            fenced,
            start_rules: None,
        }
    }

    fn login_tokens(&self) -> Vec<String> {
        match &self.login {
            Login::NoPassword => vec!["nopass".to_owned()],
            Login::Hashes(hashes) => hashes.iter().map(|h| format!("#{h}")).collect(),
        }
    }

    /// Its line of the ACL file.
    pub fn file_line(&self) -> String {
        let state = if self.fenced { "off" } else { "on" };
        format!(
            "user {} {state} {} {}",
            self.name,
            self.login_tokens().join(" "),
            self.start_rules.as_deref().unwrap_or(&self.rules)
        )
    }

    /// The `ACL SETUSER` that gives a running server of `version` this user exactly
    /// (every earlier password, key, channel and command rule is reset in the same command, so
    /// no moment sees a half-applied user), plus the rules that exist only on that version. A
    /// fenced user is switched on only on a server the engine has `admitted` (a user added since
    /// then would otherwise be created off there, and stay off); elsewhere its flag is left as
    /// the server has it.
    pub fn setuser(&self, version: Version, admitted: bool) -> Cmd {
        let mut args = Vec::new();
        if !self.fenced || admitted {
            args.push("on".to_owned());
        }
        args.push("resetpass".to_owned());
        args.extend(self.login_tokens());
        args.extend(
            ["resetkeys", "resetchannels", "clearselectors", "-@all"]
                .into_iter()
                .map(str::to_owned),
        );
        let rules = match &self.start_rules {
            Some(start) if !admitted => start,
            _ => &self.rules,
        };
        args.extend(rules.split_whitespace().map(str::to_owned));
        if let Some(extra) = rights::extras(&self.name, version) {
            args.extend(extra.split_whitespace().map(str::to_owned));
        }
        commands::acl_setuser(&self.name, args)
    }
}

/// The operator's own passwords (generated once, kept in the parent's Secrets).
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorPasswords {
    pub operator: String,
    pub healthcheck: String,
    pub replication: String,
    pub backup: String,
    /// The `sentinel` user's: held only by the servers and Sentinels of a parent with Sentinel
    /// on, but kept for every parent (generated once, like the others).
    pub sentinel: String,
}

/// Fixed passwords for tests.
#[cfg(test)]
pub fn example_passwords() -> OperatorPasswords {
    OperatorPasswords {
        operator: "op-pw".into(),
        healthcheck: "hc-pw".into(),
        replication: "rep-pw".into(),
        backup: "bk-pw".into(),
        sentinel: "sn-pw".into(),
    }
}

impl std::fmt::Debug for OperatorPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorPasswords(***)")
    }
}

/// Every user of a parent's servers: the clients' default user, the operator's four, then the
/// named client users by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSet {
    users: Vec<AclUser>,
}

impl UserSet {
    /// `default` logs in with `default_login`; `named` are the parent's own client users
    /// (name, login, rules), which may not take a reserved name.
    pub fn new(
        default_login: Login,
        operator: &OperatorPasswords,
        named: impl IntoIterator<Item = AclUser>,
    ) -> Self {
        let mut users = vec![
            AclUser::client(DEFAULT_USER, default_login, DEFAULT_CLIENT_RULES),
            AclUser::operator(OPERATOR_USER, &operator.operator, OPERATOR_RULES, false),
            AclUser::operator(
                HEALTHCHECK_USER,
                &operator.healthcheck,
                HEALTHCHECK_RULES,
                false,
            ),
            // Off at every start: see the engine's fencing rule.
            AclUser::operator(
                REPLICATION_USER,
                &operator.replication,
                REPLICATION_RULES,
                true,
            ),
            AclUser::operator(BACKUP_USER, &operator.backup, BACKUP_RULES, false),
        ];
        let mut named: Vec<AclUser> = named
            .into_iter()
            .filter(|u| !rights::RESERVED_USERS.contains(&u.name.as_str()))
            .collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        named.dedup_by(|a, b| a.name == b.name);
        users.extend(named);
        Self { users }
    }

    /// The same set with every client user (the default user and the parent's own) fenced like
    /// the replication user: off whenever a server starts, on once the engine has admitted it.
    /// For servers that keep no data across a restart (no append-only file): one restarted in
    /// place keeps its identity and slots but not its keys, and must take no client's write (nor
    /// answer "no such key" for data its replica holds) before the engine has judged it.
    pub fn with_clients_fenced(mut self) -> Self {
        for user in &mut self.users {
            if !OPERATORS.contains(&user.name.as_str()) {
                user.fenced = true;
            }
        }
        self
    }

    /// The same set with the `sentinel` user, for the servers Sentinel watches: fenced by its
    /// rights, so a server that restarted looks down to Sentinel until the engine admits it.
    pub fn with_sentinel(mut self, operator: &OperatorPasswords) -> Self {
        let mut sentinel =
            AclUser::operator(SENTINEL_USER, &operator.sentinel, SENTINEL_RULES, false);
        sentinel.start_rules = Some(SENTINEL_START_RULES.to_owned());
        // After the operator's own users, before the clients' named ones (the file's order).
        let at = self
            .users
            .iter()
            .position(|u| !OPERATORS.contains(&u.name.as_str()) && u.name != DEFAULT_USER)
            .unwrap_or(self.users.len());
        self.users.insert(at, sentinel);
        self
    }

    /// Whether what a server should hold depends on whether the engine admitted it: a client
    /// user is fenced, or a user starts with fewer rights.
    pub fn depends_on_admission(&self) -> bool {
        self.clients_fenced() || self.users.iter().any(|u| u.start_rules.is_some())
    }

    /// Whether any client user is fenced.
    pub fn clients_fenced(&self) -> bool {
        self.users
            .iter()
            .any(|u| u.fenced && !OPERATORS.contains(&u.name.as_str()))
    }

    /// The ACL file of the Sentinels that watch these servers, when the set has the `sentinel`
    /// user: clients log in with the default user's passwords and may only ask (never tell a
    /// Sentinel what to watch or to fail over), the operator and the probes with theirs, peer
    /// Sentinels as `sentinel`. Every user is on: a Sentinel holds no data to fence.
    pub fn sentinel_acl_file(&self) -> Option<String> {
        Some(
            self.sentinel_users()?
                .iter()
                .map(|(name, tokens, rules)| format!("user {name} on {tokens} {rules}\n"))
                .collect(),
        )
    }

    /// The commands that bring a running Sentinel to [`Self::sentinel_acl_file`] (a password
    /// changed since it started): each user reset and given its login and rights in one command,
    /// the operator's own first.
    pub fn sentinel_setusers(&self) -> Option<Vec<Cmd>> {
        Some(
            self.sentinel_users()?
                .into_iter()
                .map(|(name, tokens, rules)| {
                    let args = ["reset", "on"]
                        .into_iter()
                        .chain(tokens.split_whitespace())
                        .chain(rules.split_whitespace());
                    commands::acl_setuser(name, args)
                })
                .collect(),
        )
    }

    /// The Sentinels' users (name, login tokens, rules), the operator's first; `None` without
    /// the `sentinel` user.
    fn sentinel_users(&self) -> Option<Vec<(&'static str, String, &'static str)>> {
        let tokens = |name: &str| {
            self.users
                .iter()
                .find(|u| u.name == name)
                .map(|u| u.login_tokens().join(" "))
        };
        tokens(SENTINEL_USER)?;
        Some(
            [
                (OPERATOR_USER, SENTINEL_OPERATOR_RULES),
                (DEFAULT_USER, SENTINEL_CLIENT_RULES),
                (HEALTHCHECK_USER, SENTINEL_HEALTHCHECK_RULES),
                (SENTINEL_USER, SENTINEL_PEER_RULES),
            ]
            .into_iter()
            .filter_map(|(name, rules)| Some((name, tokens(name)?, rules)))
            .collect(),
        )
    }

    pub fn users(&self) -> &[AclUser] {
        &self.users
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.users.iter().map(|u| u.name.as_str())
    }

    /// The ACL file (`aclfile`) every server loads when it starts.
    pub fn acl_file(&self) -> String {
        let mut text: String = self.users.iter().map(|u| u.file_line() + "\n").collect();
        if text.is_empty() {
            text.push('\n');
        }
        text
    }

    /// The commands that bring a running server of `version` to this set: the operator's own
    /// user first (so the rest may use rights it has just gained), the clients' default user
    /// last (a server reached through that user must not lose its rights half-way). `admitted`:
    /// the engine has admitted the server (see [`AclUser::setuser`]).
    pub fn setusers(&self, version: Version, admitted: bool) -> Vec<Cmd> {
        let mut ordered: Vec<&AclUser> = self.users.iter().collect();
        ordered.sort_by_key(|u| match u.name.as_str() {
            OPERATOR_USER => 0,
            DEFAULT_USER => 2,
            _ => 1,
        });
        ordered
            .iter()
            .map(|u| u.setuser(version, admitted))
            .collect()
    }

    /// A short fingerprint of what a server of `version` should hold: the same for the same
    /// users, rights and password hashes (those of its `ACL SETUSER` commands' arguments).
    pub fn fingerprint(&self, version: Version) -> String {
        let mut hasher = Sha256::new();
        for cmd in self.setusers(version, false) {
            for arg in cmd.args_iter() {
                if let redis::Arg::Simple(bytes) = arg {
                    hasher.update(bytes);
                }
                hasher.update([0]);
            }
            hasher.update([1]);
        }
        hex::encode(&hasher.finalize()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::example_passwords as passwords;
    use crate::valkey::commands::words;

    /// The arguments of every command of `setusers`, as text.
    fn setusers(set: &UserSet, version: Version, admitted: bool) -> Vec<Vec<String>> {
        set.setusers(version, admitted).iter().map(words).collect()
    }

    fn v(major: u32) -> Version {
        Version::new(major, 0, 0)
    }

    #[test]
    fn the_acl_file_holds_hashes_not_passwords_and_starts_replication_fenced() {
        let app = AclUser::client(
            "app",
            Login::Hashes(vec![password_hash("app-pw")]),
            "~app:* +@read",
        );
        let set = UserSet::new(
            Login::Hashes(vec![password_hash("client-pw")]),
            &passwords(),
            [app],
        );
        let file = set.acl_file();
        assert_eq!(file.lines().count(), 6);
        for secret in ["client-pw", "op-pw", "hc-pw", "rep-pw", "bk-pw", "app-pw"] {
            assert!(!file.contains(secret), "{secret} in {file}");
            assert!(file.contains(&password_hash(secret)), "{secret}");
        }
        assert!(
            file.lines()
                .any(|l| l.starts_with("user replication off #"))
        );
        assert!(file.lines().any(|l| l.starts_with("user default on #")));
        let app_line = file
            .lines()
            .find(|l| l.starts_with("user app "))
            .unwrap_or_default();
        assert!(
            app_line.ends_with("~app:* +@read -@admin -migrate -restore -restore-asking"),
            "client users lose administration after their own rules: {app_line}"
        );
    }

    /// With Sentinel on, the servers hold a `sentinel` user fenced by its rights (on, but
    /// allowed only to log in until the engine admits the server; not a client: the clients are
    /// not fenced by it), and the Sentinels'
    /// own file logs clients in with the default user's passwords, the operator, the probes and
    /// peer Sentinels with theirs, every one on, hashes only.
    #[test]
    fn with_sentinel_the_servers_fence_the_sentinel_user_and_the_sentinels_get_their_own_file() {
        let plain = UserSet::new(
            Login::Hashes(vec![password_hash("client-pw")]),
            &passwords(),
            [],
        );
        assert_eq!(plain.sentinel_acl_file(), None);
        assert!(!plain.depends_on_admission());
        assert!(!plain.acl_file().contains("user sentinel"));

        let set = plain.with_sentinel(&passwords());
        assert!(!set.clients_fenced(), "the sentinel user is not a client");
        let file = set.acl_file();
        let line = file
            .lines()
            .find(|l| l.starts_with("user sentinel "))
            .unwrap_or_default();
        // On with the start rules (log in, greet on the hello channel), the full ones once the
        // engine admitted the server.
        assert_eq!(
            line,
            format!(
                "user sentinel on #{} {SENTINEL_START_RULES}",
                password_hash("sn-pw")
            )
        );
        assert!(set.depends_on_admission());
        let setuser = |admitted| {
            setusers(&set, v(9), admitted)
                .into_iter()
                .find(|args| args[2] == "sentinel")
                .map(|args| args.join(" "))
                .unwrap_or_default()
        };
        assert!(
            setuser(false).ends_with(SENTINEL_START_RULES),
            "{}",
            setuser(false)
        );
        assert!(setuser(true).ends_with(SENTINEL_RULES), "{}", setuser(true));
        assert!(SENTINEL_RULES.contains("+ping") && !SENTINEL_START_RULES.contains("+ping"));

        let sentinels = set.sentinel_acl_file().expect("a Sentinels' file");
        assert!(!sentinels.contains("sn-pw") && !sentinels.contains("client-pw"));
        let users: Vec<&str> = sentinels
            .lines()
            .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
            .collect();
        assert_eq!(users, ["operator", "default", "healthcheck", "sentinel"]);
        let setusers: Vec<Vec<String>> = set
            .sentinel_setusers()
            .expect("commands")
            .iter()
            .map(words)
            .collect();
        assert_eq!(setusers.len(), 4);
        assert!(
            setusers
                .iter()
                .all(|c| c[..5].join(" ") == format!("ACL SETUSER {} reset on", c[2]))
        );
        assert!(setusers[1].contains(&format!("#{}", password_hash("client-pw"))));
        assert!(
            sentinels
                .lines()
                .all(|l| l.split_whitespace().nth(2) == Some("on"))
        );
        let default = sentinels.lines().nth(1).unwrap_or_default();
        assert!(default.contains(&format!("#{}", password_hash("client-pw"))));
        assert!(
            default.contains("-@admin") && !default.contains("+sentinel|failover"),
            "clients may only ask: {default}"
        );
    }

    #[test]
    fn a_user_without_password_is_only_the_default_one_when_auth_is_off() {
        let set = UserSet::new(Login::NoPassword, &passwords(), []);
        let file = set.acl_file();
        assert!(
            file.lines()
                .any(|l| l.starts_with("user default on nopass ~* &* +@all -@admin"))
        );
        assert_eq!(file.matches("nopass").count(), 1, "{file}");
    }

    #[test]
    fn named_users_cannot_take_a_reserved_name_and_come_in_name_order() {
        let hashes = || Login::Hashes(vec![password_hash("x")]);
        let set = UserSet::new(
            hashes(),
            &passwords(),
            [
                AclUser::client("zeta", hashes(), "+@read"),
                AclUser::client("operator", hashes(), "+@all"),
                AclUser::client("alpha", hashes(), "+@read"),
            ],
        );
        let names: Vec<&str> = set.names().collect();
        assert_eq!(
            names,
            [
                "default",
                "operator",
                "healthcheck",
                "replication",
                "backup",
                "alpha",
                "zeta"
            ]
        );
        let operator = &set.users()[1];
        assert!(
            operator.rules.starts_with("~* &* -@all"),
            "the operator keeps its own rights"
        );
    }

    #[test]
    fn setuser_resets_everything_but_leaves_the_fence_alone() {
        let set = UserSet::new(
            Login::Hashes(vec!["aa".into(), "bb".into()]),
            &passwords(),
            [],
        );
        let commands = setusers(&set, v(8), false);
        assert_eq!(
            commands[0][2], "operator",
            "the operator's own rights come first"
        );
        assert_eq!(
            commands.last().map(|c| c[2].as_str()),
            Some("default"),
            "the default user's own rights go last"
        );
        let default = commands
            .iter()
            .find(|c| c[2] == "default")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            default[3..10],
            [
                "on",
                "resetpass",
                "#aa",
                "#bb",
                "resetkeys",
                "resetchannels",
                "clearselectors"
            ]
        );
        let replication = commands
            .iter()
            .find(|c| c[2] == "replication")
            .cloned()
            .unwrap_or_default();
        assert!(
            !replication.iter().any(|a| a == "on" || a == "off"),
            "the fence's flag is the engine's: {replication:?}"
        );
    }

    #[test]
    fn valkey_9_servers_get_the_commands_of_atomic_slot_migration_live() {
        let set = UserSet::new(Login::NoPassword, &passwords(), []);
        let on = |major| {
            setusers(&set, v(major), false)
                .into_iter()
                .flatten()
                .collect::<Vec<String>>()
        };
        assert!(
            !on(8)
                .iter()
                .any(|a| a.contains("migrateslots") || a.contains("syncslots"))
        );
        assert!(on(9).iter().any(|a| a == "+cluster|migrateslots"));
        assert!(on(9).iter().any(|a| a == "+cluster|syncslots"));
        assert!(
            !set.acl_file().contains("migrateslots"),
            "the file must load on 8.0 too"
        );
        assert_ne!(set.fingerprint(v(8)), set.fingerprint(v(9)));
        assert_eq!(
            set.fingerprint(v(9)),
            set.clone().fingerprint(Version::new(9, 1, 2))
        );
    }

    #[test]
    fn clients_of_a_server_without_data_start_off_and_open_only_where_admitted() {
        let app = AclUser::client("app", Login::Hashes(vec!["cc".into()]), "~app:* +@read");
        let open = UserSet::new(Login::Hashes(vec!["aa".into()]), &passwords(), [app]);
        assert!(!open.clients_fenced());
        let fenced = open.clone().with_clients_fenced();
        assert!(fenced.clients_fenced());
        let file = fenced.acl_file();
        for user in ["default", "app", "replication"] {
            assert!(
                file.lines()
                    .any(|l| l.starts_with(&format!("user {user} off "))),
                "{user} starts off: {file}"
            );
        }
        for user in ["operator", "healthcheck"] {
            assert!(
                file.lines()
                    .any(|l| l.starts_with(&format!("user {user} on "))),
                "{user} is always on: {file}"
            );
        }
        let flag = |set: &UserSet, admitted: bool, user: &str| {
            setusers(set, v(9), admitted)
                .into_iter()
                .find(|c| c[2] == user)
                .map(|c| c[3].clone())
                .unwrap_or_default()
        };
        // Not admitted: a change of users leaves the flag as the server has it.
        assert_eq!(flag(&fenced, false, "app"), "resetpass");
        assert_eq!(flag(&fenced, false, "replication"), "resetpass");
        // Admitted: a user added since is switched on like the others.
        assert_eq!(flag(&fenced, true, "app"), "on");
        assert_eq!(flag(&open, false, "app"), "on");
        assert_eq!(
            fenced.fingerprint(v(9)),
            fenced.clone().fingerprint(v(9)),
            "the fingerprint does not depend on a server's admission"
        );
    }

    #[test]
    fn debug_hides_the_operator_passwords() {
        assert!(!format!("{:?}", passwords()).contains("op-pw"));
    }
}
