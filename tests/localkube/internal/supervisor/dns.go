package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"valkey-operator.local/localkube/internal/layout"
)

// fieldManager is the supervisor's server-side apply identity.
const fieldManager = "localkube"

// Corefile is CoreDNS's configuration: the kubernetes plugin answers for the cluster domain and
// the reverse zones (pod records only for pods that exist: "pods verified"); other names are
// refused at once: pods have no route out of the machine, and a query forwarded to the machine's
// resolver would leave it.
func Corefile(kubeconfig string) string {
	d := layout.ClusterDomain
	port := strconv.Itoa(layout.DNSPort)
	return fmt.Sprintf(`%[1]s:%[2]s in-addr.arpa:%[2]s ip6.arpa:%[2]s {
    bind %[3]s
    errors
    health 127.0.0.1:%[4]d
    ready 127.0.0.1:%[5]d
    prometheus 127.0.0.1:%[6]d
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        kubeconfig %[7]s
        pods verified
        ttl 5
    }
    cache 30
    loadbalance
}
`, d, port, layout.DNSAddr, layout.DNSHealthPort, layout.DNSReadyPort, layout.DNSMetrics, kubeconfig)
}

func writeCorefile(l layout.Layout) error {
	if err := os.MkdirAll(filepath.Dir(l.Corefile()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(l.Corefile(), []byte(Corefile(l.Kubeconfig())), 0o644)
}

// ensureDNSService applies the kube-dns Service (ClusterIP 10.0.0.10, no selector) and the
// EndpointSlice that points it at CoreDNS on the host, as the API server keeps the kubernetes
// Service's pointing at itself.
func ensureDNSService(ctx context.Context, l layout.Layout) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	const ns, name = "kube-system", "kube-dns"
	labels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}
	svc := corev1ac.Service(name, ns).WithLabels(labels).WithSpec(corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeClusterIP).
		WithClusterIP(layout.DNSServiceIP).
		WithPorts(
			corev1ac.ServicePort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(53).WithTargetPort(intstr.FromInt32(layout.DNSPort)),
			corev1ac.ServicePort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(53).WithTargetPort(intstr.FromInt32(layout.DNSPort)),
		))
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if _, err := c.CoreV1().Services(ns).Apply(ctx, svc, opts); err != nil {
		return fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	port := int32(layout.DNSPort)
	slice := discoveryv1ac.EndpointSlice(name+"-localkube", ns).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "localkube",
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(discoveryv1ac.Endpoint().
			WithAddresses(layout.DNSAddr).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(true).WithServing(true).WithTerminating(false))).
		WithPorts(
			discoveryv1ac.EndpointPort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(port),
			discoveryv1ac.EndpointPort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(port),
		)
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Apply(ctx, slice, opts); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", ns, name, err)
	}
	return nil
}
