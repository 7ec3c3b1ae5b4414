//! Pod volumes on the host: each is a directory the containers bind-mount.

pub mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, KeyToPath, PersistentVolume, PersistentVolumeClaim, Secret, ServiceAccount, Volume,
};
use kube::Api;
use kube::api::PostParams;

use crate::envvars::{self, EnvContext};
use writer::Payload;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{kind} \"{name}\" not found")]
    NotFound { kind: &'static str, name: String },
    #[error("persistentvolumeclaim \"{0}\" is not bound")]
    Unbound(String),
    #[error("persistentvolume \"{0}\" has no local path")]
    NoPath(String),
    #[error("volume {0} has a type this kubelet does not support")]
    Unsupported(String),
    #[error("token request for serviceaccount {0} returned no token")]
    NoToken(String),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Write(#[from] writer::WriteError),
    #[error("downward API: {0}")]
    Field(#[from] envvars::EnvError),
    #[error("creating {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the pod's volumes need from the cluster and the host.
pub struct VolumeContext<'a> {
    pub client: kube::Client,
    pub pod_dir: &'a Path,
    pub env: &'a EnvContext,
    pub fs_group: Option<u32>,
    /// A name for this write, unique per pod (the atomic writer's directory).
    pub stamp: String,
    /// Tokens already requested, by audience and lifetime, with when they were issued.
    pub tokens: &'a std::sync::Mutex<BTreeMap<String, (Vec<u8>, std::time::Instant)>>,
}

fn mkdir(path: &Path, mode: u32) -> Result<(), VolumeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        VolumeError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

async fn get_opt<K>(api: Api<K>, name: &str) -> Result<Option<K>, VolumeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.get_opt(name).await?)
}

