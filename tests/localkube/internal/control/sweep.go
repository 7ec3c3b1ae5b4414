// Package control implements "localkube start", "stop" and "status": the commands that manage a
// supervisor running in the background.
package control

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"valkey-operator.local/localkube/internal/bridge"
	"valkey-operator.local/localkube/internal/faults"
	"valkey-operator.local/localkube/internal/hostnet"
	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
	"valkey-operator.local/localkube/internal/realnode"
)

// podMarker is set by the process kubelet in every pod's environment.
var podMarker = "KUBERNETES_SERVICE_HOST=" + layout.APIServerIP

// Leftovers is what a cluster left on the machine.
type Leftovers struct {
	Processes []proc.Process
	Mounts    []string
	NetNS     []proc.NetNS
	Bridge    bool
	// Faults in force: records, nftables tables, stopped nodes.
	Faults []string
	// Network: kube-proxy's nftables tables, the outside namespace's fence and link.
	Network []string
	// Cgroups of the real node (its pods' and CgroupRoot itself).
	Cgroups []string
}

// Empty reports whether nothing is left.
func (r Leftovers) Empty() bool {
	return len(r.Processes) == 0 && len(r.Mounts) == 0 && len(r.NetNS) == 0 && !r.Bridge && len(r.Faults) == 0 &&
		len(r.Network) == 0 && len(r.Cgroups) == 0
}

func (r Leftovers) String() string {
	if r.Empty() {
		return "nothing"
	}
	var parts []string
	for _, p := range r.Processes {
		parts = append(parts, fmt.Sprintf("process %d (%s)", p.PID, strings.Join(p.Cmdline, " ")))
	}
	for _, m := range r.Mounts {
		parts = append(parts, "mount "+m)
	}
	for _, n := range r.NetNS {
		parts = append(parts, "netns "+n.Name)
	}
	if r.Bridge {
		parts = append(parts, "bridge "+layout.Bridge)
	}
	parts = append(parts, r.Faults...)
	parts = append(parts, r.Network...)
	for _, c := range r.Cgroups {
		parts = append(parts, "cgroup "+c)
	}
	return strings.Join(parts, "\n  ")
}

// Find lists what belongs to the cluster under l: processes running a program under .localkube
// with an argument naming .localkube (the control plane) or a program from the image table, the
// process kubelet, processes in a pod network namespace or with the pod environment, processes in
// the real node's cgroups and the cgroups, mounts under .localkube, lk-* network namespaces, the
// bridge, and localkube's and kube-proxy's nftables tables and the outside link. The caller and
// its ancestors are never listed (a shell that runs "localkube stop" may mention .localkube in its
// own command line).
func Find(l layout.Layout) (Leftovers, error) {
	var r Leftovers
	r.NetNS = proc.NamedNetNS(layout.NetnsPrefix)
	podNS := map[uint64]bool{}
	for _, n := range r.NetNS {
		podNS[n.Inode] = true
	}
	host := proc.HostNetNS()
	procs, err := proc.List()
	if err != nil {
		return r, err
	}
	ancestors := ancestorsOfSelf(procs)
	inRealNode := map[int]bool{}
	for _, pid := range realnode.Processes() {
		inRealNode[pid] = true
	}
	prefix := l.Dir + string(filepath.Separator)
	for _, p := range procs {
		if ancestors[p.PID] {
			continue
		}
		exe := strings.TrimSuffix(p.Exe, " (deleted)")
		switch {
		case strings.HasPrefix(exe, prefix) && mentions(p.Cmdline[min(1, len(p.Cmdline)):], l.Dir),
			strings.HasPrefix(exe, l.Images()+string(filepath.Separator)),
			filepath.Base(exe) == "localkube-kubelet",
			podNS[p.NetNS],
			p.NetNS != host && p.NetNS != 0 && hasEnv(p.Env, podMarker),
			inRealNode[p.PID]:
			r.Processes = append(r.Processes, p)
		}
	}
	if r.Mounts, err = proc.MountsUnder(l.Dir); err != nil {
		return r, err
	}
	r.Bridge = bridge.Exists(layout.Bridge)
	r.Faults = faults.Leftovers(l)
	r.Network = hostnet.Leftovers()
	r.Cgroups = realnode.Cgroups()
	return r, nil
}

