// Package supervisor is "localkube up": it prepares PKI and network, starts etcd, the API server,
// the controller manager, the scheduler, CoreDNS, the LoadBalancer allocator, the process kubelet,
// kube-proxy and (--real-node) the real node's registry, containerd and kubelet as child
// processes, and stops them in reverse order on SIGTERM/SIGINT or when any of them dies. SIGUSR1
// restarts the API server (SIGTERM, as an upgrade would), SIGUSR2 too but with SIGKILL (a crash);
// and every 2 s it undoes the faults whose owner process has ended.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"valkey-operator.local/localkube/internal/bridge"
	"valkey-operator.local/localkube/internal/faults"
	"valkey-operator.local/localkube/internal/hostnet"
	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/pki"
	"valkey-operator.local/localkube/internal/realnode"
)

// Options of one supervisor run.
type Options struct {
	Layout    layout.Layout
	Kubelet   string // path of the process kubelet binary
	NoKubelet bool   // control plane only
	RealNode  bool   // also the real node (internal/realnode)
}

// ErrChildDied is returned when a component exits on its own.
var ErrChildDied = errors.New("a component exited")

// Up runs the cluster until a signal arrives or a component dies.
func Up(opts Options) error {
	l := opts.Layout
	logger := log.New(os.Stderr, "localkube: ", log.LstdFlags)
	logf := logger.Printf

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer cancel()
	// Caught from the start: a restart asked for during start-up waits for the main loop, where
	// otherwise the signal's default action would end the supervisor.
	restarts := make(chan os.Signal, 1)
	signal.Notify(restarts, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(restarts)

	// The lock comes before any side effect: a second supervisor (two "make localkube" at once)
	// must leave without touching the bridge or the processes of the first.
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return err
	}
	unlock, err := lock(l.LockFile())
	if err != nil {
		return err
	}
	defer unlock()
	if err := writePIDFile(l.PIDFile()); err != nil {
		return err
	}
	defer os.Remove(l.PIDFile())

	self, err := os.Executable()
	if err != nil {
		return err
	}
	if !opts.NoKubelet {
		if _, err := os.Stat(opts.Kubelet); err != nil {
			return fmt.Errorf("process kubelet: %w (build it with cargo build -p localkube-kubelet, or pass --no-kubelet)", err)
		}
	}
	if _, err := os.Stat(l.CoreDNS()); err != nil {
		return fmt.Errorf("coredns: %w (make localkube-tools builds it)", err)
	}
	for _, d := range []string{l.Logs(), l.Etcd(), l.KubeletDir(), l.Images()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// etcd refuses a data directory others can read.
	if err := os.Chmod(l.Etcd(), 0o700); err != nil {
		return err
	}
	if err := pki.Ensure(l.PKI(), servingSANs()); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := pki.WriteKubeconfig(l.Kubeconfig(), l.PKI(), layout.APIServerURL, layout.ClusterName, layout.AdminUser); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := bridge.Up(layout.Bridge, layout.BridgeCIDR); err != nil {
		return fmt.Errorf("bridge %s: %w", layout.Bridge, err)
	}
	logf("bridge %s %s up", layout.Bridge, layout.BridgeCIDR)
	if err := hostnet.Up(); err != nil {
		_ = hostnet.Down()
		_ = bridge.Down(layout.Bridge)
		return fmt.Errorf("host network: %w", err)
	}
	logf("route to %s, outside namespace %s (%s) up", layout.ServiceCIDR, layout.OutsideNetns, layout.OutsideIP)
	// The real node's address before kube-proxy's first sync, the only one (but hourly) that
	// reads the addresses NodePorts answer on; the node itself starts after that sync.
	if opts.RealNode && len(realnode.Missing(l)) == 0 {
		if err := realnode.AddNodeAddress(); err != nil {
			_ = hostnet.Down()
			_ = bridge.Down(layout.Bridge)
			return fmt.Errorf("real node: %w", err)
		}
	}
	if err := writeCorefile(l); err != nil {
		return err
	}
	if err := prepareObjectStore(l); err != nil {
		return err
	}

	comp := func(name string, args []string, stop time.Duration) *child {
		return &child{name: name, path: self, args: args, logPath: l.Log(name), stopTimeout: stop}
	}
	etcd := comp("etcd", etcdArgs(l), 15*time.Second)
	apiserver := comp("apiserver", apiserverArgs(l), 30*time.Second)
	kcm := comp("controller-manager", controllerManagerArgs(l), 15*time.Second)
	sched := comp("scheduler", schedulerArgs(l), 15*time.Second)
	coredns := &child{name: "coredns", path: l.CoreDNS(), args: coreDNSArgs(l), logPath: l.Log("coredns"), stopTimeout: 10 * time.Second}
	loadbalancer := comp("loadbalancer", loadBalancerArgs(l), 10*time.Second)
	objectstore := &child{name: "objectstore", path: l.ObjectStore(), args: objectStoreArgs(l), logPath: l.Log("objectstore"), stopTimeout: 10 * time.Second}
	var kubelet, proxy *child
	if !opts.NoKubelet {
		kubelet = &child{name: "kubelet", path: opts.Kubelet, args: kubeletArgs(l), logPath: l.Log("kubelet"), stopTimeout: 30 * time.Second}
		// Only with nodes: kube-proxy speaks for one of them.
		proxy = comp("kube-proxy", kubeProxyArgs(l), 10*time.Second)
	}
	cs := components{etcd: etcd, apiserver: apiserver, kcm: kcm, sched: sched, coredns: coredns,
		loadbalancer: loadbalancer, objectstore: objectstore, kubelet: kubelet, proxy: proxy}
	// Stop order: the kubelet first (it stops the pods), etcd last.
	stopOrder := []*child{kubelet, proxy, loadbalancer, objectstore, coredns, sched, kcm, apiserver, etcd}
	var real *realNode
	if opts.RealNode {
		real = newRealNode(l)
	}

	// Every child that exits reports here; buffered so a late exit never blocks.
	exits := make(chan exit, 4*len(stopOrder))
	shutdown := func() {
		if real != nil {
			real.stop(logf)
		}
		for _, c := range stopOrder {
			if c != nil {
				c.stop(logf)
			}
		}
		// kube-proxy leaves its tables: without it they would still route the cluster's Services.
		if err := hostnet.Down(); err != nil {
			logf("removing the outside namespace and kube-proxy's tables: %v", err)
		}
		if err := bridge.Down(layout.Bridge); err != nil {
			logf("deleting bridge: %v", err)
		} else {
			logf("bridge %s deleted", layout.Bridge)
		}
	}

	startErr := startAll(ctx, l, logf, exits, cs)
	if startErr == nil && real != nil {
		startErr = real.start(ctx, logf, exits)
	}
	if startErr != nil {
		logf("start failed: %v", startErr)
		shutdown()
		if ctx.Err() != nil {
			return nil // a signal during start-up is an ordinary stop
		}
		return startErr
	}
	logf("cluster up: %s (kubeconfig %s)", layout.APIServerURL, l.Kubeconfig())

	reap := time.NewTicker(reapPeriod)
	defer reap.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("signal received: stopping")
			shutdown()
			logf("stopped")
			return nil
		case sig := <-restarts:
			if err := restartAPIServer(ctx, l, logf, apiserver, exits, sig == syscall.SIGUSR2); err != nil {
				logf("restarting the API server failed: %v; stopping everything", err)
				shutdown()
				return err
			}
		case <-reap.C:
			reapFaults(l, logf)
		case e := <-exits:
			if e.deliberate {
				continue
			}
			logf("%s exited on its own (%v): see %s; stopping everything", e.name, e.err, l.Log(e.name))
			shutdown()
			return fmt.Errorf("%w: %s (%v)", ErrChildDied, e.name, e.err)
		}
	}
}

