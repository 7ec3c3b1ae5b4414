package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/lb"
)

// classPools is the repeatable --class-pool CLASS=FIRST-LAST flag.
type classPools map[string]string

func (c classPools) String() string { return fmt.Sprint(map[string]string(c)) }

func (c classPools) Set(v string) error {
	class, pool, ok := strings.Cut(v, "=")
	if !ok || class == "" {
		return fmt.Errorf("%q is not CLASS=FIRST-LAST (an empty range: no addresses)", v)
	}
	c[class] = pool
	return nil
}

// loadBalancerCommand is "localkube loadbalancer": the LoadBalancer address allocator, a child of
// the supervisor like the other components.
func loadBalancerCommand(args []string) int {
	fs := flag.NewFlagSet("loadbalancer", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (required)")
	class := fs.String("class", layout.LBClass, "the allocator's own loadBalancerClass, served from --pool like Services of no class")
	pool := fs.String("pool", layout.LBPoolFirst+"-"+layout.LBPoolLast, "addresses for Services of no class and of --class: FIRST-LAST")
	extra := classPools{}
	fs.Var(extra, "class-pool", "another class served, from its own pool: CLASS=FIRST-LAST (CLASS= for none); repeatable")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger := log.New(os.Stderr, "loadbalancer: ", log.LstdFlags)
	if *kubeconfig == "" {
		logger.Print("--kubeconfig is required")
		return 2
	}
	def, err := lb.ParsePool("default", *pool)
	if err != nil {
		logger.Print(err)
		return 2
	}
	cfg := lb.Config{Class: *class, Default: def, Classes: map[string]lb.Pool{}}
	for c, r := range extra {
		p, err := lb.ParsePool(c, r)
		if err != nil {
			logger.Print(err)
			return 2
		}
		cfg.Classes[c] = p
	}
	client, err := clientFromKubeconfig(*kubeconfig)
	if err != nil {
		logger.Print(err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := lb.Run(ctx, client, cfg, logger); err != nil {
		logger.Print(err)
		return 1
	}
	logger.Print("stopped")
	return 0
}