func ancestorsOfSelf(procs []proc.Process) map[int]bool {
	parent := map[int]int{}
	for _, p := range procs {
		parent[p.PID] = p.PPID
	}
	out := map[int]bool{}
	for pid := os.Getppid(); pid > 1 && !out[pid]; pid = parent[pid] {
		out[pid] = true
	}
	return out
}

// mentions reports whether an argument names dir or a path below it: the components of this
// cluster always do, while the same binary run for another purpose (a test's own etcd, a kubectl
// command) does not and is left alone.
func mentions(args []string, dir string) bool {
	for _, a := range args {
		if strings.Contains(a, dir+string(filepath.Separator)) || strings.HasSuffix(a, dir) {
			return true
		}
	}
	return false
}

func hasEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

// ErrOtherCluster is returned when another checkout's supervisor runs on this machine: the bridge,
// the lk-* namespaces, the process kubelet and the nftables tables are the machine's, one cluster
// at a time, so a sweep would tear that cluster down.
var ErrOtherCluster = errors.New("another localkube runs on this machine")

// OtherSupervisor finds a running "localkube up" whose directory is not l's.
func OtherSupervisor(l layout.Layout) (pid int, dir string, found bool) {
	procs, err := proc.List()
	if err != nil {
		return 0, "", false
	}
	for _, p := range procs {
		if d, ok := supervisorDir(p.Cmdline); ok && d != l.Dir {
			return p.PID, d, true
		}
	}
	return 0, "", false
}

// supervisorDir is the --dir of a "localkube up" command line.
func supervisorDir(argv []string) (string, bool) {
	if len(argv) < 2 || filepath.Base(argv[0]) != "localkube" || argv[1] != "up" {
		return "", false
	}
	for i := 2; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--dir" && i+1 < len(argv):
			return argv[i+1], true
		case strings.HasPrefix(a, "--dir="):
			return strings.TrimPrefix(a, "--dir="), true
		}
	}
	return "", false
}

// refuseOtherCluster fails when another checkout's cluster runs.
func refuseOtherCluster(l layout.Layout) error {
	if pid, dir, found := OtherSupervisor(l); found {
		return fmt.Errorf("%w: the supervisor of %s (pid %d); stop it there (make localkube-down) before starting or sweeping this one", ErrOtherCluster, dir, pid)
	}
	return nil
}

// Sweep removes leftovers: kills the processes, deletes the network namespaces, unmounts, and
// deletes the bridge. It returns what it found and what is still there afterwards.
func Sweep(l layout.Layout) (found, remaining Leftovers, err error) {
	if err := refuseOtherCluster(l); err != nil {
		return found, found, err
	}
	found, err = Find(l)
	if err != nil {
		return found, found, err
	}
	// Faults first: a paused process must be continued to die of anything but SIGKILL, and the
	// nftables tables and node files of a cluster that is gone must not greet the next one.
	if err := faults.Sweep(l); err != nil {
		fmt.Fprintf(os.Stderr, "localkube: %v\n", err)
	}
	for _, p := range found.Processes {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range found.Processes {
		for proc.Alive(p.PID) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The real node's shims' sockets, mounts, run directory and cgroups.
	for _, problem := range realnode.Cleanup(l) {
		fmt.Fprintf(os.Stderr, "localkube: real node: %s\n", problem)
	}
	// The outside namespace, its fence and kube-proxy's tables; then every lk-* namespace left.
	if err := hostnet.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "localkube: %v\n", err)
	}
	for _, n := range found.NetNS {
		if n.Name == layout.OutsideNetns {
			continue
		}
		if out, err := exec.Command("ip", "netns", "delete", n.Name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "localkube: ip netns delete %s: %v: %s\n", n.Name, err, out)
		}
	}
	// Mounts may have appeared under others (a netns bind mount) or gone with their process.
	mounts, _ := proc.MountsUnder(l.Dir)
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			fmt.Fprintf(os.Stderr, "localkube: umount %s: %v\n", m, err)
		}
	}
	if err := bridge.Down(layout.Bridge); err != nil {
		fmt.Fprintf(os.Stderr, "localkube: %v\n", err)
	}
	remaining, err = Find(l)
	return found, remaining, err
}
