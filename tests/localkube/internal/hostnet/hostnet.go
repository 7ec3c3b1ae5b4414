// Package hostnet sets up what the host's network needs beside the bridge for Services: a route
// to the service CIDR, the outside network namespace (a client outside the cluster), and
// localkube's nftables table, which keeps that namespace to the node addresses and the
// LoadBalancer pool and masquerades the hairpin connections kube-proxy leaves out; and it removes
// them, with the tables kube-proxy leaves behind.
package hostnet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/realnode"
)

// KubeProxyTables are the nftables tables kube-proxy's nftables mode writes ("family name"); it
// leaves them in place when it exits, so the supervisor and the sweep delete them.
var KubeProxyTables = []string{"ip kube-proxy", "ip6 kube-proxy"}

// Up adds the route to the service CIDR (through the bridge, from the bridge's address, so the
// host's own connections to ClusterIPs come from 10.213.0.1, which pods can answer and faults can
// name as "host"), then creates the outside namespace and localkube's table afresh.
func Up() error {
	if err := run("ip", "route", "replace", layout.ServiceCIDR, "dev", layout.Bridge, "src", layout.APIServerIP); err != nil {
		return err
	}
	if err := OutsideDown(); err != nil {
		return err
	}
	if err := deleteTable("inet " + layout.NFTable); err != nil {
		return err
	}
	if err := outsideUp(); err != nil {
		return err
	}
	// The real node's address and pods too, whether or not it runs: an outside client reaches a
	// NodePort on every node, and a real-node pod may reach a Service backed by itself.
	return nft(Ruleset(append(layout.NodeIPs(), realnode.NodeIP), layout.LBPoolCIDR), "-f", "-")
}

// outsideUp creates namespace lk-outside with a veth to the host (lkout0, 10.214.0.1/24; inside
// eth0, 10.214.0.2/24, default route through the host) and forwarding on from it.
func outsideUp() error {
	ns := layout.OutsideNetns
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", layout.OutsideLink, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", layout.OutsideGateway + "/24", "dev", layout.OutsideLink},
		{"ip", "link", "set", layout.OutsideLink, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", layout.OutsideIP + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		// A default route, as a real client has: what it may not reach, the fence refuses.
		{"ip", "-n", ns, "route", "add", "default", "via", layout.OutsideGateway},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return fmt.Errorf("outside namespace: %w", err)
		}
	}
	// The kernel forwards what arrives on an interface whose forwarding is on (only this one and
	// the bridge: the machine's own interfaces stay as they are).
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+layout.OutsideLink+"/forwarding", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("outside namespace: forwarding: %w", err)
	}
	return nil
}

// Ruleset is localkube's table, with two jobs.
//
// The fence lets the outside namespace reach only the node addresses and the LoadBalancer pool
// (and answer connections a pod opened to it). It runs before kube-proxy's DNAT (priority
// mangle, -150, against dstnat's -100), so it sees the address the client asked for: a NodePort
// on a node address passes, a ClusterIP or a pod IP does not. Refused rather than dropped, so a
// test sees the failure at once instead of at its deadline.
//
// Hairpin: a pod that reaches a Service backed by itself sends a packet that comes back to it
// with its own address as source, which it would drop; kube-proxy masquerades such connections
// only for the pods of its own node (it expects one kube-proxy per node), and here one kube-proxy
// serves every node. So every connection DNATed from a pod address back to the same address is
// masqueraded here: a set of each pod address paired with itself, on every node.
func Ruleset(nodeIPs []string, pool string) string {
	reachable := append(append([]string{}, nodeIPs...), pool)
	var pairs []string
	for _, n := range nodeIPs {
		prefix := n[:strings.LastIndex(n, ".")+1]
		for h := 2; h <= 254; h++ {
			pairs = append(pairs, fmt.Sprintf("%[1]s%[2]d . %[1]s%[2]d", prefix, h))
		}
	}
	return fmt.Sprintf(`table inet %[1]s {
  set outside-reachable {
    type ipv4_addr; flags interval
    elements = { %[2]s }
  }
  chain outside-fence {
    type filter hook prerouting priority mangle; policy accept;
    iifname "%[3]s" ct state established,related accept
    iifname "%[3]s" ip daddr @outside-reachable accept
    iifname "%[3]s" reject with icmpx admin-prohibited
  }
  set pod-to-itself {
    type ipv4_addr . ipv4_addr
    elements = { %[4]s }
  }
  chain hairpin {
    type nat hook postrouting priority srcnat; policy accept;
    ct status dnat ip saddr . ip daddr @pod-to-itself masquerade
  }
}
`, layout.NFTable, strings.Join(reachable, ", "), layout.OutsideLink, strings.Join(pairs, ", "))
}

// OutsideDown deletes the outside namespace (its veth goes with it); what is already gone is not
// an error.
func OutsideDown() error {
	var errs []string
	if netnsExists(layout.OutsideNetns) {
		if err := run("ip", "netns", "delete", layout.OutsideNetns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// A veth whose namespace end was moved away may outlive a namespace deleted by others.
	if linkExists(layout.OutsideLink) {
		// The kernel may be removing it with the namespace right now.
		if err := run("ip", "link", "del", layout.OutsideLink); err != nil && linkExists(layout.OutsideLink) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// DeleteKubeProxyTables removes kube-proxy's rules: without kube-proxy they would still answer
// for ClusterIPs and NodePorts, and greet the next cluster with stale Services.
func DeleteKubeProxyTables() error {
	var errs []string
	for _, t := range KubeProxyTables {
		if err := deleteTable(t); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Down removes everything Up made and kube-proxy's tables; the service route goes with the
// bridge.
func Down() error {
	var errs []string
	for _, err := range []error{OutsideDown(), deleteTable("inet " + layout.NFTable), DeleteKubeProxyTables()} {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Leftovers lists what Up or kube-proxy left: localkube's and kube-proxy's tables, the outside
// link (the namespace itself is one of the lk-* namespaces the sweep lists).
func Leftovers() []string {
	var out []string
	tables := Tables()
	for _, t := range append([]string{"inet " + layout.NFTable}, KubeProxyTables...) {
		if tables[t] {
			out = append(out, "nftables table "+t)
		}
	}
	if linkExists(layout.OutsideLink) {
		out = append(out, "link "+layout.OutsideLink)
	}
	return out
}

// Tables lists the host's nftables tables as "family name" (none when nft is missing).
func Tables() map[string]bool {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	tables := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" {
			tables[f[1]+" "+f[2]] = true
		}
	}
	return tables
}

func deleteTable(familyName string) error {
	if !Tables()[familyName] {
		return nil
	}
	return nft("", append([]string{"delete", "table"}, strings.Fields(familyName)...)...)
}

func netnsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func run(program string, args ...string) error {
	out, err := exec.Command(program, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", program, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nft(stdin string, args ...string) error {
	cmd := exec.Command("nft", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
