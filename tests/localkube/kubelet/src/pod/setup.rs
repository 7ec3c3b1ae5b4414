//! Preparing what a container needs before it starts: env, identity, command, mounts, /etc files.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::Api;

use crate::config::Settings;
use crate::envvars::{self, EnvContext};
use crate::images::ImageDir;
use crate::sandbox::plan::{Identity, VolumeMount};
use crate::volumes;

/// Why a container cannot be created, as the Waiting reason and message a kubelet shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub reason: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn config(message: impl Into<String>) -> Self {
        Self {
            reason: "CreateContainerConfigError",
            message: message.into(),
        }
    }
}

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn pod_hostname(pod: &Pod) -> String {
    let spec_hostname = pod.spec.as_ref().and_then(|s| s.hostname.clone());
    let name = spec_hostname
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    name.chars().take(63).collect()
}

/// The pod-level part of the env context (no ConfigMaps or Secrets yet).
pub fn base_context(
    pod: &Pod,
    settings: &Settings,
    pod_ip: Ipv4Addr,
    host_ip: Ipv4Addr,
) -> EnvContext {
    let spec = pod.spec.clone().unwrap_or_default();
    EnvContext {
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        node_name: spec.node_name.unwrap_or_default(),
        pod_ip: pod_ip.to_string(),
        host_ip: host_ip.to_string(),
        service_account: spec
            .service_account_name
            .unwrap_or_else(|| "default".into()),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        config_maps: BTreeMap::new(),
        secrets: BTreeMap::new(),
        defaults: vec![
            ("PATH".into(), DEFAULT_PATH.into()),
            ("HOSTNAME".into(), pod_hostname(pod)),
            ("KUBERNETES_SERVICE_HOST".into(), settings.api_host.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), settings.api_port.clone()),
            (
                "KUBERNETES_SERVICE_PORT_HTTPS".into(),
                settings.api_port.clone(),
            ),
        ],
    }
}

/// Fetches the ConfigMaps and Secrets the container's env refers to.
pub async fn env_context(
    client: &kube::Client,
    container: &Container,
    base: &EnvContext,
) -> Result<EnvContext, kube::Error> {
    let mut ctx = base.clone();
    let (config_maps, secrets) = envvars::referenced_objects(container);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &base.namespace);
    for name in config_maps {
        let data = cms.get_opt(&name).await?.map(|cm| {
            let mut data = cm.data.unwrap_or_default();
            for (k, v) in cm.binary_data.unwrap_or_default() {
                data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
            }
            data
        });
        ctx.config_maps.insert(name, data);
    }
    let sec: Api<Secret> = Api::namespaced(client.clone(), &base.namespace);
    for name in secrets {
        let data = sec.get_opt(&name).await?.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect()
        });
        ctx.secrets.insert(name, data);
    }
    Ok(ctx)
}

/// The user and groups the container runs as; `None` keeps root with the kubelet's groups.
pub fn identity(pod: &Pod, container: &Container) -> Result<Option<Identity>, ConfigError> {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let csc = container.security_context.clone().unwrap_or_default();
    let uid = csc.run_as_user.or(psc.run_as_user);
    let gid = csc.run_as_group.or(psc.run_as_group);
    let non_root = csc.run_as_non_root.or(psc.run_as_non_root) == Some(true);
    if non_root && uid.unwrap_or(0) == 0 {
        return Err(ConfigError::config(if uid.is_some() {
            "container's runAsUser breaks non-root policy"
        } else {
            "container has runAsNonRoot and image will run as root"
        }));
    }
    let supplemental = psc.supplemental_groups.clone().unwrap_or_default();
    if uid.is_none() && gid.is_none() && psc.fs_group.is_none() && supplemental.is_empty() {
        return Ok(None);
    }
    let to_u32 =
        |v: i64| u32::try_from(v).map_err(|_| ConfigError::config(format!("invalid id {v}")));
    let uid = to_u32(uid.unwrap_or(0))?;
    let gid = to_u32(gid.unwrap_or(0))?;
    let mut groups = vec![gid];
    for g in psc.fs_group.into_iter().chain(supplemental) {
        let g = to_u32(g)?;
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    Ok(Some(Identity { uid, gid, groups }))
}

pub fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// The argv: the container's command or the image's entrypoint, then args or the image's cmd.
pub fn argv(
    container: &Container,
    image: &ImageDir,
    env: &[(String, String)],
) -> Result<Vec<String>, ConfigError> {
    let (entrypoint, cmd) = image.defaults();
    let command = container.command.clone().filter(|c| !c.is_empty());
    let args = container.args.clone();
    let argv: Vec<String> = match (command, args) {
        (Some(command), args) => [command, args.unwrap_or_default()].concat(),
        (None, Some(args)) => [entrypoint, args].concat(),
        (None, None) => [entrypoint, cmd].concat(),
    };
    if argv.is_empty() {
        return Err(ConfigError {
            reason: "RunContainerError",
            message: format!(
                "no command specified and image directory {} has no entrypoint",
                image.root.display()
            ),
        });
    }
    Ok(envvars::expand_all(&argv, env))
}

/// The container's mounts from its volumeMounts and the pod's prepared volumes.
pub fn mounts(
    container: &Container,
    volumes: &BTreeMap<String, PathBuf>,
) -> Result<Vec<VolumeMount>, ConfigError> {
    let mut out = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let path = volumes
            .get(&m.name)
            .ok_or_else(|| ConfigError::config(format!("volume {} not found", m.name)))?;
        let source = volumes::sub_path(path, m.sub_path.as_deref())
            .map_err(|e| ConfigError::config(e.to_string()))?;
        out.push(VolumeMount {
            source,
            target: PathBuf::from(&m.mount_path),
            readonly: m.read_only == Some(true),
        });
    }
    Ok(out)
}

