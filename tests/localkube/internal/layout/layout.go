// Package layout names every file and directory of the local cluster under .localkube/.
package layout

import (
	"fmt"
	"os"
	"path/filepath"
)

// Fixed network and port choices shared with the process kubelet (see tests/localkube/README.md).
const (
	Bridge        = "lkbr0"
	BridgeCIDR    = "10.213.0.1/16"
	APIServerIP   = "10.213.0.1"
	APIServerPort = 6443
	ServiceCIDR   = "10.0.0.0/24"
	ServiceIP     = "10.0.0.1"
	EtcdClientURL = "http://127.0.0.1:23790"
	EtcdPeerURL   = "http://127.0.0.1:23800"
	KCMSecurePort = 20257
	SchedSecure   = 20259
	NetnsPrefix   = "lk-"
	KubeletNodes  = 3
	// FaultNodes follow the others (localkube-d, zone-d), tainted localkube.io/fault-tests:
	// localkube's fault tests stop and partition them, other tests never run there.
	FaultNodes     = 1
	ClusterName    = "localkube"
	AdminUser      = "admin"
	ServiceAccount = "https://kubernetes.default.svc.cluster.local"

	// PodCIDR is the whole pod network on the bridge (node k's pods are 10.213.k.2-254): kube-proxy's
	// "cluster CIDR", what it takes for traffic from inside the cluster.
	PodCIDR = "10.213.0.0/16"
	// ClusterDomain, DNSServiceIP: the kube-dns Service, whose one endpoint is CoreDNS on the host
	// (DNSAddr:DNSPort), as the kubernetes Service's is the API server.
	ClusterDomain = "cluster.local"
	DNSServiceIP  = "10.0.0.10"
	DNSAddr       = APIServerIP
	DNSPort       = 20053
	// CoreDNS's health and ready endpoints (plugins health and ready), on loopback.
	DNSHealthPort = 20180
	DNSReadyPort  = 20181
	DNSMetrics    = 20153
	// The S3-compatible object store of backups (versitygw, built by tests/objectstore/build.sh),
	// on the host like CoreDNS, behind the Service ObjectStoreService of ObjectStoreNamespace
	// (port 80) as kube-dns is behind its own. One bucket, ObjectStoreBucket; the credentials are
	// fixed (a local test cluster's) and also in the Secret ObjectStoreSecret of
	// ObjectStoreSecretNamespace, under the keys a ValkeyBackup reads by default.
	ObjectStoreAddr            = APIServerIP
	ObjectStorePort            = 20070
	ObjectStoreNamespace       = "kube-system"
	ObjectStoreService         = "objectstore"
	ObjectStoreBucket          = "backups"
	ObjectStoreAccessKey       = "localkube"
	ObjectStoreSecretKey       = "localkube-objectstore-secret"
	ObjectStoreSecret          = "localkube-objectstore"
	ObjectStoreSecretNamespace = "default"
	// kube-proxy's health and metrics endpoints, on loopback.
	ProxyHealthPort  = 20256
	ProxyMetricsPort = 20249
	// ProxyNode is the node kube-proxy speaks for: one kube-proxy serves every process node (they
	// share the host's network stack), so "local" endpoints (externalTrafficPolicy: Local,
	// internalTrafficPolicy: Local) are those on this node.
	ProxyNode = "localkube-a"

	// LBPool is where the LoadBalancer allocator takes addresses for Services of no class or of
	// LBClass: the top /24 of the bridge's network, as MetalLB takes a slice of a kind network.
	// Nothing holds these addresses: kube-proxy answers for them on the host, the pods reach them
	// through their gateway, the outside namespace through its route to the host.
	LBPoolFirst = "10.213.255.1"
	LBPoolLast  = "10.213.255.254"
	LBPoolCIDR  = "10.213.255.0/24"
	LBClass     = "localkube.io/loadbalancer"
	// LBClassNoAddresses is served from an empty pool: its Services stay pending, with an Event
	// saying why (for tests that need a LoadBalancer without an address).
	LBClassNoAddresses = "localkube.io/no-addresses"

	// The outside namespace: a client outside the cluster. Its veth's host end is OutsideLink
	// (OutsideGateway), its own address OutsideIP; it reaches the node addresses and the LoadBalancer
	// pool through the host, and nothing else (the host's nftables table NFTable).
	OutsideNetns   = NetnsPrefix + "outside"
	OutsideLink    = "lkout0"
	OutsideCIDR    = "10.214.0.0/24"
	OutsideGateway = "10.214.0.1"
	OutsideIP      = "10.214.0.2"
	// NFTable (family inet) is localkube's own nftables table: it keeps the outside namespace to
	// what it may reach, and masquerades what kube-proxy leaves out (see internal/hostnet).
	NFTable = "localkube"
)

