//! The root filesystem of one container, as a list of steps (pure: unit-tested, no syscalls).
//!
//! The root is a tmpfs mounted in the container's private mount namespace, so every mount made
//! for it disappears with the container's last process: nothing is left mounted on the host.

use std::path::{Component, Path, PathBuf};

/// Host directories the container sees read-only, as on the host.
pub const HOST_DIRS: [&str; 5] = ["/usr", "/lib", "/lib64", "/bin", "/sbin"];
/// Host files and directories under /etc that programs need (user names, the dynamic linker, TLS roots).
pub const HOST_ETC: [&str; 12] = [
    "passwd",
    "group",
    "nsswitch.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "ssl",
    "alternatives",
    "services",
    "protocols",
    "host.conf",
];
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Creates a directory (and its parents) inside the new root.
    Dir {
        path: PathBuf,
        mode: u32,
    },
    /// Bind-mounts a host path; a file target is created empty first.
    Bind {
        source: PathBuf,
        target: PathBuf,
        readonly: bool,
        file: bool,
    },
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    Tmpfs {
        target: PathBuf,
        options: String,
    },
    Proc {
        target: PathBuf,
    },
}

/// A volume as the container mounts it: `source` is on the host, `target` inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub readonly: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsPlan {
    /// The host directory the tmpfs root is mounted on.
    pub root: PathBuf,
    pub steps: Vec<Step>,
    pub readonly_root: bool,
    pub workdir: PathBuf,
    pub hostname: String,
    /// `None` keeps the kubelet's identity (root).
    pub identity: Option<Identity>,
}

pub struct PlanInput<'a> {
    pub root: PathBuf,
    pub image_bin: PathBuf,
    pub image_lib: Option<PathBuf>,
    /// Pod-specific /etc files (hosts, hostname, resolv.conf) on the host.
    pub pod_etc: PathBuf,
    pub volumes: &'a [VolumeMount],
    pub readonly_root: bool,
    pub workdir: Option<String>,
    pub hostname: String,
    pub identity: Option<Identity>,
}

/// Joins a container path below the root, ignoring `..` so a mountPath cannot leave it.
pub fn inside(root: &Path, container_path: &Path) -> PathBuf {
    let mut out = root.to_path_buf();
    for c in container_path.components() {
        if let Component::Normal(part) = c {
            out.push(part);
        }
    }
    out
}

/// How a host path appears: a symlink is recreated as a symlink (merged-/usr hosts), a
/// directory or file is bind-mounted, and a missing one is skipped.
fn host_entry(root: &Path, host: &Path, steps: &mut Vec<Step>) {
    let Ok(meta) = std::fs::symlink_metadata(host) else {
        return;
    };
    let target = inside(root, host);
    if meta.file_type().is_symlink() {
        if let Ok(dest) = std::fs::read_link(host) {
            steps.push(Step::Symlink {
                target: dest,
                link: target,
            });
        }
    } else {
        steps.push(Step::Bind {
            source: host.to_path_buf(),
            target,
            readonly: true,
            file: !meta.is_dir(),
        });
    }
}

pub fn build(input: PlanInput<'_>) -> RootfsPlan {
    let root = input.root.clone();
    let at = |p: &str| inside(&root, Path::new(p));
    let mut steps = Vec::new();
    for dir in [
        "/etc", "/tmp", "/var", "/run", "/root", "/home", "/proc", "/sys", "/dev",
    ] {
        let mode = if dir == "/tmp" { 0o1777 } else { 0o755 };
        steps.push(Step::Dir {
            path: at(dir),
            mode,
        });
    }
    for dir in HOST_DIRS {
        host_entry(&root, Path::new(dir), &mut steps);
    }
    for name in HOST_ETC {
        host_entry(&root, &Path::new("/etc").join(name), &mut steps);
    }
    for name in ["hosts", "hostname", "resolv.conf"] {
        steps.push(Step::Bind {
            source: input.pod_etc.join(name),
            target: at("/etc").join(name),
            readonly: true,
            file: true,
        });
    }
    steps.push(Step::Bind {
        source: input.image_bin.clone(),
        target: at("/usr/local/bin"),
        readonly: true,
        file: false,
    });
    if let Some(lib) = &input.image_lib {
        steps.push(Step::Bind {
            source: lib.clone(),
            target: at("/usr/local/lib"),
            readonly: true,
            file: false,
        });
    }
    steps.push(Step::Proc {
        target: at("/proc"),
    });
    steps.push(Step::Bind {
        source: PathBuf::from("/sys"),
        target: at("/sys"),
        readonly: true,
        file: false,
    });
    steps.push(Step::Tmpfs {
        target: at("/dev"),
        options: "mode=0755,size=1m".into(),
    });
    for dev in DEVICES {
        steps.push(Step::Bind {
            source: Path::new("/dev").join(dev),
            target: at("/dev").join(dev),
            readonly: false,
            file: true,
        });
    }
    steps.push(Step::Tmpfs {
        target: at("/dev/shm"),
        options: "mode=1777,size=64m".into(),
    });
    for (link, dest) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink {
            target: PathBuf::from(dest),
            link: at(link),
        });
    }
    // Parents before children, so a volume inside another volume lands on top of it.
    let mut volumes: Vec<&VolumeMount> = input.volumes.iter().collect();
    volumes.sort_by_key(|v| v.target.components().count());
    for v in volumes {
        steps.push(Step::Bind {
            source: v.source.clone(),
            target: inside(&root, &v.target),
            readonly: v.readonly,
            file: v.source.is_file(),
        });
    }
    let workdir = input
        .workdir
        .filter(|w| !w.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    if workdir != Path::new("/") {
        steps.push(Step::Dir {
            path: inside(&root, &workdir),
            mode: 0o755,
        });
    }
    RootfsPlan {
        root,
        steps,
        readonly_root: input.readonly_root,
        workdir,
        hostname: input.hostname,
        identity: input.identity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_never_leaves_the_root() {
        let root = Path::new("/r");
        assert_eq!(
            inside(root, Path::new("/data/../../etc")),
            PathBuf::from("/r/data/etc")
        );
        assert_eq!(
            inside(root, Path::new("relative")),
            PathBuf::from("/r/relative")
        );
    }

    #[test]
    fn plan_mounts_image_and_volumes_in_order() {
        let volumes = vec![
            VolumeMount {
                source: PathBuf::from("/state/v/conf"),
                target: PathBuf::from("/data/conf"),
                readonly: true,
            },
            VolumeMount {
                source: PathBuf::from("/state/v/data"),
                target: PathBuf::from("/data"),
                readonly: false,
            },
        ];
        let plan = build(PlanInput {
            root: PathBuf::from("/r"),
            image_bin: PathBuf::from("/images/valkey-9.1/bin"),
            image_lib: None,
            pod_etc: PathBuf::from("/state/pod/etc"),
            volumes: &volumes,
            readonly_root: true,
            workdir: Some("/data".into()),
            hostname: "web-0".into(),
            identity: None,
        });
        assert!(plan.steps.contains(&Step::Bind {
            source: PathBuf::from("/images/valkey-9.1/bin"),
            target: PathBuf::from("/r/usr/local/bin"),
            readonly: true,
            file: false,
        }));
        let position = |target: &str| {
            plan.steps
                .iter()
                .position(|s| matches!(s, Step::Bind { target: t, .. } if t == Path::new(target)))
        };
        let (data, conf) = (position("/r/data"), position("/r/data/conf"));
        assert!(data.is_some() && conf.is_some() && data < conf);
        assert_eq!(plan.workdir, PathBuf::from("/data"));
        assert!(plan.readonly_root);
    }
}
