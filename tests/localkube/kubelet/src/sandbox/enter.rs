//! What runs between fork and exec: join the pod's network namespace, build the root in a private
//! mount namespace, pivot into it, and drop to the container's user.
//!
//! Everything the child needs is prepared beforehand (C strings, open namespace files), so the
//! child only makes system calls. A failing step writes its name to stderr (the container log)
//! before spawn returns the error.

use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid, chdir, pivot_root, setgid, setgroups, sethostname, setsid, setuid};

use super::plan::{Identity, RootfsPlan, Step};

fn c_text(text: String) -> io::Result<CString> {
    CString::new(text).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Every directory from below `root` down to `path`, so each can be created in turn.
fn chain(root: &Path, path: &Path) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    let mut current = path;
    let mut stack = Vec::new();
    while current != root && current.starts_with(root) {
        stack.push(current.to_path_buf());
        match current.parent() {
            Some(p) => current = p,
            None => break,
        }
    }
    for p in stack.iter().rev() {
        out.push(cstring(p)?);
    }
    Ok(out)
}

enum Op {
    Dirs {
        chain: Vec<CString>,
        mode: Mode,
    },
    Bind {
        source: CString,
        parents: Vec<CString>,
        target: CString,
        file: bool,
    },
    Symlink {
        parents: Vec<CString>,
        dest: CString,
        link: CString,
    },
    Tmpfs {
        parents: Vec<CString>,
        target: CString,
        options: CString,
    },
    Proc {
        target: CString,
    },
}

struct PreparedIdentity {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

fn identity(id: &Option<Identity>) -> Option<PreparedIdentity> {
    id.as_ref().map(|i| PreparedIdentity {
        uid: Uid::from_raw(i.uid),
        gid: Gid::from_raw(i.gid),
        groups: i.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
    })
}

/// A container's setup, ready for the child.
pub struct Prepared {
    netns: File,
    root: CString,
    root_options: CString,
    ops: Vec<(CString, Op)>,
    /// Binds made read-only once every mount is in place: a mount point inside a read-only
    /// volume (a Secret under a ConfigMap's directory) is created first, as a kubelet does.
    readonly_binds: Vec<(CString, CString)>,
    readonly_root: bool,
    workdir: CString,
    hostname: OsString,
    identity: Option<PreparedIdentity>,
}

fn parents_of(root: &Path, target: &Path) -> io::Result<Vec<CString>> {
    match target.parent() {
        Some(parent) => chain(root, parent),
        None => Ok(Vec::new()),
    }
}

impl Prepared {
    pub fn new(plan: &RootfsPlan, netns: File) -> io::Result<Self> {
        let root = plan.root.as_path();
        let mut ops = Vec::new();
        let mut readonly_binds = Vec::new();
        for step in &plan.steps {
            let (what, op) = match step {
                Step::Dir { path, mode } => (
                    format!("mkdir {}", path.display()),
                    Op::Dirs {
                        chain: chain(root, path)?,
                        mode: Mode::from_bits_truncate(*mode),
                    },
                ),
                Step::Bind {
                    source,
                    target,
                    readonly,
                    file,
                } => {
                    if *readonly {
                        let what = format!(
                            "localkube-kubelet: remount {} read-only failed\n",
                            target.display()
                        );
                        readonly_binds.push((c_text(what)?, cstring(target)?));
                    }
                    (
                        format!("bind {} on {}", source.display(), target.display()),
                        Op::Bind {
                            source: cstring(source)?,
                            parents: parents_of(root, target)?,
                            target: cstring(target)?,
                            file: *file,
                        },
                    )
                }
                Step::Symlink { target, link } => (
                    format!("symlink {}", link.display()),
                    Op::Symlink {
                        parents: parents_of(root, link)?,
                        dest: cstring(target)?,
                        link: cstring(link)?,
                    },
                ),
                Step::Tmpfs { target, options } => (
                    format!("tmpfs on {}", target.display()),
                    Op::Tmpfs {
                        parents: parents_of(root, target)?,
                        target: cstring(target)?,
                        options: CString::new(options.as_bytes()).map_err(|_| {
                            io::Error::new(io::ErrorKind::InvalidInput, "bad tmpfs options")
                        })?,
                    },
                ),
                Step::Proc { target } => (
                    format!("proc on {}", target.display()),
                    Op::Proc {
                        target: cstring(target)?,
                    },
                ),
            };
            ops.push((c_text(format!("localkube-kubelet: {what} failed\n"))?, op));
        }
        Ok(Self {
            netns,
            root: cstring(root)?,
            root_options: CString::from(c"mode=0755,size=256m"),
            ops,
            readonly_binds,
            readonly_root: plan.readonly_root,
            workdir: cstring(&plan.workdir)?,
            hostname: OsString::from(&plan.hostname),
            identity: identity(&plan.identity),
        })
    }

