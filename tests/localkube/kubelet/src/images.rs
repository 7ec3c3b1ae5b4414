//! The image table: an image reference names a directory of programs on this machine.
//!
//! `<registry>/<repo>/<name>:<tag>` → `<images-dir>/<name>-<tag>/`, else the tag shortened at dots
//! (`valkey-9.1.2` → `valkey-9.1` → `valkey-9`), else `<images-dir>/<name>/`.

use std::path::{Path, PathBuf};

/// A resolved image: the directory whose `bin/` (and optional `lib/`) the container sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDir {
    pub root: PathBuf,
    /// The last path segment of the repository (`valkey` for `valkey/valkey:9.1`).
    pub name: String,
}

impl ImageDir {
    pub fn bin(&self) -> PathBuf {
        self.root.join("bin")
    }

    /// `lib/` when the image ships one.
    pub fn lib(&self) -> Option<PathBuf> {
        let lib = self.root.join("lib");
        lib.is_dir().then_some(lib)
    }

    /// What a kubelet reports as `imageID`: stable for one directory.
    pub fn image_id(&self) -> String {
        let dir = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("localkube://{dir}")
    }

    /// The image's ENTRYPOINT and CMD, read from the optional files `entrypoint` and `cmd`
    /// (one argument per line). Without them the entrypoint is `<name>-server` or `<name>`
    /// when `bin/` has such a program, which is what the upstream images of servers do.
    pub fn defaults(&self) -> (Vec<String>, Vec<String>) {
        let read = |file: &str| -> Option<Vec<String>> {
            let text = std::fs::read_to_string(self.root.join(file)).ok()?;
            Some(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect(),
            )
        };
        let entrypoint = read("entrypoint").unwrap_or_else(|| {
            [format!("{}-server", self.name), self.name.clone()]
                .into_iter()
                .find(|prog| self.bin().join(prog).is_file())
                .map(|prog| vec![prog])
                .unwrap_or_default()
        });
        (entrypoint, read("cmd").unwrap_or_default())
    }
}

/// Splits `registry:5000/repo/name:tag@sha256:...` into (`name`, `tag`); the tag defaults to `latest`.
pub fn parse_reference(image: &str) -> Option<(String, String)> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_segment = without_digest.rsplit('/').next()?;
    let (name, tag) = match last_segment.split_once(':') {
        Some((name, tag)) => (name, tag),
        None => (last_segment, "latest"),
    };
    if name.is_empty() || tag.is_empty() {
        return None;
    }
    Some((name.to_string(), tag.to_string()))
}

/// Candidate directory names in the order they are tried.
pub fn candidates(name: &str, tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut tag = tag;
    loop {
        out.push(format!("{name}-{tag}"));
        match tag.rfind('.') {
            Some(dot) => tag = &tag[..dot],
            None => break,
        }
    }
    out.push(name.to_string());
    out
}

/// Finds the directory for `image` under `images_dir`, if any.
pub fn resolve(images_dir: &Path, image: &str) -> Option<ImageDir> {
    let (name, tag) = parse_reference(image)?;
    candidates(&name, &tag)
        .into_iter()
        .map(|c| images_dir.join(c))
        .find(|dir| dir.join("bin").is_dir())
        .map(|root| ImageDir { root, name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_parsing_ignores_registry_and_digest() {
        assert_eq!(
            parse_reference("docker.io/valkey/valkey:9.1"),
            Some(("valkey".into(), "9.1".into()))
        );
        assert_eq!(
            parse_reference("localhost:5000/valkey-operator/node-controller:dev@sha256:ab"),
            Some(("node-controller".into(), "dev".into()))
        );
        assert_eq!(
            parse_reference("busybox"),
            Some(("busybox".into(), "latest".into()))
        );
        assert_eq!(parse_reference("x:"), None);
    }

    #[test]
    fn candidates_shorten_the_tag_at_dots() {
        assert_eq!(
            candidates("valkey", "9.1.2"),
            vec!["valkey-9.1.2", "valkey-9.1", "valkey-9", "valkey"]
        );
        assert_eq!(candidates("probe", "latest"), vec!["probe-latest", "probe"]);
    }

    #[test]
    fn resolve_prefers_the_most_specific_directory() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("lk-images-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("valkey-9.1/bin"))?;
        std::fs::create_dir_all(dir.join("valkey/bin"))?;
        std::fs::write(dir.join("valkey-9.1/bin/valkey-server"), "")?;
        let found = resolve(&dir, "valkey/valkey:9.1.2");
        assert_eq!(
            found.as_ref().map(|d| d.root.clone()),
            Some(dir.join("valkey-9.1"))
        );
        assert_eq!(
            found.map(|d| d.defaults()),
            Some((vec!["valkey-server".to_string()], vec![]))
        );
        assert_eq!(
            resolve(&dir, "valkey/valkey:8.0").map(|d| d.root),
            Some(dir.join("valkey"))
        );
        assert_eq!(resolve(&dir, "other/thing:1"), None);
        std::fs::remove_dir_all(&dir)
    }
}