// NodeIP is the address of node k (1 for localkube-a), as the process kubelet assigns it.
func NodeIP(k int) string { return fmt.Sprintf("10.213.%d.1", k) }

// NodeIPs are the addresses of every process node (the fault-test nodes included).
func NodeIPs() []string {
	var out []string
	for k := 1; k <= KubeletNodes+FaultNodes; k++ {
		out = append(out, NodeIP(k))
	}
	return out
}

// APIServerURL is where every client reaches the API server.
var APIServerURL = fmt.Sprintf("https://%s:%d", APIServerIP, APIServerPort)

// Layout holds the absolute paths of one .localkube directory.
type Layout struct {
	Root string // the repository root (parent of Dir)
	Dir  string // .localkube
}

// New returns the layout for the given .localkube directory.
func New(dir string) (Layout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, err
	}
	// Dir is the resolved path: mounts (the real node's) are listed in
	// /proc/mounts under resolved paths, and a .localkube that is a symlink to
	// another checkout's must still find and undo them. Root stays the checkout
	// the directory was named from.
	dirPath := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		dirPath = real
	}
	return Layout{Root: filepath.Dir(abs), Dir: dirPath}, nil
}

// Default finds .localkube from $LOCALKUBE_DIR, else from the binary's own place
// (.localkube/bin/localkube), else from the working directory.
func Default() (Layout, error) {
	if d := os.Getenv("LOCALKUBE_DIR"); d != "" {
		return New(d)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			bin := filepath.Dir(real)
			if filepath.Base(bin) == "bin" && filepath.Base(filepath.Dir(bin)) == ".localkube" {
				return New(filepath.Dir(bin))
			}
		}
	}
	return New(".localkube")
}

func (l Layout) path(p ...string) string { return filepath.Join(append([]string{l.Dir}, p...)...) }

func (l Layout) Kubeconfig() string          { return l.path("kubeconfig") }
func (l Layout) Bin() string                 { return l.path("bin") }
func (l Layout) PKI() string                 { return l.path("pki") }
func (l Layout) PKIFile(name string) string  { return l.path("pki", name) }
func (l Layout) Etcd() string                { return l.path("etcd") }
func (l Layout) Logs() string                { return l.path("logs") }
func (l Layout) Log(component string) string { return l.path("logs", component+".log") }
func (l Layout) PIDFile() string             { return l.path("localkube.pid") }
func (l Layout) LockFile() string            { return l.path("localkube.lock") }
func (l Layout) KubeletDir() string          { return l.path("kubelet") }
func (l Layout) Images() string              { return l.path("images") }

// CoreDNS is the CoreDNS binary (built beside localkube, see cmd/coredns).
func (l Layout) CoreDNS() string { return l.path("bin", "coredns") }

// Corefile is CoreDNS's configuration, written by the supervisor at each start.
func (l Layout) Corefile() string { return l.path("coredns", "Corefile") }

// ObjectStore is the versitygw binary (tests/objectstore/build.sh builds it there).
func (l Layout) ObjectStore() string { return l.path("objectstore", "bin", "versitygw") }

// ObjectStoreData is the folder the object store serves: each top folder is a bucket.
func (l Layout) ObjectStoreData() string { return l.path("objectstore", "data") }

// Faults holds one record per fault in force (see internal/faults).
func (l Layout) Faults() string { return l.path("faults") }

// KubeletFaults holds the stopped nodes' files the process kubelet reads.
func (l Layout) KubeletFaults() string { return l.path("kubelet", "faults") }

// PodDir is the process kubelet's directory of one pod (its pid records are under pids/).
func (l Layout) PodDir(uid string) string { return l.path("kubelet", "pods", uid) }

// DefaultKubelet is the process kubelet as cargo builds it.
func (l Layout) DefaultKubelet() string {
	return filepath.Join(l.Root, "target", "debug", "localkube-kubelet")
}

// StateDirs are wiped by a reset; bin/ and images/ are tools and survive it.
func (l Layout) StateDirs() []string {
	return []string{l.Etcd(), l.PKI(), l.KubeletDir(), l.Logs(), l.Kubeconfig(), l.PIDFile(), l.LockFile(), l.Faults(),
		filepath.Dir(l.Corefile()), filepath.Join(l.Dir, "realnode", "state"), l.ObjectStoreData()}
}
