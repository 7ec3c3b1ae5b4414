// Package realnode is localkube's real node (tests/localkube/realnode/README.md): the upstream
// kubelet with containerd, runc and the CNI bridge plugin, pulling images from a local registry
// (the distribution registry), beside the process kubelet's nodes and on the same pod network.
//
// This package knows the node's names, addresses and files, writes its configuration, checks
// that the machine can run it, pushes the images, and stops and cleans up what its containers
// leave (processes in its cgroups, mounts, shims). The supervisor starts and stops its three
// processes (registry, containerd, kubelet) like the other components.
package realnode

import (
	"os"
	"path/filepath"
	"strings"

	"valkey-operator.local/localkube/internal/layout"
)

// The node, as the API server sees it.
const (
	NodeName = "localkube-real"
	Zone     = "zone-real"
	// Label is both a label of the node and the key of its NoSchedule taint: only pods that
	// tolerate it run there, and they select it by the label.
	Label = "localkube.io/real-node"
)

// Addresses and ports. The process kubelet's nodes use 10.213.1-4.0/24; the real node's pods
// get 10.213.64.2-254 from CNI's host-local IPAM, and 10.213.64.1 (on the bridge) is the node's
// address and its pods' gateway.
const (
	NodeIP       = "10.213.64.1"
	PodSubnet    = "10.213.64.0/24"
	PodRangeFrom = "10.213.64.2"
	PodRangeTo   = "10.213.64.254"
	// RegistryAddr is where the registry listens: only containerd and the host push and pull.
	RegistryAddr = "127.0.0.1:25000"
	KubeletPort  = 10250
	// KubeletHealthzPort is the kubelet's own health endpoint on 127.0.0.1.
	KubeletHealthzPort = 20248
	// SandboxImage is the pod sandbox's image (cmd/pause), pushed with the others.
	SandboxImage = "localkube/pause:1"
	// CNINetwork is the name of the pod network in CNI's configuration.
	CNINetwork = "localkube"
)

// CgroupRoot is the cgroup, in every hierarchy, that holds the kubelet's pods: the kubelet's
// cgroupRoot, so everything the node runs is in one subtree that stop and sweep can find and
// remove. Fixed, like the bridge: one localkube runs on a machine.
const CgroupRoot = "/localkube"

// Log names of the node's processes (.localkube/logs/<name>.log).
const (
	RegistryLog   = "registry"
	ContainerdLog = "containerd"
	KubeletLog    = "real-kubelet"
)

// Paths of one .localkube's real node. Programs live in bin/ and cni/ (kept by a reset), all
// state in state/ (wiped by a reset).
type Paths struct {
	l layout.Layout
}

// For returns the real node's paths under l.
func For(l layout.Layout) Paths { return Paths{l: l} }

func (p Paths) dir(parts ...string) string {
	return filepath.Join(append([]string{p.l.Dir, "realnode"}, parts...)...)
}

func (p Paths) Bin(name string) string { return p.dir("bin", name) }
func (p Paths) CNIBin() string         { return p.dir("cni") }
func (p Paths) State() string          { return p.dir("state") }
func (p Paths) state(parts ...string) string {
	return filepath.Join(append([]string{p.State()}, parts...)...)
}

// Unavailable is the file that says why the machine cannot run the real node, when it cannot.
func (p Paths) Unavailable() string { return p.state("unavailable") }

func (p Paths) ContainerdConfig() string { return p.state("containerd", "config.toml") }
func (p Paths) ContainerdRoot() string   { return p.state("containerd", "root") }
func (p Paths) ContainerdState() string  { return p.state("containerd", "run") }
func (p Paths) ContainerdSocket() string { return p.state("containerd", "containerd.sock") }
func (p Paths) RegistryHosts() string    { return p.state("containerd", "certs.d") }
func (p Paths) RuncRoot() string         { return p.state("runc") }
func (p Paths) CNIConfDir() string       { return p.state("cni", "net.d") }
func (p Paths) CNIIPAMDir() string       { return p.state("cni", "ipam") }
func (p Paths) KubeletConfig() string    { return p.state("kubelet", "config.yaml") }
func (p Paths) KubeletRoot() string      { return p.state("kubelet", "root") }
func (p Paths) KubeletCerts() string     { return p.state("kubelet", "pki") }
func (p Paths) PodLogs() string          { return p.state("kubelet", "pod-logs") }
func (p Paths) KubeletSysctls() string   { return p.state("kubelet", "sysctl") }
func (p Paths) RegistryConfig() string   { return p.state("registry", "config.yml") }
func (p Paths) RegistryStorage() string  { return p.state("registry", "storage") }

