//! Starting a container's process inside its pod's namespaces, and running commands in a
//! running container (exec probes).

pub mod enter;
pub mod plan;

use std::fs::File;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use plan::{Identity, RootfsPlan};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("opening network namespace {path}: {source}")]
    Netns {
        path: String,
        source: std::io::Error,
    },
    #[error("preparing the root filesystem: {0}")]
    Prepare(std::io::Error),
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("joining the container's namespaces: {0}")]
    Join(std::io::Error),
    #[error("no command to run")]
    NoCommand,
}

/// Starts `argv` as a container: its own session, the pod's network, a private root.
/// stdout and stderr go to `log`.
pub fn spawn_container(
    plan: &RootfsPlan,
    netns_path: &Path,
    argv: &[String],
    env: &[(String, String)],
    log: &File,
) -> Result<Child, SandboxError> {
    let (program, args) = argv.split_first().ok_or(SandboxError::NoCommand)?;
    let netns = File::open(netns_path).map_err(|source| SandboxError::Netns {
        path: netns_path.display().to_string(),
        source,
    })?;
    std::fs::create_dir_all(&plan.root).map_err(SandboxError::Prepare)?;
    let prepared = enter::Prepared::new(plan, netns).map_err(SandboxError::Prepare)?;
    let stdout = log.try_clone().map_err(SandboxError::Prepare)?;
    let stderr = log.try_clone().map_err(SandboxError::Prepare)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(false);
    // SAFETY: `enter` only makes system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || prepared.enter());
    }
    cmd.spawn().map_err(|source| SandboxError::Spawn {
        program: program.clone(),
        source,
    })
}

/// The outcome of a command run in a container.
#[derive(Debug)]
pub enum ExecOutcome {
    Exited(ExitStatus, String),
    TimedOut,
}

