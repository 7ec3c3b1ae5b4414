package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"valkey-operator.local/localkube/internal/control"
	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/supervisor"
)

// manageFlags are the flags of up, start, stop and status.
type manageFlags struct {
	fs        *flag.FlagSet
	dir       *string
	root      *string
	kubelet   *string
	noKubelet *bool
	realNode  *bool
	timeout   *time.Duration
}

func newManageFlags(name string) manageFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return manageFlags{
		fs:        fs,
		dir:       fs.String("dir", "", "the .localkube directory (default: $LOCALKUBE_DIR, else the one holding this binary, else ./.localkube)"),
		root:      fs.String("root", "", "the checkout whose builds (target/) it uses (default: the directory that holds --dir)"),
		kubelet:   fs.String("kubelet", "", "process kubelet binary (default: <repo>/target/debug/localkube-kubelet)"),
		noKubelet: fs.Bool("no-kubelet", false, "run the control plane only"),
		realNode:  fs.Bool("real-node", os.Getenv("LOCALKUBE_REAL_NODE") == "1", "also run the real node: kubelet, containerd, registry (default: $LOCALKUBE_REAL_NODE=1)"),
		timeout:   fs.Duration("timeout", 180*time.Second, "start: how long to wait for the cluster to be ready"),
	}
}

func (m manageFlags) parse(args []string) (layout.Layout, error) {
	if err := m.fs.Parse(args); err != nil {
		return layout.Layout{}, err
	}
	if m.fs.NArg() > 0 {
		return layout.Layout{}, fmt.Errorf("unexpected arguments: %v", m.fs.Args())
	}
	l, err := layout.Default()
	if *m.dir != "" {
		l, err = layout.New(*m.dir)
	}
	if err == nil && *m.root != "" {
		l.Root = *m.root
	}
	return l, err
}

func (m manageFlags) kubeletPath(l layout.Layout) string {
	if *m.kubelet != "" {
		return *m.kubelet
	}
	return l.DefaultKubelet()
}

func manage(sub string, args []string) int {
	m := newManageFlags(sub)
	l, err := m.parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "localkube %s: %v\n", sub, err)
		return 2
	}
	switch sub {
	case "up":
		err = supervisor.Up(supervisor.Options{Layout: l, Kubelet: m.kubeletPath(l), NoKubelet: *m.noKubelet, RealNode: *m.realNode})
	case "start":
		err = control.Start(control.StartOptions{Layout: l, Kubelet: m.kubeletPath(l), NoKubelet: *m.noKubelet, RealNode: *m.realNode, Timeout: *m.timeout})
	case "stop":
		err = control.Stop(l)
	case "status":
		want := layout.KubeletNodes
		if *m.noKubelet {
			want = 0
		}
		err = control.Status(l, want)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localkube %s: %v\n", sub, err)
		return 1
	}
	return 0
}