// ImageDirs hold the OCI archives pushed into the registry at start: the real node's images
// (realnode/oci.sh localkube) and the controllers' (make test-images or make images), when built.
func (p Paths) ImageDirs() []string {
	return []string{filepath.Join(p.l.Dir, "oci"), filepath.Join(p.l.Root, "target", "images")}
}

// Programs are the files the real node runs, for the check before it starts.
func (p Paths) Programs() []string {
	return []string{
		p.Bin("kubelet"), p.Bin("containerd"), p.Bin("containerd-shim-runc-v2"), p.Bin("runc"),
		p.Bin("registry"), p.Bin("crane"),
		filepath.Join(p.CNIBin(), "bridge"), filepath.Join(p.CNIBin(), "host-local"),
		filepath.Join(p.CNIBin(), "loopback"),
	}
}

// Cmd is one process of the real node.
type Cmd struct {
	Name string // its log's name
	Path string
	Args []string
	Env  []string // added to the supervisor's
}

// RegistryCmd is the distribution registry serving .localkube's images over plain HTTP on the
// loopback address.
func RegistryCmd(l layout.Layout) Cmd {
	p := For(l)
	return Cmd{
		Name: RegistryLog,
		Path: p.Bin("registry"),
		Args: []string{"serve", p.RegistryConfig()},
		// No tracing exporter: nothing would receive it.
		Env: []string{"OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true"},
	}
}

// ContainerdCmd is containerd with the configuration Prepare writes.
func ContainerdCmd(l layout.Layout) Cmd {
	p := For(l)
	return Cmd{
		Name: ContainerdLog,
		Path: p.Bin("containerd"),
		Args: []string{"--config", p.ContainerdConfig()},
		// The shim and runc are found by absolute path; PATH keeps any other lookup (ctr's,
		// the shim's) on the real node's own programs first.
		Env: []string{"PATH=" + filepath.Dir(p.Bin("containerd")) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"OTEL_SDK_DISABLED=true"},
	}
}

// KubeletCmd is the kubelet, run in a mount namespace of its own (unshare, from util-linux) in
// which the six kernel settings a kubelet insists on (vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1, ...) read as it wants them: a kubelet changes them on the machine
// otherwise, and this machine is shared. Its root directory is a shared mount, so the volumes it
// mounts there reach containerd and runc in the machine's namespace.
func KubeletCmd(l layout.Layout) Cmd {
	p := For(l)
	script := `set -e
mount --make-rprivate /proc
for f in "$LK_SYSCTLS"/*; do mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"; done
exec "$0" "$@"`
	return Cmd{
		Name: KubeletLog,
		Path: "unshare",
		Args: append([]string{"--mount", "--propagation", "unchanged", "--", "sh", "-c", script, p.Bin("kubelet")},
			kubeletArgs(l)...),
		Env: []string{"LK_SYSCTLS=" + p.KubeletSysctls()},
	}
}

func kubeletArgs(l layout.Layout) []string {
	p := For(l)
	return []string{
		"--config=" + p.KubeletConfig(),
		// The admin identity, as the process kubelet's; the node authorizer is not exercised.
		"--kubeconfig=" + l.Kubeconfig(),
		"--root-dir=" + p.KubeletRoot(),
		"--cert-dir=" + p.KubeletCerts(),
		"--hostname-override=" + NodeName,
		"--node-ip=" + NodeIP,
		"--node-labels=" + nodeLabels(),
		"--v=1",
	}
}

// nodeLabels are the labels the process kubelet's nodes carry that a kubelet does not set
// itself (it sets hostname, os and arch), plus the real node's own.
func nodeLabels() string {
	return "topology.kubernetes.io/zone=" + Zone + ",topology.kubernetes.io/region=local," +
		"node.kubernetes.io/instance-type=localkube," + Label + "=true"
}

// KernelSettings are what a kubelet checks and, unless protectKernelDefaults, sets (see
// KubeletCmd); the values are upstream's.
var KernelSettings = map[string]int{
	"vm.overcommit_memory":      1,
	"vm.panic_on_oom":           0,
	"kernel.panic":              10,
	"kernel.panic_on_oops":      1,
	"kernel.keys.root_maxkeys":  1000000,
	"kernel.keys.root_maxbytes": 25000000,
}

// Unavailability reads why the machine could not run the real node; "" when it could.
func Unavailability(l layout.Layout) string {
	b, err := os.ReadFile(For(l).Unavailable())
	if err != nil {
		return ""
	}
	return string(b)
}

// nodeHost is NodeIP with the bridge's prefix, as the process kubelet adds its nodes' addresses.
func nodeHost() string {
	return NodeIP + podNetwork()[strings.IndexByte(podNetwork(), '/'):]
}
