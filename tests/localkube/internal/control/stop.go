package control

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
	"valkey-operator.local/localkube/internal/supervisor"
)

// The supervisor gives the kubelet 30 s and each other component 15–30 s.
const supervisorStopTimeout = 150 * time.Second

// ErrNotClean is returned when something is still there after the sweep.
var ErrNotClean = errors.New("leftovers remain after stop")

// Stop stops the supervisor, then sweeps and reports what was left.
func Stop(l layout.Layout) error {
	t0 := time.Now()
	pid, err := supervisor.ReadPID(l.PIDFile())
	switch {
	case err == nil && proc.Alive(pid):
		fmt.Printf("stopping supervisor (pid %d)\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		deadline := time.Now().Add(supervisorStopTimeout)
		for proc.Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if proc.Alive(pid) {
			fmt.Printf("supervisor still running after %s: killing it\n", supervisorStopTimeout)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		} else {
			fmt.Printf("supervisor stopped in %s\n", time.Since(t0).Round(time.Millisecond))
		}
	case err == nil:
		fmt.Printf("supervisor (pid %d) was not running\n", pid)
	default:
		fmt.Println("no supervisor pid file")
	}
	_ = os.Remove(l.PIDFile())

	found, remaining, err := Sweep(l)
	if err != nil {
		return err
	}
	if found.Empty() {
		fmt.Println("sweep: nothing left behind")
	} else {
		fmt.Printf("sweep removed:\n  %s\n", found)
	}
	if !remaining.Empty() {
		return fmt.Errorf("%w:\n  %s", ErrNotClean, remaining)
	}
	fmt.Printf("stopped and clean in %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}
