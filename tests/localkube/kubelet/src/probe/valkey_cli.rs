//! Exec probes of the form `valkey-cli [options] ping` are answered natively, connecting from
//! inside the pod as the program would (see `dial.rs`): the images here need not ship
//! `valkey-cli`, and the answer is the same as the program's exit code.

/// A `valkey-cli` invocation reduced to what a native client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliCommand {
    /// `None` means the default, 127.0.0.1 inside the pod.
    pub host: Option<String>,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    pub db: i64,
    pub args: Vec<String>,
}

const CLI_NAMES: [&str; 2] = ["valkey-cli", "redis-cli"];
const AUTH_ENV: [&str; 2] = ["VALKEYCLI_AUTH", "REDISCLI_AUTH"];

/// Parses an exec probe's argv; `None` when it is not a plain `valkey-cli` command
/// (pipes, TLS, sockets, ...), which then runs as an ordinary exec probe.
pub fn parse(argv: &[String], env: &[(String, String)]) -> Option<CliCommand> {
    let words = match argv {
        [shell, flag, script] if is_shell(shell) && flag == "-c" => shell_words(script, env)?,
        _ => argv.to_vec(),
    };
    let (program, rest) = words.split_first()?;
    let base = program.rsplit('/').next().unwrap_or(program);
    if !CLI_NAMES.contains(&base) {
        return None;
    }
    let mut cmd = CliCommand {
        host: None,
        port: 6379,
        user: None,
        password: AUTH_ENV
            .iter()
            .find_map(|key| env.iter().find(|(n, _)| n == key).map(|(_, v)| v.clone())),
        db: 0,
        args: Vec::new(),
    };
    let mut it = rest.iter();
    while let Some(word) = it.next() {
        if !cmd.args.is_empty() {
            cmd.args.push(word.clone());
            continue;
        }
        match word.as_str() {
            "-h" => cmd.host = Some(it.next()?.clone()),
            "-p" => cmd.port = it.next()?.parse().ok()?,
            "-a" | "--pass" => cmd.password = Some(it.next()?.clone()),
            "--user" => cmd.user = Some(it.next()?.clone()),
            "-n" => cmd.db = it.next()?.parse().ok()?,
            "-t" => {
                it.next()?;
            }
            "--no-auth-warning" | "--raw" | "--no-raw" | "-c" | "-e" => {}
            w if w.starts_with('-') => return None,
            w => cmd.args.push(w.to_string()),
        }
    }
    (!cmd.args.is_empty()).then_some(cmd)
}

fn is_shell(program: &str) -> bool {
    matches!(program.rsplit('/').next(), Some("sh" | "bash" | "dash"))
}

/// Splits a simple shell command into words, substituting `$VAR`/`${VAR}` from the container env.
/// Anything beyond quoting and variables (pipes, redirections, `&&`, command substitution) is `None`.
fn shell_words(script: &str, env: &[(String, String)]) -> Option<Vec<String>> {
    let lookup = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => current.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (_, '$') => {
                let braced = chars.peek() == Some(&'{');
                if braced {
                    chars.next();
                }
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                if braced && chars.next() != Some('}') {
                    return None;
                }
                if name.is_empty() {
                    return None;
                }
                current.push_str(&lookup(&name));
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            (None, '|' | '&' | ';' | '<' | '>' | '`' | '(' | ')' | '\\') => return None,
            (_, '\\' | '`') => return None,
            (_, c) => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if in_word {
        words.push(current);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plain_ping_uses_defaults() {
        let cmd = parse(&argv(&["valkey-cli", "ping"]), &[]);
        assert_eq!(
            cmd,
            Some(CliCommand {
                host: None,
                port: 6379,
                user: None,
                password: None,
                db: 0,
                args: argv(&["ping"]),
            })
        );
    }

    #[test]
    fn options_and_auth_env_are_honoured() {
        let env = vec![("REDISCLI_AUTH".to_string(), "fromenv".to_string())];
        let cmd = parse(
            &argv(&[
                "/usr/local/bin/redis-cli",
                "-h",
                "127.0.0.1",
                "-p",
                "7000",
                "--user",
                "probe",
                "PING",
            ]),
            &env,
        );
        assert_eq!(cmd.as_ref().map(|c| c.port), Some(7000));
        assert_eq!(
            cmd.as_ref().and_then(|c| c.password.clone()),
            Some("fromenv".into())
        );
        assert_eq!(
            cmd.as_ref().and_then(|c| c.user.clone()),
            Some("probe".into())
        );
        let cmd = parse(
            &argv(&["valkey-cli", "-a", "pw", "--no-auth-warning", "ping"]),
            &env,
        );
        assert_eq!(cmd.and_then(|c| c.password), Some("pw".into()));
    }

    #[test]
    fn shell_wrapped_commands_substitute_variables() {
        let env = vec![("VALKEY_PASSWORD".to_string(), "p w".to_string())];
        let cmd = parse(
            &argv(&[
                "sh",
                "-c",
                "valkey-cli -a \"$VALKEY_PASSWORD\" -p ${PORT} ping",
            ]),
            &[env.clone(), vec![("PORT".into(), "6380".into())]].concat(),
        );
        assert_eq!(
            cmd.as_ref().and_then(|c| c.password.clone()),
            Some("p w".into())
        );
        assert_eq!(cmd.map(|c| c.port), Some(6380));
    }

    #[test]
    fn other_forms_are_left_to_exec() {
        assert_eq!(
            parse(&argv(&["sh", "-c", "valkey-cli ping | grep PONG"]), &[]),
            None
        );
        assert_eq!(parse(&argv(&["valkey-cli", "--tls", "ping"]), &[]), None);
        assert_eq!(parse(&argv(&["valkey-cli"]), &[]), None);
        assert_eq!(parse(&argv(&["cat", "/tmp/healthy"]), &[]), None);
    }
}
