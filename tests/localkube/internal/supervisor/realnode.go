package supervisor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/realnode"
)

// realNode is the real node's processes (internal/realnode): the registry, containerd and the
// kubelet, started after the process kubelet and stopped before it.
type realNode struct {
	l                             layout.Layout
	registry, containerd, kubelet *child
}

func newRealNode(l layout.Layout) *realNode {
	mk := func(c realnode.Cmd, stop time.Duration) *child {
		return &child{name: c.Name, path: c.Path, args: c.Args, env: c.Env, logPath: l.Log(c.Name), stopTimeout: stop}
	}
	return &realNode{
		l:          l,
		registry:   mk(realnode.RegistryCmd(l), 10*time.Second),
		containerd: mk(realnode.ContainerdCmd(l), 15*time.Second),
		kubelet:    mk(realnode.KubeletCmd(l), 15*time.Second),
	}
}

// start checks the machine, prepares the node, starts the registry and pushes the images into it,
// then containerd and the kubelet. A machine that cannot run the real node is not an error: the
// reason is recorded (.localkube/realnode/state/unavailable), logged, and the cluster runs
// without it; "localkube start" and the tests that need the node report it.
func (r *realNode) start(ctx context.Context, logf func(string, ...any), exits chan<- exit) error {
	l := r.l
	if missing := realnode.Missing(l); len(missing) > 0 {
		reason := "the real node cannot run on this machine: " + strings.Join(missing, "; ")
		logf("%s", reason)
		return realnode.MarkUnavailable(l, reason)
	}
	if err := realnode.MarkUnavailable(l, ""); err != nil {
		return err
	}
	t0 := time.Now()
	if err := realnode.Prepare(l, logf); err != nil {
		return fmt.Errorf("real node: %w", err)
	}
	if err := r.registry.start(exits); err != nil {
		return err
	}
	if err := waitFor(ctx, "registry", 30*time.Second, r.registry, realnode.RegistryReady); err != nil {
		return err
	}
	if err := realnode.Push(ctx, l, logf); err != nil {
		return fmt.Errorf("real node: %w", err)
	}
	if err := r.containerd.start(exits); err != nil {
		return err
	}
	if err := waitFor(ctx, "containerd", 30*time.Second, r.containerd, func(c context.Context) error {
		return realnode.ContainerdReady(c, l)
	}); err != nil {
		return err
	}
	if err := r.kubelet.start(exits); err != nil {
		return err
	}
	logf("real node %s started after %s (registry %s, containerd and kubelet pids %d, %d)",
		realnode.NodeName, time.Since(t0).Round(time.Millisecond), realnode.RegistryAddr, r.containerd.pid(), r.kubelet.pid())
	return nil
}

// stop ends the kubelet, then the pods' containers (a kubelet leaves them running), containerd,
// the shims and what they mounted, and last the registry.
func (r *realNode) stop(logf func(string, ...any)) {
	r.kubelet.stop(logf)
	realnode.StopContainers(10*time.Second, logf)
	r.containerd.stop(logf)
	if problems := realnode.Cleanup(r.l); len(problems) > 0 {
		logf("real node: left after stop: %s", strings.Join(problems, "; "))
	}
	r.registry.stop(logf)
}

// childEnv is the supervisor's environment with a child's additions (later entries win).
func childEnv(extra []string) []string {
	if len(extra) == 0 {
		return nil
	}
	return append(os.Environ(), extra...)
}
