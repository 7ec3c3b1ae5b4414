package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
)

// Containers returns the running containers of a pod as the process kubelet records them
// (kubelet/pods/<uid>/pids/<container>.pid: "<pid> <start time>"), by container name. Each
// container's main process leads its own session, which holds the whole process tree of the
// container.
func Containers(l layout.Layout, podUID string) (map[string]Proc, error) {
	dir := filepath.Join(l.PodDir(podUID), "pids")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("no running container recorded for pod %s: %w", podUID, err)
	}
	out := map[string]Proc{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || !proc.Same(pid, start) {
			continue
		}
		out[name] = Proc{PID: pid, Start: start}
	}
	return out, nil
}

// Sessions lists the live processes whose session is one of the given leaders.
func Sessions(leaders []Proc) []Proc {
	want := map[int]bool{}
	for _, l := range leaders {
		want[l.PID] = true
	}
	var out []Proc
	for _, pid := range proc.PIDs() {
		if st, ok := proc.ReadStat(pid); ok && want[st.Session] {
			out = append(out, Proc{PID: pid, Start: st.StartTime})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// signal sends sig to p unless its pid now names another process.
func signal(p Proc, sig syscall.Signal) error {
	if !proc.Same(p.PID, p.Start) {
		return nil
	}
	return syscall.Kill(p.PID, sig)
}

// Pause stops every process of the given containers' sessions. A process may fork while the
// others are being stopped, so it goes round until a round finds nothing new.
func Pause(containers []Proc) ([]Proc, error) {
	stopped := map[int]Proc{}
	for round := 0; round < 5; round++ {
		fresh := 0
		for _, p := range Sessions(containers) {
			if _, done := stopped[p.PID]; done {
				continue
			}
			if err := signal(p, syscall.SIGSTOP); err != nil {
				return values(stopped), fmt.Errorf("SIGSTOP %d: %w", p.PID, err)
			}
			stopped[p.PID] = p
			fresh++
		}
		if fresh == 0 {
			break
		}
	}
	return values(stopped), nil
}

func values(m map[int]Proc) []Proc {
	out := make([]Proc, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Continue sends SIGCONT to processes stopped by Pause that still exist.
func Continue(paused []Proc) {
	for _, p := range paused {
		_ = signal(p, syscall.SIGCONT)
	}
}

// Kill ends a container as an out-of-memory kill or a crash would: SIGKILL to its whole process
// group, led by its main process. The kubelet then restarts it in the same pod, by its policy.
func Kill(main Proc) error {
	if !proc.Same(main.PID, main.Start) {
		return fmt.Errorf("process %d has already ended", main.PID)
	}
	return syscall.Kill(-main.PID, syscall.SIGKILL)
}
