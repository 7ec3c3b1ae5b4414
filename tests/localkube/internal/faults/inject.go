package faults

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"valkey-operator.local/localkube/internal/layout"
)

// Injector makes faults in one cluster.
type Injector struct {
	Layout layout.Layout
	Client kubernetes.Interface
	// Owner, when set, makes every fault end with that process (see Record.Owner).
	Owner *Proc
	// ID names the next fault instead of a random one.
	ID string
}

func (in Injector) newRecord(what string) (Record, error) {
	id := in.ID
	if id == "" {
		var err error
		if id, err = NewID(); err != nil {
			return Record{}, err
		}
	}
	if !ValidID(id) {
		return Record{}, fmt.Errorf("fault id %q: use lower-case letters, digits and _ (at most 32)", id)
	}
	if _, err := Load(in.Layout, id); err == nil {
		return Record{}, fmt.Errorf("a fault %s is already in force", id)
	}
	return Record{ID: id, What: what, Created: time.Now().UTC(), Owner: in.Owner}, nil
}

// Partition drops traffic between two sets of endpoints (both ways unless oneWay).
func (in Injector) Partition(ctx context.Context, from, to []Endpoint, oneWay bool) (Record, error) {
	a, err := Resolve(ctx, in.Client, from)
	if err != nil {
		return Record{}, err
	}
	b, err := Resolve(ctx, in.Client, to)
	if err != nil {
		return Record{}, err
	}
	arrow := "<->"
	if oneWay {
		arrow = "->"
	}
	r, err := in.newRecord(fmt.Sprintf("partition %s %s %s", a, arrow, b))
	if err != nil {
		return r, err
	}
	r.Table = TablePrefix + r.ID
	ruleset, err := Ruleset(r.Table, layout.APIServerIP, a, b, oneWay)
	if err != nil {
		return r, err
	}
	// Recorded first: a table without a record could outlive its owner.
	if err := Save(in.Layout, r); err != nil {
		return r, err
	}
	if err := AddTable(ruleset); err != nil {
		_ = Undo(in.Layout, r)
		return r, err
	}
	return r, nil
}

// podContainers finds a pod's running containers.
func (in Injector) podContainers(ctx context.Context, ns, name string) (map[string]Proc, error) {
	pod, err := in.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	c, err := Containers(in.Layout, string(pod.UID))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	if len(c) == 0 {
		return nil, fmt.Errorf("pod %s/%s has no running container", ns, name)
	}
	return c, nil
}

// Pause stops (SIGSTOP) every process of a pod's containers until the fault is undone.
func (in Injector) Pause(ctx context.Context, ns, name string) (Record, error) {
	containers, err := in.podContainers(ctx, ns, name)
	if err != nil {
		return Record{}, err
	}
	r, err := in.newRecord(fmt.Sprintf("pause pod %s/%s", ns, name))
	if err != nil {
		return r, err
	}
	leaders := make([]Proc, 0, len(containers))
	for _, p := range containers {
		leaders = append(leaders, p)
	}
	paused, pauseErr := Pause(leaders)
	r.Paused = paused
	if err := Save(in.Layout, r); err != nil {
		Continue(paused)
		return r, err
	}
	if pauseErr != nil {
		_ = Undo(in.Layout, r)
		return r, pauseErr
	}
	return r, nil
}

// Kill ends one container of a pod (SIGKILL to its process group); the kubelet restarts it in
// place. container may be empty when the pod runs one container.
func (in Injector) Kill(ctx context.Context, ns, name, container string) (string, error) {
	containers, err := in.podContainers(ctx, ns, name)
	if err != nil {
		return "", err
	}
	if container == "" {
		if len(containers) > 1 {
			return "", fmt.Errorf("pod %s/%s runs %s: name one with --container", ns, name, names(containers))
		}
		for c := range containers {
			container = c
		}
	}
	p, ok := containers[container]
	if !ok {
		return "", fmt.Errorf("pod %s/%s has no running container %q (running: %s)", ns, name, container, names(containers))
	}
	return container, Kill(p)
}

func names(m map[string]Proc) string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// StopMode is how a node stops.
type StopMode string

const (
	// Crash: the node's containers die and its kubelet goes silent.
	Crash StopMode = "crash"
	// Partitioned: the node's containers live on, cut from everything else, and its kubelet is
	// silent.
	Partitioned StopMode = "partition"
)

// StopNode stops a node: its kubelet stops heartbeats (the node goes NotReady after the node
// controller's grace period) and stops acting on its pods (deleted ones stay Terminating), and
// its pods are cut from every other pod and the host. With Crash its containers are killed too.
func (in Injector) StopNode(ctx context.Context, node string, mode StopMode) (Record, error) {
	if mode != Crash && mode != Partitioned {
		return Record{}, fmt.Errorf("node stop mode %q: crash or partition", mode)
	}
	if _, err := in.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		return Record{}, fmt.Errorf("node %s: %w", node, err)
	}
	if exists(NodeFaultFile(in.Layout, node)) {
		return Record{}, fmt.Errorf("node %s is already stopped", node)
	}
	a, err := Resolve(ctx, in.Client, []Endpoint{{Kind: "node", Name: node}})
	if err != nil {
		return Record{}, err
	}
	r, err := in.newRecord(fmt.Sprintf("stop node %s (%s)", node, mode))
	if err != nil {
		return r, err
	}
	r.Node = node
	r.Table = TablePrefix + r.ID
	// Cut from everything a partitioned node loses: the other pods, the host, outside clients.
	ruleset, err := Ruleset(r.Table, layout.APIServerIP, a, Side{Rest: true, Host: true, Outside: true}, false)
	if err != nil {
		return r, err
	}
	if err := Save(in.Layout, r); err != nil {
		return r, err
	}
	fail := func(err error) (Record, error) {
		_ = Undo(in.Layout, r)
		return r, err
	}
	if err := AddTable(ruleset); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(in.Layout.KubeletFaults(), 0o755); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(NodeFaultFile(in.Layout, node), []byte(string(mode)+"\n"), 0o644); err != nil {
		return fail(err)
	}
	applied := func() bool {
		b, err := os.ReadFile(appliedFile(in.Layout, node))
		return err == nil && strings.TrimSpace(string(b)) == string(mode)
	}
	if !waitFor(KubeletWait, applied) {
		return fail(fmt.Errorf("the kubelet did not act on the stop of node %s within %s (is it running? see logs/kubelet.log)", node, KubeletWait))
	}
	if mode == Crash {
		if err := in.waitNodeContainersGone(ctx, node); err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// waitNodeContainersGone waits until no container of the node's pods runs.
func (in Injector) waitNodeContainersGone(ctx context.Context, node string) error {
	pods, err := in.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("pods of node %s: %w", node, err)
	}
	var left []string
	gone := func() bool {
		left = left[:0]
		for _, p := range pods.Items {
			if c, _ := Containers(in.Layout, string(p.UID)); len(c) > 0 {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		return len(left) == 0
	}
	if !waitFor(KubeletWait, gone) {
		return fmt.Errorf("containers still running on crashed node %s after %s: %s", node, KubeletWait, strings.Join(left, ", "))
	}
	return nil
}
