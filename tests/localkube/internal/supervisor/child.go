package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// child is one supervised OS process in its own process group, logging to its own file.
type child struct {
	name        string
	path        string
	args        []string
	logPath     string
	stopTimeout time.Duration

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, valid once done is closed
}

// exit reports a child's end to the supervisor loop.
type exit struct {
	name string
	err  error
}

func (c *child) start(exits chan<- exit) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "\n=== %s localkube: starting %s %s\n", time.Now().Format(time.RFC3339), c.path, strings.Join(c.args, " "))
	cmd := exec.Command(c.path, c.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C on the supervisor's terminal reaches only the supervisor,
	// which then stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	c.cmd = cmd
	c.done = make(chan struct{})
	go func() {
		c.err = cmd.Wait()
		logFile.Close()
		close(c.done)
		exits <- exit{name: c.name, err: c.err}
	}()
	return nil
}

func (c *child) running() bool {
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process (not its group: the kubelet stops its own pods), waits up to
// stopTimeout, then kills the whole group.
func (c *child) stop(logf func(string, ...any)) {
	if !c.running() {
		return
	}
	pid := c.cmd.Process.Pid
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		logf("%s: SIGTERM: %v", c.name, err)
	}
	select {
	case <-c.done:
		logf("%s stopped in %s", c.name, time.Since(start).Round(time.Millisecond))
	case <-time.After(c.stopTimeout):
		logf("%s did not stop within %s: killing process group %d", c.name, c.stopTimeout, pid)
	}
	// Anything left in the group (helpers the child started) goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		logf("%s: still not reaped 5s after SIGKILL", c.name)
	}
}
