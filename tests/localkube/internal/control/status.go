package control

import (
	"context"
	"fmt"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
	"valkey-operator.local/localkube/internal/supervisor"
)

// Status prints whether the supervisor runs and what the API reports; it returns an error when
// the cluster is not running and ready.
func Status(l layout.Layout, wantNodes int) error {
	pid, err := supervisor.ReadPID(l.PIDFile())
	if err != nil || !proc.Alive(pid) {
		left, ferr := Find(l)
		if ferr == nil && !left.Empty() {
			fmt.Printf("not running, but left behind:\n  %s\n", left)
		} else {
			fmt.Println("not running")
		}
		return fmt.Errorf("%w: not running", ErrNotReady)
	}
	fmt.Printf("supervisor: pid %d\n", pid)
	c, err := newClient(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := observe(ctx, c, nil)
	what, _, ok := r.stage(wantNodes)
	fmt.Printf("api server: %s\nnodes Ready: %d\nstate: %s\n", layout.APIServerURL, r.readyNodes, what)
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotReady, what)
	}
	return nil
}
