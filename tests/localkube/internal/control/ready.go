package control

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/realnode"
	"valkey-operator.local/localkube/internal/supervisor"
)

// readiness is one observation of the cluster as a test would need it.
type readiness struct {
	readyz     error
	readyNodes int
	saErr      error
	// dnsErr: CoreDNS /ready; proxyErr: kube-proxy has written its rules once (only with nodes).
	dnsErr   error
	proxyErr error
	// realNode: why the real node is not ready yet, when it is asked for and may run here.
	realNode error
}

// stage names the first condition not yet met, and the log that explains it.
func (r readiness) stage(wantNodes int) (what, component string, ok bool) {
	switch {
	case r.readyz != nil:
		return fmt.Sprintf("API server /readyz: %v", r.readyz), "apiserver", false
	case r.readyNodes < wantNodes:
		return fmt.Sprintf("%d of %d nodes Ready", r.readyNodes, wantNodes), "kubelet", false
	case r.saErr != nil:
		return fmt.Sprintf("ServiceAccount default/default: %v", r.saErr), "controller-manager", false
	case r.dnsErr != nil:
		return fmt.Sprintf("CoreDNS %s: %v", supervisor.CoreDNSReadyURL, r.dnsErr), "coredns", false
	case wantNodes > 0 && r.proxyErr != nil:
		return fmt.Sprintf("kube-proxy: %v", r.proxyErr), "kube-proxy", false
	case r.realNode != nil:
		return r.realNode.Error(), realnode.KubeletLog, false
	}
	return "ready", "", true
}

func newClient(l layout.Layout) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 0 // each call carries its own context deadline
	return kubernetes.NewForConfig(cfg)
}

func observe(ctx context.Context, c *kubernetes.Clientset, real *layout.Layout) readiness {
	var r readiness
	body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		r.readyz = fmt.Errorf("%v %s", err, body)
		return r
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					r.readyNodes++
				}
			}
		}
	}
	_, r.saErr = c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	r.dnsErr = coreDNSReady(ctx)
	r.proxyErr = supervisor.ProxySynced(ctx)
	if real != nil {
		r.realNode = realNodeReady(ctx, c, *real)
	}
	return r
}

func coreDNSReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, supervisor.CoreDNSReadyURL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}
