package supervisor

import (
	"fmt"
	"strconv"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/pki"
)

func etcdArgs(l layout.Layout) []string {
	return []string{"etcd", "--data-dir=" + l.Etcd(), "--client-url=" + layout.EtcdClientURL, "--peer-url=" + layout.EtcdPeerURL}
}

func apiserverArgs(l layout.Layout) []string {
	p := l.PKIFile
	return []string{
		"apiserver",
		"--etcd-servers=" + layout.EtcdClientURL,
		"--bind-address=" + layout.APIServerIP,
		"--advertise-address=" + layout.APIServerIP,
		"--secure-port=" + strconv.Itoa(layout.APIServerPort),
		"--tls-cert-file=" + p(pki.ServerCert),
		"--tls-private-key-file=" + p(pki.ServerKey),
		"--client-ca-file=" + p(pki.CACert),
		"--service-account-issuer=" + layout.ServiceAccount,
		"--service-account-key-file=" + p(pki.SAPub),
		"--service-account-signing-key-file=" + p(pki.SAKey),
		"--service-cluster-ip-range=" + layout.ServiceCIDR,
		// Node authorization costs nothing and keeps the usual mode string; the process kubelet
		// uses the admin identity, so RBAC is what grants everything else.
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// The default admission chain stays on, ServiceAccount included, so pods get their
		// projected token volume as on a real cluster.
		"--profiling=false",
		// The front proxy settings of kubeadm clusters: aggregated API servers work, and the
		// controller manager and scheduler find the requestheader CA they look for.
		"--requestheader-client-ca-file=" + p(pki.FrontProxyCACert),
		"--requestheader-allowed-names=" + pki.FrontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p(pki.FrontProxyCert),
		"--proxy-client-key-file=" + p(pki.FrontProxyKey),
		// Its client certificate to kubelets that serve an API (the real node's): logs, exec; at
		// the node's address (no DNS resolves node names here).
		"--kubelet-client-certificate=" + p(pki.AdminCert),
		"--kubelet-client-key=" + p(pki.AdminKey),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}
}

func controllerManagerArgs(l layout.Layout) []string {
	kc := l.Kubeconfig()
	p := l.PKIFile
	return []string{
		"controller-manager",
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--controllers=*",
		// Each controller acts under its own service account, as on kubeadm clusters.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p(pki.SAKey),
		"--root-ca-file=" + p(pki.CACert),
		"--cluster-signing-cert-file=" + p(pki.CACert),
		"--cluster-signing-key-file=" + p(pki.CAKey),
		"--cluster-name=" + layout.ClusterName,
		"--service-cluster-ip-range=" + layout.ServiceCIDR,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(layout.KCMSecurePort),
		// Upstream's default (50 s since 1.32): a node whose kubelet stops ("localkube fault
		// node-stop") goes NotReady as soon as on a real cluster. The kubelet renews its Lease
		// every 10 s and starts seconds after this controller, which counts from its own start.
		"--node-monitor-grace-period=50s",
	}
}

func schedulerArgs(l layout.Layout) []string {
	kc := l.Kubeconfig()
	return []string{
		"scheduler",
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(layout.SchedSecure),
	}
}

func kubeletArgs(l layout.Layout) []string {
	return []string{
		"--kubeconfig", l.Kubeconfig(),
		"--state-dir", l.KubeletDir(),
		"--images-dir", l.Images(),
		"--bridge", layout.Bridge,
		"--api-server", layout.APIServerURL,
		"--nodes", fmt.Sprint(layout.KubeletNodes),
		"--fault-nodes", fmt.Sprint(layout.FaultNodes),
	}
}
