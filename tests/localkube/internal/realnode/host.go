package realnode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
)

// requiredControllers are the cgroup controllers the kubelet checks for (cpu, cpuacct, cpuset,
// memory, pids) and runc needs (devices, freezer) on cgroup v1.
var requiredControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer"}

// requiredV2Controllers are their cgroup v2 counterparts (devices and freezer are built in).
var requiredV2Controllers = []string{"cpu", "cpuset", "memory", "pids"}

// Missing lists what this machine lacks to run the real node, one sentence each: a program not
// built, a cgroup controller, a kernel feature, a command. Empty when it can run.
func Missing(l layout.Layout) []string {
	var out []string
	for _, prog := range For(l).Programs() {
		if _, err := os.Stat(prog); err != nil {
			out = append(out, fmt.Sprintf("program %s is not built (make realnode-tools builds it)", prog))
		}
	}
	out = append(out, missingCgroups()...)
	if fsTypes, err := os.ReadFile("/proc/filesystems"); err != nil || !hasField(string(fsTypes), "overlay") {
		out = append(out, "the kernel has no overlay file system (/proc/filesystems lists no overlay): containerd's overlayfs snapshotter needs it")
	}
	if status, err := os.ReadFile("/proc/self/status"); err != nil || !strings.Contains(string(status), "\nSeccomp:") {
		out = append(out, "the kernel has no seccomp (no Seccomp line in /proc/self/status): pods' RuntimeDefault profile needs it")
	}
	for _, cmd := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(cmd); err != nil {
			out = append(out, fmt.Sprintf("command %s is not on PATH (util-linux, dash)", cmd))
		}
	}
	return out
}

func hasField(text, field string) bool {
	for _, line := range strings.Split(text, "\n") {
		for _, f := range strings.Fields(line) {
			if f == field {
				return true
			}
		}
	}
	return false
}

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	Path        string
	V2          bool
	Controllers []string // v1: the hierarchy's controllers and name=
}

// cgroupMounts reads the cgroup hierarchies mounted in this mount namespace.
func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCgroupMounts(f)
}

// parseCgroupMounts reads the cgroup hierarchies of a mountinfo file.
func parseCgroupMounts(r io.Reader) ([]cgroupMount, error) {
	var out []cgroupMount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		switch fields[sep+1] {
		case "cgroup2":
			out = append(out, cgroupMount{Path: fields[4], V2: true})
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o != "rw" && o != "ro" && o != "relatime" && !strings.Contains(o, "=") || strings.HasPrefix(o, "name=") {
					ctrls = append(ctrls, o)
				}
			}
			out = append(out, cgroupMount{Path: fields[4], Controllers: ctrls})
		}
	}
	return out, sc.Err()
}

func missingCgroups() []string {
	mounts, err := cgroupMounts()
	if err != nil {
		return []string{fmt.Sprintf("cannot read the cgroup mounts: %v", err)}
	}
	return missingControllers(mounts, func() (string, error) {
		b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return string(b), err
	})
}

// missingControllers says which required controllers the hierarchies lack; v2Controllers reads
// the unified hierarchy's cgroup.controllers when /sys/fs/cgroup is one.
func missingControllers(mounts []cgroupMount, v2Controllers func() (string, error)) []string {
	// A unified hierarchy at /sys/fs/cgroup itself is cgroup v2; anything else is v1 (or hybrid,
	// whose cgroup2 at /sys/fs/cgroup/unified holds no controllers the kubelet uses).
	for _, m := range mounts {
		if m.V2 && m.Path == "/sys/fs/cgroup" {
			b, err := v2Controllers()
			if err != nil {
				return []string{fmt.Sprintf("cannot read /sys/fs/cgroup/cgroup.controllers: %v", err)}
			}
			var out []string
			for _, c := range requiredV2Controllers {
				if !hasField(b, c) {
					out = append(out, fmt.Sprintf("cgroup v2 controller %s is not enabled at /sys/fs/cgroup (cgroup.controllers: %s)", c, strings.TrimSpace(b)))
				}
			}
			return out
		}
	}
	mounted := map[string]bool{}
	for _, m := range mounts {
		for _, c := range m.Controllers {
			mounted[c] = true
		}
	}
	var out []string
	for _, c := range requiredControllers {
		if !mounted[c] {
			out = append(out, fmt.Sprintf("cgroup v1 controller %s is not mounted (no cgroup hierarchy in /proc/self/mountinfo has it; /proc/cgroups lists what the kernel has)", c))
		}
	}
	return out
}

