package control

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/realnode"
)

// realNode is the layout to check the real node in, when it is asked for.
func (o StartOptions) realNode() *layout.Layout {
	if !o.RealNode {
		return nil
	}
	return &o.Layout
}

// realNodeReady is nil once the real node is Ready, or when the machine cannot run it (the
// supervisor recorded why; realNodeSummary says it).
func realNodeReady(ctx context.Context, c *kubernetes.Clientset, l layout.Layout) error {
	if realnode.Unavailability(l) != "" {
		return nil
	}
	n, err := c.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("real node %s not registered yet", realnode.NodeName)
	}
	if err != nil {
		return fmt.Errorf("real node %s: %w", realnode.NodeName, err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("real node %s not Ready: %s: %s", realnode.NodeName, cond.Reason, cond.Message)
		}
	}
	return fmt.Errorf("real node %s has no Ready condition yet", realnode.NodeName)
}

// realNodeSummary prints the real node's state once the cluster is ready.
func realNodeSummary(l layout.Layout, asked bool) {
	if !asked {
		return
	}
	if why := realnode.Unavailability(l); why != "" {
		fmt.Printf("WARNING: no real node: %s\n", why)
		return
	}
	fmt.Printf("real node %s Ready (images from the registry at %s)\n", realnode.NodeName, realnode.RegistryAddr)
}

// supervisorHasRealNode reports whether the running supervisor (pid) was started with the real
// node: its command line says so either way (see spawn).
func supervisorHasRealNode(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "\x00--real-node=true")
}
