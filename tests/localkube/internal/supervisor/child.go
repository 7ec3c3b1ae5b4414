package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// child is one supervised OS process in its own process group, logging to its own file. It may
// be started again after a deliberate stop (a restart of the API server).
type child struct {
	name        string
	path        string
	args        []string
	env         []string // added to the supervisor's environment
	logPath     string
	stopTimeout time.Duration

	cur *run // the latest start
}

// run is one start of a child.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, valid once done is closed
	// stopping is set before the supervisor stops the process on purpose, so its exit is not
	// taken for a crash.
	stopping atomic.Bool
}

// exit reports a child's end to the supervisor loop.
type exit struct {
	name string
	err  error
	// deliberate: the supervisor stopped it (a restart), nothing to react to.
	deliberate bool
}

func (c *child) start(exits chan<- exit) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "\n=== %s localkube: starting %s %s\n", time.Now().Format(time.RFC3339), c.path, strings.Join(c.args, " "))
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = childEnv(c.env)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C on the supervisor's terminal reaches only the supervisor,
	// which then stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	c.cur = r
	go func() {
		r.err = cmd.Wait()
		logFile.Close()
		close(r.done)
		exits <- exit{name: c.name, err: r.err, deliberate: r.stopping.Load()}
	}()
	return nil
}

func (c *child) pid() int {
	if c.cur == nil {
		return 0
	}
	return c.cur.cmd.Process.Pid
}

func (c *child) running() bool {
	if c.cur == nil {
		return false
	}
	select {
	case <-c.cur.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process (not its group: the kubelet stops its own pods), waits up to
// stopTimeout, then kills the whole group.
func (c *child) stop(logf func(string, ...any)) {
	c.end(logf, syscall.SIGTERM, c.stopTimeout)
}

// end stops the process with sig (SIGKILL for a crash), waits up to timeout, then kills the
// whole group.
func (c *child) end(logf func(string, ...any), sig syscall.Signal, timeout time.Duration) {
	if !c.running() {
		return
	}
	r := c.cur
	r.stopping.Store(true)
	pid := r.cmd.Process.Pid
	start := time.Now()
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		logf("%s: %v: %v", c.name, sig, err)
	}
	select {
	case <-r.done:
		logf("%s stopped in %s", c.name, time.Since(start).Round(time.Millisecond))
	case <-time.After(timeout):
		logf("%s did not stop within %s: killing process group %d", c.name, timeout, pid)
	}
	// Anything left in the group (helpers the child started) goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		logf("%s: still not reaped 5s after SIGKILL", c.name)
	}
}
