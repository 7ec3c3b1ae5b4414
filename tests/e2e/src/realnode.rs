//! localkube's real node (tests/localkube/realnode/README.md): the upstream kubelet with
//! containerd, running images built here. Tests that need it ask [`node`] first.

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::{E2eError, Result};

/// The node's name, and its label and taint key.
pub const NODE: &str = "localkube-real";
pub const LABEL: &str = "localkube.io/real-node";

/// What a pod spec (YAML, two spaces in) needs to run there: its label, and a toleration of its
/// taint.
pub const POD_PLACEMENT: &str = r#"  nodeSelector: {localkube.io/real-node: "true"}
  tolerations: [{key: localkube.io/real-node, operator: Exists, effect: NoSchedule}]
"#;

/// The same as fields of a ValkeyCluster's or ValkeyReplication's spec (flow style).
pub const SPEC_PLACEMENT: &str = r#"nodeSelector: {localkube.io/real-node: "true"}, tolerations: [{key: localkube.io/real-node, operator: Exists, effect: NoSchedule}]"#;

/// The real node, or `None` after saying why the test does not run. With
/// `LOCALKUBE_REAL_NODE=1` (make test starts localkube with the node) its absence is a failure
/// that names what the machine lacks, when localkube recorded it; elsewhere (another cluster, a
/// localkube started without it) the test says it is skipped and why.
pub async fn node() -> Result<Option<Node>> {
    let asked = std::env::var("LOCALKUBE_REAL_NODE").is_ok_and(|v| v == "1");
    if !asked && !crate::is_localkube() {
        eprintln!("SKIPPED: the real node is localkube's (this cluster is not)");
        return Ok(None);
    }
    let nodes: Api<Node> = Api::all(crate::client().await?);
    if let Some(node) = nodes.get_opt(NODE).await? {
        return Ok(Some(node));
    }
    let unavailable = crate::localkube_dir().join("realnode/state/unavailable");
    let why = std::fs::read_to_string(&unavailable).unwrap_or_else(|_| {
        "localkube runs without it (localkube start --real-node, or LOCALKUBE_REAL_NODE=1 make localkube)".into()
    });
    if asked {
        return Err(E2eError::Check(format!("no real node {NODE}: {why}")));
    }
    eprintln!("SKIPPED: no real node {NODE}: {why}");
    Ok(None)
}

/// localkube's registry, which the real node's containerd pulls every image from.
pub const REGISTRY: &str = "127.0.0.1:25000";

/// A container's status in `pod`.
pub fn container_status(
    pod: &k8s_openapi::api::core::v1::Pod,
    name: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

/// The host pid of a running container of `pod`: a process whose memory cgroup is the
/// container's own (runc names it after the container's ID).
pub fn container_pid(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> Result<u32> {
    let id = container_status(pod, name)
        .and_then(|c| c.container_id)
        .ok_or_else(|| {
            E2eError::Check(format!(
                "no container ID for {name}: {}",
                crate::describe_pod(pod)
            ))
        })?;
    let id = id
        .strip_prefix("containerd://")
        .ok_or_else(|| E2eError::Check(format!("container ID {id} is not containerd's")))?;
    let suffix = format!("/{id}");
    let entries = std::fs::read_dir("/proc").map_err(|e| E2eError::Check(format!("/proc: {e}")))?;
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cgroups
            .lines()
            .any(|l| l.contains(":memory:") && l.ends_with(&suffix))
        {
            return Ok(pid);
        }
    }
    Err(E2eError::Check(format!(
        "no process in container {id}'s memory cgroup"
    )))
}

/// The value of a `Key:` line of /proc/<pid>/status, its fields joined by one space.
pub fn proc_status(pid: u32, key: &str) -> Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| E2eError::Check(format!("/proc/{pid}/status: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .ok_or_else(|| E2eError::Check(format!("/proc/{pid}/status has no {key}")))
}

/// The mountinfo line of the process's root file system.
pub fn root_mount(pid: u32) -> Result<String> {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map_err(|e| E2eError::Check(format!("/proc/{pid}/mountinfo: {e}")))?;
    mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .map(str::to_owned)
        .ok_or_else(|| E2eError::Check(format!("/proc/{pid}/mountinfo has no root mount")))
}

/// Whether a mountinfo line's mount options say read-only.
pub fn mount_read_only(line: &str) -> bool {
    line.split_whitespace()
        .nth(5)
        .is_some_and(|options| options.split(',').any(|o| o == "ro"))
}

/// The memory limit (bytes) of the process's memory cgroup, as the kernel enforces it.
pub fn memory_limit(pid: u32) -> Result<u64> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| E2eError::Check(format!("/proc/{pid}/cgroup: {e}")))?;
    let path = cgroups
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))
        .ok_or_else(|| E2eError::Check(format!("pid {pid} has no memory cgroup")))?;
    let file = format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes");
    let text =
        std::fs::read_to_string(&file).map_err(|e| E2eError::Check(format!("{file}: {e}")))?;
    text.trim()
        .parse()
        .map_err(|e| E2eError::Check(format!("{file}: {text:?}: {e}")))
}