    /// Runs in the child between fork and exec.
    pub fn enter(&self) -> io::Result<()> {
        setsid()?;
        step(
            c"join network namespace",
            setns(&self.netns, CloneFlags::CLONE_NEWNET),
        )?;
        step(
            c"unshare",
            unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS),
        )?;
        step(c"sethostname", sethostname(&self.hostname))?;
        step(
            c"make / private",
            mount(
                None::<&CStr>,
                c"/",
                None::<&CStr>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&CStr>,
            ),
        )?;
        step(
            c"mount root tmpfs",
            mount(
                Some(c"tmpfs"),
                self.root.as_c_str(),
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(self.root_options.as_c_str()),
            ),
        )?;
        for (what, op) in &self.ops {
            step(what, apply(op))?;
        }
        for (what, target) in &self.readonly_binds {
            step(what, remount_readonly(target))?;
        }
        step(c"chdir root", chdir(self.root.as_c_str()))?;
        step(c"pivot_root", pivot_root(c".", c"."))?;
        step(c"detach old root", umount2(c".", MntFlags::MNT_DETACH))?;
        chdir(c"/")?;
        if self.readonly_root {
            step(c"remount root read-only", remount_readonly(c"/"))?;
        }
        step(c"chdir workingDir", chdir(self.workdir.as_c_str()))?;
        become_user(&self.identity)
    }
}

fn report(what: &CStr) {
    let bytes = what.to_bytes();
    // SAFETY: writing a valid buffer to stderr; the result does not matter on this error path.
    unsafe {
        nix::libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

fn step<T>(what: &CStr, result: nix::Result<T>) -> io::Result<T> {
    result.map_err(|errno| {
        report(what);
        if !what.to_bytes().ends_with(b"\n") {
            report(c" failed\n");
        }
        io::Error::from(errno)
    })
}

fn mkdirs(chain: &[CString], mode: Mode) -> nix::Result<()> {
    for dir in chain {
        match nix::unistd::mkdir(dir.as_c_str(), mode) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn apply(op: &Op) -> nix::Result<()> {
    let dir_mode = Mode::from_bits_truncate(0o755);
    match op {
        Op::Dirs { chain, mode } => {
            mkdirs(chain, *mode)?;
            // mkdir applies the umask; the sticky /tmp needs its exact mode.
            if let Some(last) = chain.last() {
                nix::sys::stat::fchmodat(
                    nix::fcntl::AT_FDCWD,
                    last.as_c_str(),
                    *mode,
                    nix::sys::stat::FchmodatFlags::FollowSymlink,
                )?;
            }
            Ok(())
        }
        Op::Bind {
            source,
            parents,
            target,
            file,
        } => {
            mkdirs(parents, dir_mode)?;
            if *file {
                match nix::fcntl::open(
                    target.as_c_str(),
                    nix::fcntl::OFlag::O_CREAT | nix::fcntl::OFlag::O_WRONLY,
                    Mode::from_bits_truncate(0o644),
                ) {
                    Ok(fd) => drop(fd),
                    // A file already there (e.g. on a read-only bind) is a fine mount point.
                    Err(nix::errno::Errno::EROFS | nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
            } else {
                mkdirs(std::slice::from_ref(target), dir_mode)?;
            }
            mount(
                Some(source.as_c_str()),
                target.as_c_str(),
                None::<&CStr>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&CStr>,
            )
        }
        Op::Symlink {
            parents,
            dest,
            link,
        } => {
            mkdirs(parents, dir_mode)?;
            nix::unistd::symlinkat(dest.as_c_str(), nix::fcntl::AT_FDCWD, link.as_c_str())
        }
        Op::Tmpfs {
            parents,
            target,
            options,
        } => {
            mkdirs(parents, dir_mode)?;
            mkdirs(std::slice::from_ref(target), dir_mode)?;
            mount(
                Some(c"tmpfs"),
                target.as_c_str(),
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID,
                Some(options.as_c_str()),
            )
        }
        Op::Proc { target } => {
            mkdirs(std::slice::from_ref(target), dir_mode)?;
            mount(
                Some(c"proc"),
                target.as_c_str(),
                Some(c"proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&CStr>,
            )
        }
    }
}

fn remount_readonly(target: &CStr) -> nix::Result<()> {
    mount(
        None::<&CStr>,
        target,
        None::<&CStr>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
        None::<&CStr>,
    )
}

fn become_user(identity: &Option<PreparedIdentity>) -> io::Result<()> {
    if let Some(id) = identity {
        step(c"setgroups", setgroups(&id.groups))?;
        step(c"setgid", setgid(id.gid))?;
        step(c"setuid", setuid(id.uid))?;
    }
    Ok(())
}

/// Joining a running container's namespaces, for exec probes.
pub struct Join {
    netns: File,
    uts: File,
    mnt: File,
    identity: Option<PreparedIdentity>,
}

impl Join {
    /// Opens the namespaces of the container whose main process is `pid`.
    pub fn of(pid: u32, identity_of: &Option<Identity>) -> io::Result<Self> {
        let ns = |kind: &str| File::open(format!("/proc/{pid}/ns/{kind}"));
        Ok(Self {
            netns: ns("net")?,
            uts: ns("uts")?,
            mnt: ns("mnt")?,
            identity: identity(identity_of),
        })
    }

    pub fn enter(&self) -> io::Result<()> {
        setsid()?;
        step(
            c"join network namespace",
            setns(&self.netns, CloneFlags::CLONE_NEWNET),
        )?;
        step(
            c"join uts namespace",
            setns(&self.uts, CloneFlags::CLONE_NEWUTS),
        )?;
        step(
            c"join mount namespace",
            setns(&self.mnt, CloneFlags::CLONE_NEWNS),
        )?;
        chdir(c"/")?;
        become_user(&self.identity)
    }
}
