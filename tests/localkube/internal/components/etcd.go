package components

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd runs a single-member etcd from the embedded server package. It is its own process (not a
// goroutine of the supervisor) so that it stops last, after the API server, and so that its log and
// its crash are its own. Only the settings the local cluster needs are flags.
func Etcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "etcd data directory (required)")
	clientURL := fs.String("client-url", "http://127.0.0.1:23790", "client URL to listen on and advertise")
	peerURL := fs.String("peer-url", "http://127.0.0.1:23800", "peer URL to listen on and advertise")
	fsync := fs.Bool("fsync", false, "fsync writes (off: a test cluster trades durability on power loss for speed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	cfg, err := etcdConfig(*dataDir, *clientURL, *peerURL, !*fsync)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 2
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: start: %v\n", err)
		return 1
	}
	defer e.Close()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready")
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v before ready, stopping\n", s)
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
		return 0
	}
}