/// An image built by `make test-images` or `make images` (`target/images/<name>.oci.tar`): the
/// reference the supervisor pushes it under (`<name>.refs`, e.g.
/// `valkey-operator/node-controller:0.1.0`) and its manifest's digest.
pub struct BuiltImage {
    pub repository: String,
    pub tag: String,
    pub digest: String,
}

/// The controller image `name` as `make test-images` (or `make images`) wrote it, and present in
/// localkube's registry under its reference with the same digest; otherwise an error saying what
/// to do.
pub async fn built_image(name: &str) -> Result<BuiltImage> {
    let dir = crate::repo_root().join("target/images");
    let archive = dir.join(format!("{name}.oci.tar"));
    let refs = dir.join(format!("{name}.refs"));
    if !archive.is_file() || !refs.is_file() {
        return Err(E2eError::Check(format!(
            "{} is missing: run `make test-images` (OCI archives of both controllers) before \
             localkube starts, whose supervisor pushes target/images to its registry",
            archive.display()
        )));
    }
    let reference = std::fs::read_to_string(&refs)
        .map_err(|e| E2eError::Check(format!("{}: {e}", refs.display())))?
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .ok_or_else(|| E2eError::Check(format!("{} names no reference", refs.display())))?;
    let (repository, tag) = reference
        .rsplit_once(':')
        .ok_or_else(|| E2eError::Check(format!("reference {reference} has no tag")))?;
    let digest = archive_digest(&archive).await?;
    let served = registry_digest(repository, tag).await?;
    if served.as_deref() != Some(digest.as_str()) {
        return Err(E2eError::Check(format!(
            "localkube's registry serves {reference} as {served:?}, not {digest} of {}: the \
             supervisor pushes target/images when it starts, so run `make test-images` before \
             `LOCALKUBE_REAL_NODE=1 make localkube` (or restart localkube after it)",
            archive.display()
        )));
    }
    Ok(BuiltImage {
        repository: repository.to_owned(),
        tag: tag.to_owned(),
        digest,
    })
}

/// The manifest digest of an OCI archive (its index.json's first manifest).
pub async fn archive_digest(archive: &std::path::Path) -> Result<String> {
    let out = tokio::process::Command::new("tar")
        .args(["-xOf", &archive.display().to_string(), "index.json"])
        .output()
        .await
        .map_err(|source| E2eError::Spawn {
            program: "tar".into(),
            source,
        })?;
    let index: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| E2eError::Check(format!("{}: index.json: {e}", archive.display())))?;
    index["manifests"][0]["digest"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| E2eError::Check(format!("{}: no manifest digest", archive.display())))
}

/// The digest localkube's registry serves `repository:tag` under, `None` when it has no such
/// manifest.
async fn registry_digest(repository: &str, tag: &str) -> Result<Option<String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "HEAD /v2/{repository}/manifests/{tag} HTTP/1.0\r\nHost: {REGISTRY}\r\nAccept: \
         application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, \
         application/vnd.docker.distribution.manifest.v2+json\r\n\r\n"
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(REGISTRY).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(std::time::Duration::from_secs(10), exchange)
        .await
        .map_err(|_| E2eError::Check(format!("localkube's registry {REGISTRY} did not answer")))?
        .map_err(|e| E2eError::Check(format!("localkube's registry {REGISTRY}: {e}")))?;
    let status = response.lines().next().unwrap_or_default();
    if status.contains(" 404 ") {
        return Ok(None);
    }
    if !status.contains(" 200 ") {
        return Err(E2eError::Check(format!(
            "localkube's registry answered HEAD {repository}:{tag} with {status}"
        )));
    }
    Ok(response.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("docker-content-digest")
            .then(|| value.trim().to_owned())
    }))
}
