package realnode

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/pki"
)

// ContainerdConfig is containerd's configuration: every path under the real node's state, the
// CRI plugin with runc (cgroupfs: the machine has no systemd; the shim is found on containerd's
// PATH, the real node's bin/ first: a shim named by path would not get runc's options), the CNI bridge plugin, network
// namespaces under the state directory (not /run/netns), and every image registry resolved to
// the local one, so that no pull ever leaves the machine. NRI, the tracing and the /opt plugin
// are off: nothing here uses them, and they would write outside .localkube.
func ContainerdConfig(l layout.Layout) string {
	p := For(l)
	q := strconv.Quote
	return `# Written by localkube at each start (internal/realnode); edits are lost.
version = 4
root = ` + q(p.ContainerdRoot()) + `
state = ` + q(p.ContainerdState()) + `
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs", "io.containerd.image-verifier.v1.bindir"]

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = ` + q(p.ContainerdSocket()) + `
  [plugins.'io.containerd.server.v1.ttrpc']
    address = ` + q(p.ContainerdSocket()+".ttrpc") + `

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = ` + q(SandboxImage) + `
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = ` + q(p.RegistryHosts()) + `

  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # No container's OOM score below containerd's own: lowering one needs CAP_SYS_RESOURCE, which
    # this machine's root does not have (runc fails "failed to update /proc/self/oom_score_adj").
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = ` + q(p.Bin("runc")) + `
          Root = ` + q(p.RuncRoot()) + `
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [` + q(p.CNIBin()) + `]
      conf_dir = ` + q(p.CNIConfDir()) + `
      max_conf_num = 1
`
}

// registryHosts are containerd's hosts.toml files: each registry the images name (Docker Hub,
// which short names like valkey/valkey mean, and any other) is served by the local registry,
// over plain HTTP.
func registryHosts() map[string]string {
	local := "http://" + RegistryAddr
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", local, local)
	return map[string]string{"docker.io": hosts, "_default": hosts, RegistryAddr: hosts}
}

// CNIConfig is the pod network of the real node: the bridge plugin on localkube's bridge (which
// the supervisor owns, with its address 10.213.0.1; the plugin adds no address to it), host-local
// addresses from the node's /24, and the rest of the pod network, the Service range and the
// outside namespace reached through the node's address, as the process nodes' pods reach them
// through theirs.
func CNIConfig(l layout.Layout) ([]byte, error) {
	p := For(l)
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       CNINetwork,
		"plugins": []any{map[string]any{
			"type":             "bridge",
			"bridge":           layout.Bridge,
			"isGateway":        false,
			"isDefaultGateway": false,
			"ipMasq":           false,
			"hairpinMode":      true,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": p.CNIIPAMDir(),
				"ranges": []any{[]any{map[string]any{
					"subnet": PodSubnet, "rangeStart": PodRangeFrom, "rangeEnd": PodRangeTo, "gateway": NodeIP,
				}}},
				"routes": []any{
					map[string]any{"dst": podNetwork(), "gw": NodeIP},
					map[string]any{"dst": layout.ServiceCIDR, "gw": NodeIP},
					// The answers to outside clients whose address kube-proxy keeps
					// (externalTrafficPolicy: Local), as the process kubelet's --pod-route.
					map[string]any{"dst": layout.OutsideCIDR, "gw": NodeIP},
				},
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// podNetwork is the whole pod network (10.213.0.0/16), the bridge's own prefix.
func podNetwork() string {
	_, n, err := net.ParseCIDR(layout.BridgeCIDR)
	if err != nil {
		panic(fmt.Sprintf("layout.BridgeCIDR %q: %v", layout.BridgeCIDR, err))
	}
	return n.String()
}

// KubeletConfig is the KubeletConfiguration. cgroup v1 is allowed (failCgroupV1: false; this
// machine has no cgroup v2 controllers), cgroupfs drives it (no systemd), its pods live under
// CgroupRoot, everything it writes is under the real node's state, its API is served on the
// node's address to clients with a certificate of localkube's CA (the API server's, for logs and
// exec) and authorized by the API server, pods resolve names with localkube's CoreDNS (the
// kube-dns Service, as the process kubelet's --cluster-dns; no host resolv.conf: nothing beyond
// the cluster resolves), and eviction and image garbage collection only act when a disk is
// nearly full (a shared machine's disks are what they are).
func KubeletConfig(l layout.Layout) string {
	p := For(l)
	q := strconv.Quote
	return `# Written by localkube at each start (internal/realnode); edits are lost.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: ` + q(CgroupRoot) + `
containerRuntimeEndpoint: ` + q("unix://"+p.ContainerdSocket()) + `
podLogsDir: ` + q(p.PodLogs()) + `
address: ` + q(NodeIP) + `
port: ` + strconv.Itoa(KubeletPort) + `
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ` + strconv.Itoa(KubeletHealthzPort) + `
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ` + q(l.PKIFile(pki.CACert)) + `}
authorization:
  mode: Webhook
registerNode: true
registerWithTaints:
  - {key: ` + q(Label) + `, value: "true", effect: NoSchedule}
clusterDomain: ` + q(layout.ClusterDomain) + `
clusterDNS: [` + q(layout.DNSServiceIP) + `]
resolvConf: ""
staticPodPath: ""
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
containerLogMaxSize: 10Mi
`
}

// RegistryConfig is the registry's configuration: files under the real node's state, HTTP on
// the loopback address.
func RegistryConfig(l layout.Layout) string {
	p := For(l)
	q := strconv.Quote
	return `# Written by localkube at each start (internal/realnode); edits are lost.
version: 0.1
log:
  # A line per request at info: only what goes wrong.
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: ` + q(p.RegistryStorage()) + `}
  delete: {enabled: true}
  maintenance:
    uploadpurging: {enabled: false}
http:
  addr: ` + q(RegistryAddr) + `
`
}

// writeFile writes data to path (directories made), replacing it in one rename.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeConfigs writes every configuration file of the real node.
func writeConfigs(l layout.Layout) error {
	p := For(l)
	cni, err := CNIConfig(l)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		p.ContainerdConfig(): []byte(ContainerdConfig(l)),
		p.KubeletConfig():    []byte(KubeletConfig(l)),
		p.RegistryConfig():   []byte(RegistryConfig(l)),
		filepath.Join(p.CNIConfDir(), "10-"+CNINetwork+".conflist"): cni,
	}
	for host, hosts := range registryHosts() {
		files[filepath.Join(p.RegistryHosts(), host, "hosts.toml")] = []byte(hosts)
	}
	for name, value := range KernelSettings {
		files[filepath.Join(p.KubeletSysctls(), name)] = []byte(strconv.Itoa(value) + "\n")
	}
	for path, data := range files {
		if err := writeFile(path, data); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}
