// Package components runs the upstream Kubernetes and etcd programs from one multicall binary.
//
// Each component runs in its own OS process: the upstream commands install process-wide signal
// handlers (a second install panics), global feature gates and logging flags, and the scheduler
// calls os.Exit when it loses leadership, so they cannot share one process.
package components

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream registers it
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// The cobra commands read os.Args[1:]; the multicall binary strips its own sub-command name first
// so that flag parsing and kubectl's plugin lookup see exactly what the upstream binary would.
func setArgs(name string, args []string) {
	os.Args = append([]string{name}, args...)
}

// APIServer runs kube-apiserver with the given flags and returns its exit code.
func APIServer(args []string) int {
	setArgs("kube-apiserver", args)
	return cli.Run(apiserver.NewAPIServerCommand())
}

// ControllerManager runs kube-controller-manager with the given flags and returns its exit code.
func ControllerManager(args []string) int {
	setArgs("kube-controller-manager", args)
	return cli.Run(controllermanager.NewControllerManagerCommand())
}

// Scheduler runs kube-scheduler with the given flags and returns its exit code.
func Scheduler(args []string) int {
	setArgs("kube-scheduler", args)
	return cli.Run(scheduler.NewSchedulerCommand())
}

// KubeProxy runs kube-proxy with the given flags and returns its exit code.
func KubeProxy(args []string) int {
	setArgs("kube-proxy", args)
	return cli.Run(proxy.NewProxyCommand())
}
