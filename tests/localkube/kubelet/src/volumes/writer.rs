//! Writes ConfigMap/Secret/projected volumes the way a kubelet's atomic writer does: the files
//! live in a timestamped directory, `..data` points at it, and each top-level name is a symlink
//! through `..data`, so an update swaps the whole set at once and running containers see it.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Component, Path, PathBuf};

/// Relative path → (content, mode).
pub type Payload = BTreeMap<String, (Vec<u8>, u32)>;

const DATA_LINK: &str = "..data";

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path {0:?} in volume payload")]
    BadPath(String),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn valid(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && !rel.starts_with("..")
        && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// What the volume holds now, read through `..data`.
fn current(dir: &Path, payload: &Payload) -> Option<Payload> {
    let data = dir.join(DATA_LINK);
    let mut out = Payload::new();
    for (rel, (_, mode)) in payload {
        let path = data.join(rel);
        let content = std::fs::read(&path).ok()?;
        let actual = std::fs::metadata(&path).ok()?.permissions().mode() & 0o7777;
        // The group-read bit may have been added for fsGroup; it is not a difference.
        if actual & !0o040 != *mode & !0o040 {
            return None;
        }
        out.insert(rel.clone(), (content, *mode));
    }
    Some(out)
}

fn top_level(rel: &str) -> String {
    rel.split('/').next().unwrap_or(rel).to_string()
}

/// Writes `payload` into `dir` unless it already holds exactly that; returns whether it wrote.
/// With `group`, files and directories are group-owned by it and group-readable.
pub fn write(
    dir: &Path,
    payload: &Payload,
    group: Option<u32>,
    stamp: &str,
) -> Result<bool, WriteError> {
    for rel in payload.keys() {
        if !valid(rel) {
            return Err(WriteError::BadPath(rel.clone()));
        }
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let entries: Vec<String> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let wanted: BTreeMap<String, ()> = payload.keys().map(|k| (top_level(k), ())).collect();
    // Every name this writer makes at the top is a symlink; a real directory there is the mount
    // point of a volume mounted inside this one, made when a container started, and stays.
    let is_mount_point =
        |e: &String| std::fs::symlink_metadata(dir.join(e)).is_ok_and(|m| m.file_type().is_dir());
    let links_match = entries
        .iter()
        .filter(|e| !e.starts_with("..") && !is_mount_point(e))
        .all(|e| wanted.contains_key(e))
        && wanted.keys().all(|k| entries.contains(k));
    if links_match && current(dir, payload).as_ref() == Some(payload) {
        return Ok(false);
    }

    let new_dir_name = format!("..{stamp}");
    let new_dir = dir.join(&new_dir_name);
    let _ = std::fs::remove_dir_all(&new_dir);
    for (rel, (content, mode)) in payload {
        let path = new_dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, content).map_err(io(&path))?;
        let mut mode = *mode;
        if let Some(g) = group {
            chown(&path, None, Some(g)).map_err(io(&path))?;
            mode |= 0o040;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io(&path))?;
    }
    std::fs::create_dir_all(&new_dir).map_err(io(&new_dir))?;
    for d in [dir.to_path_buf(), new_dir.clone()] {
        if let Some(g) = group {
            chown(&d, None, Some(g)).map_err(io(&d))?;
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).map_err(io(&d))?;
    }

    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&new_dir_name, &tmp_link).map_err(io(&tmp_link))?;
    let data_link = dir.join(DATA_LINK);
    std::fs::rename(&tmp_link, &data_link).map_err(io(&data_link))?;

    for name in wanted.keys() {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_LINK).join(name), &link)
                .map_err(io(&link))?;
        }
    }
    for e in &entries {
        let path = dir.join(e);
        if e.starts_with("..") {
            if *e != new_dir_name && e != DATA_LINK {
                let _ = std::fs::remove_dir_all(&path);
                let _ = std::fs::remove_file(&path);
            }
        } else if !wanted.contains_key(e) && !is_mount_point(e) {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(true)
}

/// Makes a writable volume group-owned by `group` as a kubelet does for fsGroup: group
/// read/write, and the set-group-ID bit on directories so new files inherit the group.
pub fn own_recursively(path: &Path, group: u32) -> Result<(), WriteError> {
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    chown(path, None, Some(group)).map_err(io(path))?;
    let mode = meta.permissions().mode() & 0o7777;
    let wanted = if meta.is_dir() {
        mode | 0o2070
    } else {
        mode | 0o060
    };
    if wanted != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))
            .map_err(io(path))?;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io(path))?.flatten() {
            own_recursively(&entry.path(), group)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(items: &[(&str, &str)]) -> Payload {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn writes_swaps_and_removes_keys() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("lk-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(write(
            &dir,
            &payload(&[("a", "1"), ("sub/b", "2")]),
            None,
            "t1"
        )?);
        assert_eq!(std::fs::read_to_string(dir.join("a"))?, "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b"))?, "2");
        assert!(!write(
            &dir,
            &payload(&[("a", "1"), ("sub/b", "2")]),
            None,
            "t2"
        )?);
        assert!(write(&dir, &payload(&[("a", "3")]), None, "t3")?);
        assert_eq!(std::fs::read_to_string(dir.join("a"))?, "3");
        assert!(std::fs::symlink_metadata(dir.join("sub")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("..t1")).is_err());
        assert!(write(&dir, &payload(&[("../x", "1")]), None, "t4").is_err());
        // The mount point of a nested volume neither forces a rewrite nor is removed.
        std::fs::create_dir(dir.join("users"))?;
        assert!(!write(&dir, &payload(&[("a", "3")]), None, "t5")?);
        assert!(dir.join("users").is_dir());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
