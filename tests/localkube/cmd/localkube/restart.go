package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
	"valkey-operator.local/localkube/internal/supervisor"
)

// restartCommand is "localkube restart apiserver [--kill]": the supervisor restarts the API server
// and this command returns once a new one answers /readyz.
func restartCommand(args []string) int {
	fs := flag.NewFlagSet("restart", flag.ContinueOnError)
	dir := fs.String("dir", "", "the .localkube directory")
	kill := fs.Bool("kill", false, "SIGKILL the API server (a crash) instead of SIGTERM")
	timeout := fs.Duration("timeout", 120*time.Second, "how long to wait for the new API server")
	if len(args) == 0 || args[0] != "apiserver" {
		fmt.Fprintln(os.Stderr, "usage: localkube restart apiserver [--kill] [--timeout 120s] [--dir DIR]")
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	l, err := layout.Default()
	if *dir != "" {
		l, err = layout.New(*dir)
	}
	if err == nil {
		err = restartAPIServer(l, *kill, *timeout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localkube restart apiserver: %v\n", err)
		return 1
	}
	return 0
}

// apiserverPID finds the running API server of this cluster.
func apiserverPID(l layout.Layout) int {
	procs, err := proc.List()
	if err != nil {
		return 0
	}
	own := filepath.Join(l.Bin(), "localkube")
	if real, err := filepath.EvalSymlinks(own); err == nil {
		own = real
	}
	for _, p := range procs {
		exe := strings.TrimSuffix(p.Exe, " (deleted)")
		if exe == own && len(p.Cmdline) > 1 && p.Cmdline[1] == "apiserver" {
			return p.PID
		}
	}
	return 0
}

func restartAPIServer(l layout.Layout, kill bool, timeout time.Duration) error {
	sup, err := supervisor.ReadPID(l.PIDFile())
	if err != nil || !proc.Alive(sup) {
		return fmt.Errorf("no supervisor running (%s)", l.PIDFile())
	}
	before := apiserverPID(l)
	if before == 0 {
		return fmt.Errorf("no API server process found")
	}
	sig := syscall.SIGUSR1
	if kill {
		sig = syscall.SIGUSR2
	}
	t0 := time.Now()
	if err := syscall.Kill(sup, sig); err != nil {
		return err
	}
	c, err := clientOf(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		after := apiserverPID(l)
		if after != 0 && after != before && proc.Alive(after) {
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(qctx)
			qcancel()
			if err == nil && string(body) == "ok" {
				fmt.Fprintf(os.Stderr, "API server restarted (pid %d -> %d), ready in %s\n", before, after, time.Since(t0).Round(100*time.Millisecond))
				return nil
			}
		}
		if !proc.Alive(sup) {
			return fmt.Errorf("the supervisor ended during the restart: see %s", l.Log("localkube"))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no new API server ready within %s: see %s", timeout, l.Log("apiserver"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
