package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"valkey-operator.local/localkube/internal/faults"
	"valkey-operator.local/localkube/internal/layout"
)

const faultUsage = `usage: localkube fault <command> [flags]

Each command that makes a fault prints its id on stdout; "undo ID" ends it. With --owner PID the
fault also ends when that process ends (the supervisor checks every 2 s); "localkube stop" and
"start" end every fault.

  partition --from EPS --to EPS [--one-way]   drop traffic between two sets of endpoints
  pause pod/NS/NAME                           SIGSTOP every process of the pod's containers
  kill pod/NS/NAME [--container NAME]         SIGKILL a container; the kubelet restarts it in place
  node-stop NODE --mode crash|partition       stop a node's kubelet (NotReady, pods stay
                                              Terminating), cut its pods off; crash also kills them
  undo ID...                                  end faults
  list                                        the faults in force
  sweep                                       end every fault

Endpoints (comma-separated): pod/NAMESPACE/NAME, node/NAME, zone/ZONE, host (the host's bridge
address, where the API server and every host process are), rest (every pod not on the other side),
outside (the outside namespace's client, against pods, nodes or zones).
Common flags: --owner PID, --id ID (instead of a random one), --dir DIR.
`

func faultCommand(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, faultUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("fault "+sub, flag.ContinueOnError)
	dir := fs.String("dir", "", "the .localkube directory")
	owner := fs.Int("owner", 0, "end the fault when this process ends")
	id := fs.String("id", "", "the fault's id (default: random)")
	from := fs.String("from", "", "partition: endpoints on one side")
	to := fs.String("to", "", "partition: endpoints on the other side")
	oneWay := fs.Bool("one-way", false, "partition: drop only what goes from --from to --to")
	container := fs.String("container", "", "kill: the container (default: the pod's only one)")
	mode := fs.String("mode", "", "node-stop: crash or partition")
	timeout := fs.Duration("timeout", 60*time.Second, "how long the command may take")
	fs.Usage = func() { fmt.Fprint(os.Stderr, faultUsage) }
	// Flags may follow the positional arguments (undo ID --dir D).
	var positional []string
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	var l layout.Layout
	var err error
	if *dir != "" {
		l, err = layout.New(*dir)
	} else {
		l, err = layout.Default()
	}
	if err != nil {
		return fail(sub, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	in := faults.Injector{Layout: l, ID: *id}
	if *owner != 0 {
		if in.Owner, err = faults.OwnerOf(*owner); err != nil {
			return fail(sub, err)
		}
	}
	needClient := func() bool {
		if in.Client != nil {
			return true
		}
		c, err := clientOf(l)
		if err != nil {
			fail(sub, err)
			return false
		}
		in.Client = c
		return true
	}
	onePod := func() (ns, name string, ok bool) {
		if len(positional) != 1 {
			fail(sub, fmt.Errorf("name one pod: pod/NAMESPACE/NAME"))
			return "", "", false
		}
		eps, err := faults.ParseEndpoints(positional[0])
		if err != nil || len(eps) != 1 || eps[0].Kind != "pod" {
			fail(sub, fmt.Errorf("%q is not pod/NAMESPACE/NAME", positional[0]))
			return "", "", false
		}
		return eps[0].Namespace, eps[0].Name, true
	}
	report := func(r faults.Record, err error) int {
		if err != nil {
			return fail(sub, err)
		}
		fmt.Println(r.ID)
		fmt.Fprintf(os.Stderr, "fault %s in force: %s\n", r.ID, r.What)
		return 0
	}

	switch sub {
	case "partition":
		a, err := faults.ParseEndpoints(*from)
		if err != nil {
			return fail(sub, fmt.Errorf("--from: %w", err))
		}
		b, err := faults.ParseEndpoints(*to)
		if err != nil {
			return fail(sub, fmt.Errorf("--to: %w", err))
		}
		if !needClient() {
			return 1
		}
		return report(in.Partition(ctx, a, b, *oneWay))
	case "pause":
		ns, name, ok := onePod()
		if !ok || !needClient() {
			return 1
		}
		return report(in.Pause(ctx, ns, name))
	case "kill":
		ns, name, ok := onePod()
		if !ok || !needClient() {
			return 1
		}
		c, err := in.Kill(ctx, ns, name, *container)
		if err != nil {
			return fail(sub, err)
		}
		fmt.Fprintf(os.Stderr, "killed container %s of pod %s/%s\n", c, ns, name)
		return 0
	case "node-stop":
		if len(positional) != 1 {
			return fail(sub, fmt.Errorf("name one node"))
		}
		if !needClient() {
			return 1
		}
		return report(in.StopNode(ctx, positional[0], faults.StopMode(*mode)))
	case "undo":
		if len(positional) == 0 {
			return fail(sub, fmt.Errorf("name the faults to undo"))
		}
		code := 0
		for _, id := range positional {
			r, err := faults.Load(l, id)
			if err == nil {
				err = faults.Undo(l, r)
			}
			if err != nil {
				code = fail(sub, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "fault %s undone: %s\n", r.ID, r.What)
		}
		return code
	case "list":
		records, errs := faults.List(l)
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tAGE\tOWNER\tWHAT")
		for _, r := range records {
			owner := "-"
			if r.Owner != nil {
				owner = fmt.Sprint(r.Owner.PID)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, time.Since(r.Created).Round(time.Second), owner, r.What)
		}
		w.Flush()
		if len(errs) > 0 {
			return fail(sub, errors.Join(errs...))
		}
		return 0
	case "sweep":
		if err := faults.Sweep(l); err != nil {
			return fail(sub, err)
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "localkube fault: unknown command %q\n%s", sub, faultUsage)
		return 2
	}
}

func fail(sub string, err error) int {
	fmt.Fprintf(os.Stderr, "localkube fault %s: %s\n", sub, strings.TrimSpace(err.Error()))
	return 1
}

func clientOf(l layout.Layout) (*kubernetes.Clientset, error) {
	return clientFromKubeconfig(l.Kubeconfig())
}

func clientFromKubeconfig(path string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return kubernetes.NewForConfig(cfg)
}