// cgroupRootDirs are CgroupRoot's directories, one per mounted hierarchy.
func cgroupRootDirs() ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		out = append(out, filepath.Join(m.Path, CgroupRoot))
	}
	sort.Strings(out)
	return out, nil
}

// makeCgroupRoot creates CgroupRoot in every hierarchy (the kubelet checks that it exists). A
// new cpuset starts with no CPU and no memory node: it gets its parent's.
func makeCgroupRoot() error {
	dirs, err := cgroupRootDirs()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			own := filepath.Join(d, f)
			cur, err := os.ReadFile(own)
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(own, parent, 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", own, err)
			}
		}
	}
	return nil
}

// Cgroups lists CgroupRoot and every cgroup under it, in every hierarchy, deepest first.
func Cgroups() []string {
	dirs, err := cgroupRootDirs()
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				out = append(out, path)
			}
			return nil
		})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// Processes lists the processes in the real node's cgroups: its pods' containers (and their
// sandboxes), in whatever state the kubelet and containerd left them.
func Processes() []int {
	seen := map[int]bool{}
	var out []int
	for _, cg := range Cgroups() {
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	sort.Ints(out)
	return out
}

// RemoveCgroups removes the real node's cgroups; those that still hold a process stay.
func RemoveCgroups() {
	for _, cg := range Cgroups() {
		_ = syscall.Rmdir(cg)
	}
}

// StopContainers ends every process in the real node's cgroups: SIGTERM, then SIGKILL to those
// still there after grace. A kubelet that stops leaves its pods running (a real node keeps them
// through a kubelet restart); localkube's stop ends them, as the node's shutdown would.
func StopContainers(grace time.Duration, logf func(string, ...any)) {
	pids := Processes()
	if len(pids) == 0 {
		return
	}
	// A frozen (paused) container would not act on SIGTERM; thaw every freezer cgroup first.
	for _, cg := range Cgroups() {
		if strings.Contains(cg, "/freezer/") {
			_ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for len(Processes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	left := Processes()
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(Processes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	logf("real node: %d container processes stopped (%d killed after %s)", len(pids), len(left), grace)
}

// Shims lists containerd's shim processes of this real node (its program, its socket).
func Shims(l layout.Layout) []int {
	shim := For(l).Bin("containerd-shim-runc-v2")
	procs, err := proc.List()
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range procs {
		if strings.TrimSuffix(p.Exe, " (deleted)") == shim {
			out = append(out, p.PID)
		}
	}
	return out
}

// Cleanup removes what the real node's processes leave once they are stopped: shims, mounts under
// its state (containers' root file systems, network namespaces, the kubelet's volumes), the
// shims' sockets, containerd's run directory (a stopped node starts afresh, as after a reboot:
// the kubelet creates its pods' sandboxes again) and its cgroups. It returns what could not be
// removed.
func Cleanup(l layout.Layout) []string {
	p := For(l)
	for _, pid := range Shims(l) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(Shims(l)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var problems []string
	removeShimSockets(p)
	mounts, _ := proc.MountsUnder(p.State())
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			problems = append(problems, fmt.Sprintf("umount %s: %v", m, err))
		}
	}
	if left, _ := proc.MountsUnder(p.State()); len(left) == 0 {
		if err := os.RemoveAll(p.ContainerdState()); err != nil {
			problems = append(problems, err.Error())
		}
		if err := os.RemoveAll(p.RuncRoot()); err != nil {
			problems = append(problems, err.Error())
		}
	}
	RemoveCgroups()
	for _, cg := range Cgroups() {
		problems = append(problems, "cgroup "+cg)
	}
	return problems
}

// removeShimSockets removes the sockets the shims of containerd's tasks listen on (under
// /run/containerd/s, whatever containerd's state directory): each task bundle's bootstrap.json
// names its shim's. A shim that ends cleanly removes its own; a killed one leaves it.
func removeShimSockets(p Paths) {
	bundles, _ := filepath.Glob(filepath.Join(p.ContainerdState(), "io.containerd.runtime.v2.task", "*", "*", "bootstrap.json"))
	for _, f := range bundles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var bootstrap struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(b, &bootstrap) != nil {
			continue
		}
		if sock, ok := strings.CutPrefix(bootstrap.Address, "unix://"); ok && strings.HasPrefix(sock, shimSocketDir+"/") {
			_ = os.Remove(sock)
		}
	}
}

// shimSocketDir is where containerd's shims make their sockets, whatever its state directory.
const shimSocketDir = "/run/containerd/s"

// Prepare readies the machine and the files for the real node's processes, after clearing what
// an earlier run left (containers, shims, mounts, cgroups): its configuration files, CgroupRoot,
// the node's address on the bridge (which must exist), forwarding on the bridge (the process
// kubelet turns it on too: pods of different nodes talk through the host), and the kubelet's
// root directory as a shared mount (see KubeletCmd).
func Prepare(l layout.Layout, logf func(string, ...any)) error {
	p := For(l)
	StopContainers(5*time.Second, logf)
	if problems := Cleanup(l); len(problems) > 0 {
		return fmt.Errorf("an earlier real node left: %s", strings.Join(problems, "; "))
	}
	for _, d := range []string{p.ContainerdRoot(), p.ContainerdState(), p.RuncRoot(), p.KubeletRoot(), p.KubeletCerts(),
		p.PodLogs(), p.RegistryStorage(), p.CNIIPAMDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// containerd's root holds image layers and snapshots: its own, readable by root alone.
	if err := os.Chmod(p.ContainerdRoot(), 0o700); err != nil {
		return err
	}
	if err := writeConfigs(l); err != nil {
		return err
	}
	if err := makeCgroupRoot(); err != nil {
		return err
	}
	if err := AddNodeAddress(); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+layout.Bridge+"/forwarding", []byte("1"), 0o644); err != nil {
		return err
	}
	return sharedMount(p.KubeletRoot())
}

// AddNodeAddress puts the node's address on the bridge (which must exist); one already there is
// kept. The supervisor calls it before kube-proxy starts as well as in Prepare: kube-proxy reads
// the addresses it serves NodePorts on at its first sync only (and then once an hour), and the
// real node starts after that sync.
func AddNodeAddress() error {
	if out, err := exec.Command("ip", "addr", "replace", nodeHost(), "dev", layout.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr replace %s dev %s: %v: %s", nodeHost(), layout.Bridge, err, out)
	}
	return nil
}

// sharedMount makes dir a mount point of its own (a bind mount onto itself) in a shared peer
// group, so mounts made below it in another mount namespace appear here too.
func sharedMount(dir string) error {
	mounts, err := proc.MountsUnder(dir)
	if err != nil {
		return err
	}
	mounted := false
	for _, m := range mounts {
		mounted = mounted || m == dir
	}
	if !mounted {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s onto itself: %w", dir, err)
		}
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// MarkUnavailable records why the real node does not run here (Unavailability reads it); an empty
// reason clears it.
func MarkUnavailable(l layout.Layout, reason string) error {
	p := For(l)
	if reason == "" {
		err := os.Remove(p.Unavailable())
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return writeFile(p.Unavailable(), []byte(reason))
}
