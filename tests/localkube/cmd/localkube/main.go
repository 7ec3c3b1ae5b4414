// Command localkube is the local Kubernetes control plane of the project's end-to-end tests: the
// upstream etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and kubectl in
// one binary, plus the supervisor that starts them and the LoadBalancer address allocator (see
// tests/localkube/README.md).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as upstream kube-apiserver and kube-controller-manager

	"valkey-operator.local/localkube/internal/components"
)

func main() {
	// Invoked through a symlink named kubectl, the binary is kubectl.
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(components.Kubectl(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	sub, args := os.Args[1], os.Args[2:]
	var code int
	switch sub {
	case "apiserver":
		code = components.APIServer(args)
	case "controller-manager":
		code = components.ControllerManager(args)
	case "scheduler":
		code = components.Scheduler(args)
	case "kube-proxy":
		code = components.KubeProxy(args)
	case "etcd":
		code = components.Etcd(args)
	case "loadbalancer":
		code = loadBalancerCommand(args)
	case "outside":
		code = outsideCommand(args)
	case "up", "start", "stop", "status":
		code = manage(sub, args)
	case "kubectl":
		code = components.Kubectl(args)
	case "fault":
		code = faultCommand(args)
	case "restart":
		code = restartCommand(args)
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "localkube: unknown command %q\n", sub)
		usage()
		code = 2
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: localkube <command> [flags]

commands:
  up                  run the control plane and the kubelet in the foreground (supervisor)
  start               run "up" in the background and wait until the cluster is ready
  stop                stop the supervisor and sweep anything it left
  status              show what is running
  fault ...           inject faults: partitions, paused or killed containers, stopped nodes
                      ("localkube fault --help")
  restart apiserver   restart the API server (--kill: as a crash); returns when it is ready
  outside -- CMD...   run CMD in the outside network namespace (a client outside the cluster:
                      it reaches the node addresses and the LoadBalancer pool, nothing else)
  kubectl ...         kubectl (also when invoked through a symlink named kubectl)
  apiserver ...       kube-apiserver
  controller-manager  kube-controller-manager
  scheduler ...       kube-scheduler
  kube-proxy ...      kube-proxy
  loadbalancer ...    the LoadBalancer address allocator ("localkube loadbalancer --help")
  etcd ...            a single-member etcd
`)
}
