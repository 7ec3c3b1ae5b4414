package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"

	"valkey-operator.local/localkube/internal/layout"
)

const outsideUsage = `usage: localkube outside [--] CMD [ARGS...]

Runs CMD in the outside network namespace (` + layout.OutsideNetns + `, address ` + layout.OutsideIP + `): a client outside
the cluster. It reaches the node addresses and the LoadBalancer pool (` + layout.LBPoolCIDR + `), so
NodePorts and LoadBalancer Services, and nothing else: a pod IP, a ClusterIP or the API server
is refused at once. Only the network namespace changes (files, users and the environment are the
host's); CMD's exit status is the command's.
`

// outsideCommand replaces this process with CMD, running in the outside network namespace.
func outsideCommand(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, outsideUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "localkube outside: %v\n", err)
		return 127
	}
	ns, err := os.Open("/run/netns/" + layout.OutsideNetns)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localkube outside: %v (is localkube running? make localkube)\n", err)
		return 1
	}
	// A network namespace belongs to a thread: join it on this one, and exec from it.
	runtime.LockOSThread()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		fmt.Fprintf(os.Stderr, "localkube outside: entering %s: %v\n", layout.OutsideNetns, err)
		return 1
	}
	ns.Close()
	err = unix.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "localkube outside: %s: %v\n", path, err)
	return 126
}
