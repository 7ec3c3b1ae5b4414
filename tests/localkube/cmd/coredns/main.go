// Command coredns is CoreDNS, from its Go module, with only the plugins localkube's Corefile uses
// (the supervisor writes it: tests/localkube/README.md). It is a binary of its own rather than a
// command of the localkube binary because CoreDNS's packages set process-wide state as they load
// (Go flags such as -version and -p, which kube-proxy would take into its own flags, Caddy's
// registries, Prometheus' default registry), which every component's process would otherwise carry.
package main

import (
	// The plugins of the Corefile; Caddy registers each as its package loads.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
