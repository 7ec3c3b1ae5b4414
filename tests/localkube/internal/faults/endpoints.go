package faults

import (
	"context"
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Endpoint is one thing a partition names, as written on the command line:
//
//	pod/NAMESPACE/NAME   one pod (its IP)
//	node/NAME            every pod on a node (the node's whole pod range, so pods started later too)
//	zone/ZONE            every pod on the nodes of a zone
//	host                 the host (see Side)
//	rest                 every pod not on the other side (receiving side only)
//	outside              the outside namespace's client (against pods, nodes or zones)
type Endpoint struct {
	Kind      string // pod, node, zone, host, rest, outside
	Namespace string
	Name      string
}

// ParseEndpoints reads a comma-separated list of endpoints.
func ParseEndpoints(list string) ([]Endpoint, error) {
	var out []Endpoint
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "/")
		switch {
		case len(parts) == 1 && (parts[0] == "host" || parts[0] == "rest" || parts[0] == "outside"):
			out = append(out, Endpoint{Kind: parts[0]})
		case len(parts) == 3 && parts[0] == "pod" && parts[1] != "" && parts[2] != "":
			out = append(out, Endpoint{Kind: "pod", Namespace: parts[1], Name: parts[2]})
		case len(parts) == 2 && (parts[0] == "node" || parts[0] == "zone") && parts[1] != "":
			out = append(out, Endpoint{Kind: parts[0], Name: parts[1]})
		default:
			return nil, fmt.Errorf("%q is not pod/NAMESPACE/NAME, node/NAME, zone/ZONE, host, rest or outside", item)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no endpoint in %q", list)
	}
	return out, nil
}

// PodRange is the pod addresses of the node whose own address is nodeIP (a.b.c.1): a.b.c.2-254.
func PodRange(nodeIP string) (string, error) {
	ip := net.ParseIP(nodeIP).To4()
	if ip == nil {
		return "", fmt.Errorf("node address %q is not IPv4", nodeIP)
	}
	return fmt.Sprintf("%d.%d.%d.2-%d.%d.%d.254", ip[0], ip[1], ip[2], ip[0], ip[1], ip[2]), nil
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// Resolve turns endpoints into one side of a partition.
func Resolve(ctx context.Context, c kubernetes.Interface, eps []Endpoint) (Side, error) {
	var s Side
	for _, ep := range eps {
		switch ep.Kind {
		case "host":
			s.Host = true
		case "rest":
			s.Rest = true
		case "outside":
			s.Outside = true
		case "pod":
			pod, err := c.CoreV1().Pods(ep.Namespace).Get(ctx, ep.Name, metav1.GetOptions{})
			if err != nil {
				return s, fmt.Errorf("pod %s/%s: %w", ep.Namespace, ep.Name, err)
			}
			if pod.Status.PodIP == "" {
				return s, fmt.Errorf("pod %s/%s has no IP yet", ep.Namespace, ep.Name)
			}
			s.Pods = append(s.Pods, pod.Status.PodIP)
		case "node":
			n, err := c.CoreV1().Nodes().Get(ctx, ep.Name, metav1.GetOptions{})
			if err != nil {
				return s, fmt.Errorf("node %s: %w", ep.Name, err)
			}
			r, err := PodRange(internalIP(n))
			if err != nil {
				return s, fmt.Errorf("node %s: %w", ep.Name, err)
			}
			s.Pods = append(s.Pods, r)
		case "zone":
			nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: corev1.LabelTopologyZone + "=" + ep.Name})
			if err != nil {
				return s, fmt.Errorf("nodes of zone %s: %w", ep.Name, err)
			}
			if len(nodes.Items) == 0 {
				return s, fmt.Errorf("no node is in zone %s", ep.Name)
			}
			for i := range nodes.Items {
				r, err := PodRange(internalIP(&nodes.Items[i]))
				if err != nil {
					return s, fmt.Errorf("node %s: %w", nodes.Items[i].Name, err)
				}
				s.Pods = append(s.Pods, r)
			}
		}
	}
	return s, nil
}
