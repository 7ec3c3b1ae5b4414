package faults

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"

	"valkey-operator.local/localkube/internal/layout"
)

// Side is one side of a partition: pod addresses (single addresses or ranges, as nftables set
// elements), and whether the host is in it. The host is its main address on the bridge
// (layout.APIServerIP), from which the API server answers and every host process (the operator,
// the tests) connects; the node addresses (10.213.k.1), from which the kubelet's probes come, are
// left out, as a node still reaches its own pods in a real partition.
type Side struct {
	Pods []string
	Host bool
	// Rest stands for every pod address not on the other side (only for a partition's "to").
	Rest bool
	// Outside is the outside namespace's client (layout.OutsideIP), cut from pods only: what it
	// sends through a NodePort or a LoadBalancer address crosses the forward hook after
	// kube-proxy's DNAT and before its masquerade, with its own address and the pod's.
	Outside bool
}

func (s Side) empty() bool { return len(s.Pods) == 0 && !s.Host && !s.Rest && !s.Outside }

func (s Side) String() string {
	var parts []string
	parts = append(parts, s.Pods...)
	if s.Rest {
		parts = append(parts, "every other pod")
	}
	if s.Host {
		parts = append(parts, "the host")
	}
	if s.Outside {
		parts = append(parts, "the outside namespace")
	}
	return strings.Join(parts, ", ")
}

func set(elements []string) string { return "{ " + strings.Join(elements, ", ") + " }" }

// Ruleset is the nftables table that drops traffic from one side to the other (and back, unless
// oneWay). Pod-to-pod traffic crosses the host's forward hook (the pods' network is routed through
// the bridge address); pod-to-host traffic its input hook, host-to-pod its output hook.
func Ruleset(table, hostIP string, from, to Side, oneWay bool) (string, error) {
	switch {
	case from.Outside && to.Outside:
		return "", fmt.Errorf("the outside namespace cannot be cut from itself")
	case (from.Outside && (to.Host || to.Rest)) || (to.Outside && from.Host):
		return "", fmt.Errorf(`"outside" is cut from pods, nodes or zones (not from "host" or "rest")`)
	case from.empty() || to.empty():
		return "", fmt.Errorf("a partition needs something on each side")
	case from.Rest:
		return "", fmt.Errorf(`"rest" may only stand on the receiving side`)
	case from.Host && to.Host:
		return "", fmt.Errorf("the host cannot be cut from itself")
	case from.Host && to.Rest:
		return "", fmt.Errorf(`"rest" next to the host on the other side is every pod: name them instead`)
	case len(from.Pods) == 0 && to.Rest:
		return "", fmt.Errorf(`"rest" needs pods on the other side`)
	}
	var fwd, in, out []string
	// A → B, then B → A.
	directions := []struct{ src, dst Side }{{from, to}}
	if !oneWay {
		directions = append(directions, struct{ src, dst Side }{to, from})
	}
	for _, d := range directions {
		srcPods, dstPods := d.src.Pods, d.dst.Pods
		switch {
		case d.dst.Rest && len(srcPods) > 0:
			fwd = append(fwd, fmt.Sprintf("ip saddr %s ip daddr != %s drop", set(srcPods), set(srcPods)))
		case d.src.Rest && len(dstPods) > 0:
			fwd = append(fwd, fmt.Sprintf("ip saddr != %s ip daddr %s drop", set(dstPods), set(dstPods)))
		case len(srcPods) > 0 && len(dstPods) > 0:
			fwd = append(fwd, fmt.Sprintf("ip saddr %s ip daddr %s drop", set(srcPods), set(dstPods)))
		}
		if d.dst.Host && len(srcPods) > 0 {
			in = append(in, fmt.Sprintf("ip saddr %s ip daddr %s drop", set(srcPods), hostIP))
		}
		if d.src.Host && len(dstPods) > 0 {
			out = append(out, fmt.Sprintf("ip saddr %s ip daddr %s drop", hostIP, set(dstPods)))
		}
		if d.src.Outside && len(dstPods) > 0 {
			fwd = append(fwd, fmt.Sprintf("ip saddr %s ip daddr %s drop", layout.OutsideIP, set(dstPods)))
		}
		if d.dst.Outside && len(srcPods) > 0 {
			fwd = append(fwd, fmt.Sprintf("ip saddr %s ip daddr %s drop", set(srcPods), layout.OutsideIP))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", table)
	for _, c := range []struct {
		hook  string
		rules []string
	}{{"forward", fwd}, {"input", in}, {"output", out}} {
		if len(c.rules) == 0 {
			continue
		}
		// Before any other filter, so nothing accepts the traffic first.
		fmt.Fprintf(&b, "  chain %s {\n    type filter hook %s priority filter - 10; policy accept;\n", c.hook, c.hook)
		for _, r := range c.rules {
			fmt.Fprintf(&b, "    %s\n", r)
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

func nft(stdin string, args ...string) error {
	cmd := exec.Command("nft", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors := strings.TrimSpace(stderr.String()); errors != "" {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, errors)
		}
		return fmt.Errorf("nft %s: %w (is nftables installed? make localkube-prereqs)", strings.Join(args, " "), err)
	}
	return nil
}

// AddTable loads a ruleset (one table) into the kernel.
func AddTable(ruleset string) error { return nft(ruleset, "-f", "-") }

// DeleteTable removes a fault's table; a table already gone is not an error.
func DeleteTable(table string) error {
	err := nft("", "delete", "table", "inet", table)
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil
	}
	return err
}

// Tables lists the fault tables in the host namespace (none when nft is missing).
func Tables() []string {
	out, err := exec.Command("nft", "list", "tables", "inet").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" && strings.HasPrefix(f[2], TablePrefix) {
			tables = append(tables, f[2])
		}
	}
	return tables
}