// reapPeriod is how often faults whose owner ended are undone.
const reapPeriod = 2 * time.Second

func reapFaults(l layout.Layout, logf func(string, ...any)) {
	reaped, err := faults.Reap(l)
	for _, r := range reaped {
		logf("fault %s undone, its owner (pid %d) has ended: %s", r.ID, r.Owner.PID, r.What)
	}
	if err != nil {
		logf("undoing faults of ended owners: %v", err)
	}
}

// restartStopTimeout bounds a restart's wait for the old API server: it stops listening at once
// but may take its full 30 s draining long requests, all of that time an outage for every client.
const restartStopTimeout = 5 * time.Second

// restartAPIServer stops the API server (SIGTERM, or SIGKILL when crash), starts it again and
// waits for /readyz; the other components ride it out as they would on a real cluster.
func restartAPIServer(ctx context.Context, l layout.Layout, logf func(string, ...any), apiserver *child, exits chan<- exit, crash bool) error {
	how := syscall.SIGTERM
	if crash {
		how = syscall.SIGKILL
	}
	logf("restarting the API server (%v)", how)
	t0 := time.Now()
	apiserver.end(logf, how, restartStopTimeout)
	if err := startAPIServer(ctx, l, apiserver, exits); err != nil {
		return err
	}
	logf("API server restarted (pid %d), ready after %s", apiserver.pid(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// startAPIServer starts the API server and waits until it answers /readyz.
func startAPIServer(ctx context.Context, l layout.Layout, apiserver *child, exits chan<- exit) error {
	if err := apiserver.start(exits); err != nil {
		return err
	}
	admin, err := AdminHTTPClient(l)
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-apiserver /readyz", 120*time.Second, apiserver, func(c context.Context) error {
		return probe(c, admin, layout.APIServerURL+"/readyz", "ok")
	})
}

// components are the supervisor's children; kubelet and proxy are nil without the kubelet.
type components struct {
	etcd, apiserver, kcm, sched, coredns, loadbalancer, objectstore, kubelet, proxy *child
}

func startAll(ctx context.Context, l layout.Layout, logf func(string, ...any), exits chan<- exit, cs components) error {
	t0 := time.Now()
	if err := cs.etcd.start(exits); err != nil {
		return err
	}
	plain := selfSignedClient()
	if err := waitFor(ctx, "etcd", 60*time.Second, cs.etcd, func(c context.Context) error {
		return probe(c, plain, layout.EtcdClientURL+"/health", `"health":"true"`)
	}); err != nil {
		return err
	}
	logf("etcd ready after %s", time.Since(t0).Round(time.Millisecond))

	if err := startAPIServer(ctx, l, cs.apiserver, exits); err != nil {
		return err
	}
	logf("apiserver ready after %s", time.Since(t0).Round(time.Millisecond))
	// Before kube-proxy and CoreDNS start, so that their first sync has it.
	if err := ensureDNSService(ctx, l); err != nil {
		return fmt.Errorf("kube-dns Service: %w", err)
	}
	if err := ensureObjectStoreObjects(ctx, l); err != nil {
		return fmt.Errorf("object store's Service and Secret: %w", err)
	}

	// Everything else at once: none of them needs another to start (kube-proxy waits for its
	// Node, which the kubelet registers), and waiting for each in turn would add their start-up
	// times.
	started := []*child{cs.kcm, cs.sched, cs.coredns, cs.loadbalancer, cs.objectstore}
	if cs.kubelet != nil {
		started = append(started, cs.kubelet, cs.proxy)
	}
	for _, c := range started {
		if err := c.start(exits); err != nil {
			return err
		}
	}
	if cs.kubelet != nil {
		logf("kubelet started (pid %d)", cs.kubelet.pid())
	}
	checks := []struct {
		c     *child
		url   string
		check func(context.Context) error
	}{
		{cs.kcm, "/healthz", urlCheck(plain, "https://127.0.0.1:"+strconv.Itoa(layout.KCMSecurePort)+"/healthz", "ok")},
		{cs.sched, "/healthz", urlCheck(plain, "https://127.0.0.1:"+strconv.Itoa(layout.SchedSecure)+"/healthz", "ok")},
		// Ready once the kubernetes plugin has synced its caches.
		{cs.coredns, "/ready", urlCheck(plain, CoreDNSReadyURL, "OK")},
		{cs.objectstore, "listening", objectStoreListening},
	}
	if cs.proxy != nil {
		// After its first sync: the NodePort addresses it takes from the bridge then are the
		// node addresses, which the kubelet adds before it registers the Node kube-proxy waits for.
		checks = append(checks, struct {
			c     *child
			url   string
			check func(context.Context) error
		}{cs.proxy, "first sync", ProxySynced})
	}
	for _, hc := range checks {
		if err := waitFor(ctx, hc.c.name+" "+hc.url, 90*time.Second, hc.c, hc.check); err != nil {
			return err
		}
	}
	if cs.kubelet == nil {
		logf("controller-manager, scheduler and CoreDNS ready after %s; kubelet and kube-proxy not started (--no-kubelet)", time.Since(t0).Round(time.Millisecond))
		return nil
	}
	logf("controller-manager, scheduler and CoreDNS ready, kube-proxy synced after %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

func urlCheck(c *http.Client, url, want string) func(context.Context) error {
	return func(ctx context.Context) error { return probe(ctx, c, url, want) }
}

func servingSANs() pki.ServingSANs {
	return pki.ServingSANs{
		Owner: "kube-apiserver",
		IPs:   []net.IP{net.ParseIP(layout.APIServerIP), net.ParseIP("127.0.0.1"), net.ParseIP(layout.ServiceIP)},
		DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
}

// ErrAlreadyRunning is returned when another supervisor holds the lock.
var ErrAlreadyRunning = errors.New("another supervisor is running")

// lock takes the supervisor lock for the life of this process; the kernel drops it when the
// process ends, however it ends.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := ReadPID(strings.TrimSuffix(path, ".lock") + ".pid")
			return nil, fmt.Errorf("%w (pid %d)", ErrAlreadyRunning, pid)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Running reports whether a supervisor holds the lock of l.
func Running(l layout.Layout) (bool, error) {
	if _, err := os.Stat(l.LockFile()); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	unlock, err := lock(l.LockFile())
	if errors.Is(err, ErrAlreadyRunning) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	unlock()
	return false, nil
}

func writePIDFile(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadPID reads a pid file.
func ReadPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
