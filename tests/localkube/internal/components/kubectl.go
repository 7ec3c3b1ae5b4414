package components

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

// Kubectl runs kubectl with the given arguments and returns its exit code. Cloud auth plugins are
// left out: the local cluster uses client certificates only.
func Kubectl(args []string) int {
	setArgs("kubectl", args)
	// As upstream: verbosity must be known before the command is built (plugins, .kuberc).
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err) // prints the error the way kubectl does and exits non-zero
	}
	return 0
}