/// /etc/hosts, /etc/hostname and /etc/resolv.conf for the pod.
pub fn write_etc(
    dir: &Path,
    pod: &Pod,
    pod_ip: Ipv4Addr,
    settings: &Settings,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let hostname = pod_hostname(pod);
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let domain = &settings.cluster_domain;
    let mut hosts = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    match spec.subdomain.filter(|s| !s.is_empty()) {
        Some(sub) => hosts.push_str(&format!(
            "{pod_ip}\t{hostname}.{sub}.{namespace}.svc.{domain}\t{hostname}\n"
        )),
        None => hosts.push_str(&format!("{pod_ip}\t{hostname}\n")),
    }
    for alias in spec.host_aliases.iter().flatten() {
        hosts.push_str(&format!(
            "{}\t{}\n",
            alias.ip,
            alias.hostnames.clone().unwrap_or_default().join("\t")
        ));
    }
    std::fs::write(dir.join("hosts"), hosts)?;
    std::fs::write(dir.join("hostname"), format!("{hostname}\n"))?;
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    std::fs::write(
        dir.join("resolv.conf"),
        resolv_conf(pod, settings.cluster_dns, domain, &host_resolv),
    )
}

/// A resolver configuration: nameservers, search domains, options.
#[derive(Debug, Default, PartialEq, Eq)]
struct Resolv {
    nameservers: Vec<String>,
    searches: Vec<String>,
    options: Vec<String>,
}