/// Keys of an object selected by `items` (all keys without), with their modes.
fn select(
    data: &BTreeMap<String, Vec<u8>>,
    items: &Option<Vec<KeyToPath>>,
    default_mode: u32,
    kind: &'static str,
    name: &str,
    optional: bool,
    out: &mut Payload,
) -> Result<(), VolumeError> {
    match items {
        None => {
            for (k, v) in data {
                out.insert(k.clone(), (v.clone(), default_mode));
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        let mode = item.mode.map(|m| m as u32).unwrap_or(default_mode);
                        out.insert(item.path.clone(), (v.clone(), mode));
                    }
                    None if optional => {}
                    None => {
                        return Err(VolumeError::NotFound {
                            kind,
                            name: format!("{name}/{}", item.key),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    data
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    data
}

impl VolumeContext<'_> {
    fn namespace(&self) -> &str {
        &self.env.namespace
    }

    async fn config_map(
        &self,
        name: &str,
        items: &Option<Vec<KeyToPath>>,
        mode: u32,
        optional: bool,
        out: &mut Payload,
    ) -> Result<(), VolumeError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace());
        match get_opt(api, name).await? {
            Some(cm) => select(
                &config_map_data(&cm),
                items,
                mode,
                "configmap",
                name,
                optional,
                out,
            ),
            None if optional => Ok(()),
            None => Err(VolumeError::NotFound {
                kind: "configmap",
                name: name.to_string(),
            }),
        }
    }

    async fn secret(
        &self,
        name: &str,
        items: &Option<Vec<KeyToPath>>,
        mode: u32,
        optional: bool,
        out: &mut Payload,
    ) -> Result<(), VolumeError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace());
        match get_opt(api, name).await? {
            Some(s) => select(&secret_data(&s), items, mode, "secret", name, optional, out),
            None if optional => Ok(()),
            None => Err(VolumeError::NotFound {
                kind: "secret",
                name: name.to_string(),
            }),
        }
    }

    /// A bound token, reused until 80% of its lifetime has passed, as a kubelet does.
    async fn token(
        &self,
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> Result<Vec<u8>, VolumeError> {
        let lifetime = expiration.unwrap_or(3607).max(600);
        let key = format!("{audience:?}/{lifetime}");
        let fresh = std::time::Duration::from_secs(lifetime as u64 * 8 / 10);
        if let Some((token, at)) = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < fresh
        {
            return Ok(token.clone());
        }
        let token = self.request_token(audience, lifetime).await?;
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (token.clone(), std::time::Instant::now()));
        Ok(token)
    }

    async fn request_token(
        &self,
        audience: Option<String>,
        lifetime: i64,
    ) -> Result<Vec<u8>, VolumeError> {
        let sa = self.env.service_account.clone();
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), self.namespace());
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: audience.map(|a| vec![a]),
                expiration_seconds: Some(lifetime),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(self.env.pod_name.clone()),
                    uid: Some(self.env.pod_uid.clone()),
                }),
            }),
            ..Default::default()
        };
        let answer: TokenRequest = api
            .create_subresource("token", &sa, &PostParams::default(), &request)
            .await?;
        answer
            .status
            .and_then(|s| s.token)
            .map(String::into_bytes)
            .filter(|t| !t.is_empty())
            .ok_or(VolumeError::NoToken(sa))
    }

    fn downward(
        &self,
        items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
        mode: u32,
        out: &mut Payload,
    ) -> Result<(), VolumeError> {
        for item in items {
            if let Some(field) = &item.field_ref {
                let value = envvars::field_value(&field.field_path, self.env)?;
                let mode = item.mode.map(|m| m as u32).unwrap_or(mode);
                out.insert(item.path.clone(), (value.into_bytes(), mode));
            }
        }
        Ok(())
    }

    /// The payload of a ConfigMap/Secret/downwardAPI/projected volume, `None` for other types.
    async fn payload(&self, volume: &Volume) -> Result<Option<Payload>, VolumeError> {
        let mut out = Payload::new();
        let mode_of = |m: Option<i32>| m.map(|m| m as u32).unwrap_or(0o644);
        if let Some(cm) = &volume.config_map {
            let optional = cm.optional == Some(true);
            self.config_map(
                &cm.name,
                &cm.items,
                mode_of(cm.default_mode),
                optional,
                &mut out,
            )
            .await?;
        } else if let Some(s) = &volume.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let optional = s.optional == Some(true);
            self.secret(&name, &s.items, mode_of(s.default_mode), optional, &mut out)
                .await?;
        } else if let Some(d) = &volume.downward_api {
            self.downward(
                d.items.as_deref().unwrap_or_default(),
                mode_of(d.default_mode),
                &mut out,
            )?;
        } else if let Some(p) = &volume.projected {
            let mode = mode_of(p.default_mode);
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    let optional = cm.optional == Some(true);
                    self.config_map(&cm.name, &cm.items, mode, optional, &mut out)
                        .await?;
                }
                if let Some(s) = &src.secret {
                    let optional = s.optional == Some(true);
                    self.secret(&s.name, &s.items, mode, optional, &mut out)
                        .await?;
                }
                if let Some(d) = &src.downward_api {
                    self.downward(d.items.as_deref().unwrap_or_default(), mode, &mut out)?;
                }
                if let Some(t) = &src.service_account_token {
                    let token = self.token(t.audience.clone(), t.expiration_seconds).await?;
                    out.insert(t.path.clone(), (token, mode));
                }
            }
        } else {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// The host directory of a PVC's volume.
    async fn claim_path(&self, claim: &str) -> Result<PathBuf, VolumeError> {
        let pvcs: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), self.namespace());
        let pvc = get_opt(pvcs, claim)
            .await?
            .ok_or_else(|| VolumeError::NotFound {
                kind: "persistentvolumeclaim",
                name: claim.to_string(),
            })?;
        let pv_name = pvc
            .spec
            .and_then(|s| s.volume_name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| VolumeError::Unbound(claim.to_string()))?;
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = get_opt(pvs, &pv_name)
            .await?
            .ok_or_else(|| VolumeError::NotFound {
                kind: "persistentvolume",
                name: pv_name.clone(),
            })?;
        let spec = pv.spec.unwrap_or_default();
        spec.host_path
            .map(|h| h.path)
            .or(spec.local.map(|l| l.path))
            .map(PathBuf::from)
            .ok_or(VolumeError::NoPath(pv_name))
    }

    /// Creates or refreshes one volume; returns the host path containers mount.
    pub async fn prepare(&self, volume: &Volume) -> Result<PathBuf, VolumeError> {
        let dir = self.pod_dir.join("volumes").join(&volume.name);
        if let Some(payload) = self.payload(volume).await? {
            writer::write(&dir, &payload, self.fs_group, &self.stamp)?;
            return Ok(dir);
        }
        if volume.empty_dir.is_some() {
            if !dir.exists() {
                mkdir(&dir, 0o777)?;
            }
            if let Some(g) = self.fs_group {
                writer::own_recursively(&dir, g)?;
            }
            return Ok(dir);
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            let path = self.claim_path(&claim.claim_name).await?;
            if !path.exists() {
                mkdir(&path, 0o777)?;
            }
            if let Some(g) = self.fs_group {
                writer::own_recursively(&path, g)?;
            }
            return Ok(path);
        }
        if let Some(host) = &volume.host_path {
            let path = PathBuf::from(&host.path);
            if matches!(host.type_.as_deref(), Some("DirectoryOrCreate")) && !path.exists() {
                mkdir(&path, 0o755)?;
            }
            return Ok(path);
        }
        Err(VolumeError::Unsupported(volume.name.clone()))
    }
}

/// Volumes whose content comes from the API and is refreshed while the pod runs.
pub fn is_refreshed(volume: &Volume) -> bool {
    volume.config_map.is_some()
        || volume.secret.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
}

/// The host path a container mounts for `subPath` within a volume; writable volumes get the
/// directory created, as a kubelet does.
pub fn sub_path(volume_path: &Path, sub: Option<&str>) -> Result<PathBuf, VolumeError> {
    let Some(sub) = sub.filter(|s| !s.is_empty()) else {
        return Ok(volume_path.to_path_buf());
    };
    let joined = crate::sandbox::plan::inside(volume_path, Path::new(sub));
    match std::fs::canonicalize(&joined) {
        Ok(real)
            if real.starts_with(volume_path) || real.starts_with(volume_path.join("..data")) =>
        {
            Ok(real)
        }
        Ok(real) => {
            // A ConfigMap key resolves through `..data` into the timestamped directory.
            let canonical_volume = std::fs::canonicalize(volume_path).unwrap_or_default();
            if real.starts_with(&canonical_volume) {
                Ok(real)
            } else {
                Err(VolumeError::Unsupported(format!(
                    "subPath {sub} leaves its volume"
                )))
            }
        }
        Err(_) => {
            mkdir(&joined, 0o777)?;
            Ok(joined)
        }
    }
}
