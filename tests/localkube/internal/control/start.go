package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
	"valkey-operator.local/localkube/internal/supervisor"
)

// StartOptions of "localkube start".
type StartOptions struct {
	Layout    layout.Layout
	Kubelet   string
	NoKubelet bool
	RealNode  bool
	Timeout   time.Duration
}

// ErrNotReady is returned when the cluster does not become ready before the deadline.
var ErrNotReady = errors.New("cluster not ready")

// Start runs the supervisor in the background unless one is already running, then waits until
// /readyz is OK, the nodes are Ready and the default ServiceAccount exists.
func Start(opts StartOptions) error {
	l := opts.Layout
	t0 := time.Now()
	wantNodes := layout.KubeletNodes
	if opts.NoKubelet {
		wantNodes = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()

	// The end of the supervisor we start; nil when one was already running.
	var exited <-chan error
	running, err := supervisor.Running(l)
	if err != nil {
		return err
	}
	pid, _ := supervisor.ReadPID(l.PIDFile())
	if running {
		if opts.RealNode && !supervisorHasRealNode(pid) {
			return fmt.Errorf("a cluster without the real node is running (pid %d): stop it first (localkube stop, make localkube-down)", pid)
		}
		if c, err := newClient(l); err == nil {
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			r := observe(qctx, c, opts.realNode())
			qcancel()
			if _, _, ok := r.stage(wantNodes); ok {
				fmt.Printf("already running and ready (pid %d)\n", pid)
				return nil
			}
		}
		fmt.Printf("supervisor already running (pid %d), waiting for it to be ready\n", pid)
	} else {
		// A supervisor that was killed (or a machine whose processes were ended) leaves its
		// children, pod namespaces, mounts and the bridge: clear them, or they hold the ports.
		found, remaining, err := Sweep(l)
		if err != nil {
			return err
		}
		if !found.Empty() {
			fmt.Printf("no supervisor running; swept what an earlier run left:\n  %s\n", found)
		}
		if !remaining.Empty() {
			return fmt.Errorf("%w:\n  %s", ErrNotClean, remaining)
		}
		if pid, exited, err = spawn(opts); err != nil {
			return err
		}
		fmt.Printf("supervisor started (pid %d), logs in %s\n", pid, l.Logs())
	}

	var last readiness
	var client *kubernetes.Clientset
	for {
		if client == nil {
			// The kubeconfig appears once the supervisor has made the PKI.
			if c, err := newClient(l); err == nil {
				client = c
			}
		}
		if client != nil {
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			last = observe(qctx, client, opts.realNode())
			qcancel()
			if _, _, ok := last.stage(wantNodes); ok {
				fmt.Printf("ready in %s: %s, %d nodes Ready, default ServiceAccount present, CoreDNS ready, kube-proxy synced\n",
					time.Since(t0).Round(100*time.Millisecond), layout.APIServerURL, last.readyNodes)
				realNodeSummary(l, opts.RealNode)
				return nil
			}
		}
		select {
		case err := <-exited:
			// Lost a race with another "start": wait for the winner instead.
			if other, perr := supervisor.ReadPID(l.PIDFile()); perr == nil && other != pid && proc.Alive(other) {
				fmt.Printf("another supervisor (pid %d) is starting the cluster; waiting for it\n", other)
				pid, exited = other, nil
				continue
			}
			return fmt.Errorf("supervisor exited during start-up (%v)\n%s", err, tails(l, "localkube", diedComponent(l)))
		case <-ctx.Done():
			what, component, _ := last.stage(wantNodes)
			if client == nil {
				what, component = "no kubeconfig yet", ""
			}
			return fmt.Errorf("%w after %s: %s\n%s", ErrNotReady, opts.Timeout, what, tails(l, "localkube", component))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// spawn starts "localkube up" in a new session, detached from the terminal, logging to
// logs/localkube.log.
func spawn(opts StartOptions) (int, <-chan error, error) {
	l := opts.Layout
	self, err := os.Executable()
	if err != nil {
		return 0, nil, err
	}
	if err := os.MkdirAll(l.Logs(), 0o755); err != nil {
		return 0, nil, err
	}
	logFile, err := os.OpenFile(l.Log("localkube"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer logFile.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, nil, err
	}
	defer devnull.Close()
	// The checkout too: a .localkube that is a symlink resolves to another checkout's
	// directory, and the supervisor must still serve this checkout's builds (target/images).
	args := []string{"up", "--dir", l.Dir, "--root", l.Root}
	if opts.NoKubelet {
		args = append(args, "--no-kubelet")
	} else {
		args = append(args, "--kubelet", opts.Kubelet)
	}
	// Explicit either way: the supervisor must not take it from an environment variable.
	args = append(args, fmt.Sprintf("--real-node=%t", opts.RealNode))
	cmd := exec.Command(self, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start supervisor: %w", err)
	}
	// Reaped here if it ends while we wait; otherwise it outlives us, re-parented.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd.Process.Pid, exited, nil
}

// diedComponent finds, in the supervisor's log, the component whose exit stopped it.
func diedComponent(l layout.Layout) string {
	lines := strings.Split(tail(l.Log("localkube"), 10), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := diedRE.FindStringSubmatch(lines[i]); m != nil {
			return m[1]
		}
	}
	return ""
}

var diedRE = regexp.MustCompile(`localkube: \S+ \S+ (\S+) exited on its own`)

// tails returns the last lines of the supervisor's log and of one component's.
func tails(l layout.Layout, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		if n == "" {
			continue
		}
		fmt.Fprintf(&b, "--- last lines of %s ---\n%s", l.Log(n), tail(l.Log(n), 25))
	}
	return b.String()
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		// Indented lines are stack-trace detail; the message above them is what explains.
		if t := sc.Text(); t == "" || t[0] == ' ' || t[0] == '\t' {
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
