// Package proc reads /proc to find what the local cluster left behind: processes, mounts and
// network namespaces.
package proc

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Alive reports whether a process with that pid exists (a zombie counts as gone).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state letter follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// Process is what the sweep needs to know of one process.
type Process struct {
	PID     int
	PPID    int
	Exe     string   // as the process's own mount namespace names it
	Cmdline []string // argv
	NetNS   uint64   // inode of its network namespace
	Env     []string
}

// List returns every process it can read, except the caller.
func List() ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		p, ok := read(pid)
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func read(pid int) (Process, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	p := Process{PID: pid}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return p, false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if f[0] == "Z" {
				return p, false // zombies hold nothing and cannot be killed
			}
			p.PPID, _ = strconv.Atoi(f[1])
		}
	}
	p.Exe, _ = os.Readlink(dir + "/exe")
	if b, err := os.ReadFile(dir + "/cmdline"); err == nil {
		p.Cmdline = splitNUL(b)
	}
	if b, err := os.ReadFile(dir + "/environ"); err == nil {
		p.Env = splitNUL(b)
	}
	p.NetNS = nsInode(dir + "/ns/net")
	return p, true
}

func splitNUL(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// HostNetNS is the network namespace inode of the caller, which runs in the host namespace
// (pid 1 may be outside a sandbox and unreadable).
func HostNetNS() uint64 { return nsInode("/proc/self/ns/net") }

// NetNS is a named network namespace (ip netns) and its inode.
type NetNS struct {
	Name  string
	Inode uint64
}

// NamedNetNS lists the network namespaces under /run/netns whose names start with prefix.
func NamedNetNS(prefix string) []NetNS {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	var out []NetNS
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, NetNS{Name: e.Name(), Inode: nsInode(filepath.Join("/run/netns", e.Name()))})
		}
	}
	return out
}

// MountsUnder lists the mount points at or below dir in this mount namespace, deepest first.
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// mountinfo escapes space, tab, newline and backslash as octal.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Stat holds the fields of /proc/<pid>/stat the fault commands need.
type Stat struct {
	Session int
	// StartTime is in clock ticks since boot: with the pid, it names one process for life.
	StartTime uint64
}

// ReadStat reads /proc/<pid>/stat; false when the process is gone.
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return parseStat(string(b))
}

// parseStat reads a stat line; the command name may hold spaces and parentheses, so fields are
// counted after the last ')': state is field 3, session 6, start time 22.
func parseStat(s string) (Stat, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Stat{}, false
	}
	session, err1 := strconv.Atoi(f[3])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return Stat{Session: session, StartTime: start}, true
}

// Same reports whether pid is still the process that started at start (not a reused pid).
func Same(pid int, start uint64) bool {
	st, ok := ReadStat(pid)
	return ok && st.StartTime == start && Alive(pid)
}

// PIDs lists the numeric entries of /proc.
func PIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
