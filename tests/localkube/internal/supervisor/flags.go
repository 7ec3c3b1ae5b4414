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
		// What a pod's resolv.conf names, as a kubelet's --cluster-dns and --cluster-domain.
		"--cluster-dns", layout.DNSServiceIP,
		"--cluster-domain", layout.ClusterDomain,
		// Pods route the pod network through their gateway; Services and the outside namespace
		// (the answers to outside clients whose source kube-proxy keeps) go the same way.
		"--pod-route", layout.ServiceCIDR,
		"--pod-route", layout.OutsideCIDR,
	}
}

func kubeProxyArgs(l layout.Layout) []string {
	return []string{
		"kube-proxy",
		"--kubeconfig=" + l.Kubeconfig(),
		// nftables, not iptables: the machine has nft and no iptables, kube-proxy then keeps to a
		// table of its own (ip/ip6 kube-proxy) beside the faults' lkfault_* tables, and it syncs
		// only what changed.
		"--proxy-mode=nftables",
		// One kube-proxy for every process node (they share the host's network stack): it speaks
		// for the first, so only pods there are "local" to a Service with externalTrafficPolicy or
		// internalTrafficPolicy Local.
		"--hostname-override=" + layout.ProxyNode,
		// Traffic from the pod network is the cluster's own: masqueraded only when it hairpins.
		// From anywhere else (the host's other addresses, the outside namespace) it is masqueraded
		// on its way to a ClusterIP, and to a NodePort or LoadBalancer address unless the Service
		// keeps the client's address (externalTrafficPolicy: Local).
		"--detect-local-mode=ClusterCIDR",
		"--cluster-cidr=" + layout.PodCIDR,
		// NodePorts on the bridge's addresses (the node addresses and 10.213.0.1) only, not on the
		// machine's own interfaces.
		"--nodeport-addresses=" + layout.PodCIDR,
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(layout.ProxyHealthPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(layout.ProxyMetricsPort),
		// The machine's conntrack settings are the machine's: kube-proxy leaves them as they are.
		"--conntrack-max-per-core=0",
		"--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}
}

func loadBalancerArgs(l layout.Layout) []string {
	return []string{
		"loadbalancer",
		"--kubeconfig=" + l.Kubeconfig(),
		"--class=" + layout.LBClass,
		"--pool=" + layout.LBPoolFirst + "-" + layout.LBPoolLast,
		"--class-pool=" + layout.LBClassNoAddresses + "=",
	}
}

func coreDNSArgs(l layout.Layout) []string {
	return []string{"-conf", l.Corefile()}
}
