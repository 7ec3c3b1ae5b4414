// Command pause is the process of a pod sandbox on the real node: it holds the pod's namespaces,
// does nothing else until it is told to stop (SIGINT or SIGTERM), and, as PID 1 of a pod whose
// containers share its PID namespace, reaps the orphans it inherits. The images are built here
// (no registry outside the machine can be reached), so the sandbox image is too.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "1"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause", version)
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has ended; one SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