impl Resolv {
    fn parse(text: &str) -> Self {
        let mut r = Self::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => r.nameservers.extend(words.next().map(String::from)),
                Some("search" | "domain") => r.searches = words.map(String::from).collect(),
                Some("options") => r.options.extend(words.map(String::from)),
                _ => {}
            }
        }
        r
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for ns in &self.nameservers {
            out.push_str(&format!("nameserver {ns}\n"));
        }
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// Limits a kubelet applies (glibc reads three nameservers; the search list is bounded).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// The pod's /etc/resolv.conf as a kubelet writes it, by `dnsPolicy`: `ClusterFirst` (the
/// default; a `hostNetwork` pod falls back to `Default`) and `ClusterFirstWithHostNet` name the
/// cluster DNS Service, search `<ns>.svc.<domain> svc.<domain> <domain>` and the host's search
/// domains, with `ndots:5`; `Default` is the host's file; `None` only `dnsConfig`, which the
/// others merge in after (nameservers and searches appended without repeats, options replaced by
/// name). Without a cluster DNS Service the cluster policies keep the search list and name no
/// nameserver, so lookups fail at once instead of waiting on a server pods cannot reach.
pub fn resolv_conf(
    pod: &Pod,
    cluster_dns: Option<Ipv4Addr>,
    domain: &str,
    host_resolv: &str,
) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let host = Resolv::parse(host_resolv);
    let cluster = |host_searches: &[String]| {
        let mut searches = vec![
            format!("{namespace}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.to_string(),
        ];
        searches.extend(host_searches.iter().cloned());
        Resolv {
            nameservers: cluster_dns.iter().map(ToString::to_string).collect(),
            searches,
            options: vec!["ndots:5".into()],
        }
    };
    let mut r = match spec.dns_policy.as_deref().unwrap_or("ClusterFirst") {
        "None" => Resolv::default(),
        "Default" => host,
        "ClusterFirst" if host_network => host,
        _ => cluster(&host.searches),
    };
    if let Some(extra) = spec.dns_config {
        for ns in extra.nameservers.into_iter().flatten() {
            if !r.nameservers.contains(&ns) {
                r.nameservers.push(ns);
            }
        }
        for s in extra.searches.into_iter().flatten() {
            if !r.searches.contains(&s) {
                r.searches.push(s);
            }
        }
        for o in extra.options.into_iter().flatten() {
            let Some(name) = o.name.filter(|n| !n.is_empty()) else {
                continue;
            };
            let rendered = match o.value {
                Some(v) => format!("{name}:{v}"),
                None => name.clone(),
            };
            r.options
                .retain(|opt| opt.split(':').next().unwrap_or_default() != name);
            r.options.push(rendered);
        }
    }
    r.nameservers.truncate(MAX_NAMESERVERS);
    r.searches.truncate(MAX_SEARCHES);
    r.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PodDNSConfig, PodDNSConfigOption, PodSecurityContext, PodSpec, SecurityContext,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(psc: PodSecurityContext) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(psc),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn identity_combines_pod_and_container_settings() {
        let p = pod(PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            supplemental_groups: Some(vec![3000]),
            ..Default::default()
        });
        let c = Container {
            security_context: Some(SecurityContext {
                run_as_group: Some(1001),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            identity(&p, &c),
            Ok(Some(Identity {
                uid: 1000,
                gid: 1001,
                groups: vec![1001, 2000, 3000]
            }))
        );
        assert_eq!(
            identity(&pod(PodSecurityContext::default()), &Container::default()),
            Ok(None)
        );
        let non_root = pod(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
        assert!(identity(&non_root, &Container::default()).is_err());
    }

    fn dns_pod(policy: Option<&str>, host_network: bool, config: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(String::from),
                host_network: Some(host_network),
                dns_config: config,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn resolv_conf_follows_the_dns_policy() {
        let dns = Some(Ipv4Addr::new(10, 0, 0, 10));
        let host = "nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n";
        let cluster = "nameserver 10.0.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n";
        let host_file = "nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n";
        let r = |policy, host_network| {
            resolv_conf(
                &dns_pod(policy, host_network, None),
                dns,
                "cluster.local",
                host,
            )
        };
        assert_eq!(r(None, false), cluster);
        assert_eq!(r(Some("ClusterFirst"), false), cluster);
        assert_eq!(r(Some("ClusterFirst"), true), host_file);
        assert_eq!(r(Some("ClusterFirstWithHostNet"), true), cluster);
        assert_eq!(r(Some("Default"), false), host_file);
        assert_eq!(r(Some("None"), false), "");
        // No cluster DNS: the search list stays, no nameserver (lookups fail at once).
        assert_eq!(
            resolv_conf(&dns_pod(None, false, None), None, "cluster.local", ""),
            "search shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
    }

    #[test]
    fn dns_config_is_merged_in() {
        let config = PodDNSConfig {
            nameservers: Some(vec!["10.0.0.10".into(), "1.2.3.4".into()]),
            searches: Some(vec!["svc.cluster.local".into(), "extra.local".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        };
        let got = resolv_conf(
            &dns_pod(None, false, Some(config.clone())),
            Some(Ipv4Addr::new(10, 0, 0, 10)),
            "cluster.local",
            "",
        );
        assert_eq!(
            got,
            "nameserver 10.0.0.10\nnameserver 1.2.3.4\nsearch shop.svc.cluster.local svc.cluster.local cluster.local extra.local\noptions ndots:2 edns0\n"
        );
        let none = resolv_conf(&dns_pod(Some("None"), false, Some(config)), None, "x", "");
        assert_eq!(
            none,
            "nameserver 10.0.0.10\nnameserver 1.2.3.4\nsearch svc.cluster.local extra.local\noptions ndots:2 edns0\n"
        );
    }

    #[test]
    fn argv_follows_entrypoint_and_cmd_rules() {
        let image = ImageDir {
            root: PathBuf::from("/nonexistent/valkey-9.1"),
            name: "valkey".into(),
        };
        let env = vec![("PORT".to_string(), "7000".to_string())];
        let c = Container {
            command: Some(vec!["valkey-server".into()]),
            args: Some(vec!["--port".into(), "$(PORT)".into()]),
            ..Default::default()
        };
        assert_eq!(
            argv(&c, &image, &env),
            Ok(vec![
                "valkey-server".to_string(),
                "--port".into(),
                "7000".into()
            ])
        );
        let no_command = Container::default();
        assert_eq!(
            argv(&no_command, &image, &env).map_err(|e| e.reason),
            Err("RunContainerError")
        );
    }
}