/// Runs `argv` inside the running container whose main process is `pid`.
pub async fn exec_in(
    pid: u32,
    identity: &Option<Identity>,
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<ExecOutcome, SandboxError> {
    let (program, args) = argv.split_first().ok_or(SandboxError::NoCommand)?;
    let join = enter::Join::of(pid, identity).map_err(SandboxError::Join)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: `enter` only makes system calls on files opened before the fork.
    unsafe {
        cmd.pre_exec(move || join.enter());
    }
    let child = cmd.spawn().map_err(|source| SandboxError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pgid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            Ok(ExecOutcome::Exited(out.status, text))
        }
        Ok(Err(source)) => Err(SandboxError::Spawn {
            program: program.clone(),
            source,
        }),
        Err(_) => {
            // The child is killed on drop; its own children share its process group.
            if let Some(pid) = pgid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Ok(ExecOutcome::TimedOut)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{self, PodNetNames};
    use std::path::PathBuf;

    /// Root and iproute2 are needed; elsewhere the test says so and passes.
    fn privileged() -> bool {
        nix::unistd::geteuid().is_root() && std::path::Path::new("/usr/sbin/ip").exists()
    }

    /// What one container printed, and how it ended.
    struct Ran {
        success: bool,
        out: String,
    }

    /// Runs `script` under `sh -c` as a container of a fresh pod (own network namespace with
    /// 10.254.0.2 on its loopback), with `volumes` (sources relative to a scratch directory).
    async fn run_container(
        tag: &str,
        volumes: &[(&str, &str, bool)],
        identity: Option<Identity>,
        workdir: Option<&str>,
        script: &str,
    ) -> Result<Ran, Box<dyn std::error::Error>> {
        let base = std::env::temp_dir().join(format!("lk-sandbox-{tag}-{}", std::process::id()));
        let image_bin = base.join("image/bin");
        let etc = base.join("etc");
        for d in [&image_bin, &etc] {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n")?;
        std::fs::write(etc.join("hostname"), "pod-x\n")?;
        std::fs::write(etc.join("resolv.conf"), "")?;
        let mounts: Vec<plan::VolumeMount> = volumes
            .iter()
            .map(|(source, target, readonly)| plan::VolumeMount {
                source: base.join(source),
                target: PathBuf::from(target),
                readonly: *readonly,
            })
            .collect();
        let names = PodNetNames::for_uid(&format!("{tag}{}", std::process::id()));
        network::ip(&["netns", "add", &names.netns]).await?;
        network::ip(&[
            "-n",
            &names.netns,
            "addr",
            "add",
            "10.254.0.2/24",
            "dev",
            "lo",
        ])
        .await?;
        network::ip(&["-n", &names.netns, "link", "set", "lo", "up"]).await?;
        let rootfs = plan::build(plan::PlanInput {
            root: base.join("root"),
            image_bin,
            image_lib: None,
            pod_etc: etc,
            volumes: &mounts,
            readonly_root: true,
            workdir: workdir.map(String::from),
            hostname: "pod-x".into(),
            identity,
        });
        let log_path = base.join("log");
        let log = std::fs::File::create(&log_path)?;
        let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
        let env = vec![(
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_string(),
        )];
        let spawned = spawn_container(&rootfs, &names.netns_path(), &argv, &env, &log);
        let status = match spawned {
            Ok(mut child) => {
                Some(tokio::time::timeout(Duration::from_secs(20), child.wait()).await??)
            }
            Err(_) => None,
        };
        let out = std::fs::read_to_string(&log_path)?;
        network::teardown(&names).await;
        std::fs::remove_dir_all(&base)?;
        Ok(Ran {
            success: status.is_some_and(|s| s.success()),
            out,
        })
    }

    /// Writes a file below the scratch directory `run_container` will use for `tag`.
    fn scratch_file(tag: &str, rel: &str, content: &str) -> std::io::Result<()> {
        let path = std::env::temp_dir()
            .join(format!("lk-sandbox-{tag}-{}", std::process::id()))
            .join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)
    }

    #[tokio::test]
    async fn a_container_sees_its_root_identity_and_network()
    -> Result<(), Box<dyn std::error::Error>> {
        if !privileged() {
            eprintln!("skipped: needs root and iproute2");
            return Ok(());
        }
        scratch_file("id", "data/in.txt", "volume-content")?;
        let script = "echo host=$(hostname) id=$(id -u):$(id -G | tr ' ' ,) pwd=$(pwd); cat in.txt; echo; \
                      touch /probe-root 2>/dev/null || echo root-readonly; ip -4 -o addr show lo | grep -c 10.254.0.2";
        let ran = run_container(
            "id",
            &[("data", "/data", false)],
            Some(Identity {
                uid: 1000,
                gid: 1000,
                groups: vec![1000, 2000],
            }),
            Some("/data"),
            script,
        )
        .await?;
        let out = &ran.out;
        assert!(ran.success, "{out}");
        assert!(
            out.contains("host=pod-x id=1000:1000,2000 pwd=/data"),
            "{out}"
        );
        assert!(out.contains("volume-content"), "{out}");
        assert!(out.contains("root-readonly"), "{out}");
        assert!(out.trim_end().ends_with('1'), "{out}");
        Ok(())
    }

    #[tokio::test]
    async fn a_volume_mounts_inside_a_read_only_volume() -> Result<(), Box<dyn std::error::Error>> {
        if !privileged() {
            eprintln!("skipped: needs root and iproute2");
            return Ok(());
        }
        scratch_file("nest", "config/valkey.conf", "port 6379")?;
        scratch_file("nest", "users/users.acl", "user default on")?;
        let ran = run_container(
            "nest",
            &[
                ("config", "/config", true),
                ("users", "/config/users", true),
            ],
            None,
            None,
            "cat /config/valkey.conf; echo; cat /config/users/users.acl; echo; \
             touch /config/x 2>/dev/null || echo config-readonly; \
             touch /config/users/x 2>/dev/null || echo users-readonly",
        )
        .await?;
        let out = &ran.out;
        assert!(ran.success, "{out}");
        for want in [
            "port 6379",
            "user default on",
            "config-readonly",
            "users-readonly",
        ] {
            assert!(out.contains(want), "{want:?} missing: {out}");
        }
        Ok(())
    }
}
