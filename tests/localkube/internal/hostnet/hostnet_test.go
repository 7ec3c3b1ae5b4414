package hostnet

import (
	"strings"
	"testing"
)

func TestRulesetFencesTheOutsideAndMasqueradesHairpins(t *testing.T) {
	r := Ruleset([]string{"10.213.1.1", "10.213.2.1"}, "10.213.255.0/24")
	for _, want := range []string{
		"table inet localkube {",
		"elements = { 10.213.1.1, 10.213.2.1, 10.213.255.0/24 }",
		// Before kube-proxy's DNAT (dstnat, -100): the address the client asked for.
		"type filter hook prerouting priority mangle; policy accept;",
		`iifname "lkout0" ct state established,related accept`,
		`iifname "lkout0" ip daddr @outside-reachable accept`,
		`iifname "lkout0" reject with icmpx admin-prohibited`,
		// Each pod address of each node, paired with itself.
		"10.213.1.2 . 10.213.1.2, ",
		"10.213.2.254 . 10.213.2.254 }",
		"ct status dnat ip saddr . ip daddr @pod-to-itself masquerade",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("ruleset lacks %q", want)
		}
	}
	if n := strings.Count(r, " . 10.213."); n != 2*253 {
		t.Errorf("%d hairpin pairs, want %d", n, 2*253)
	}
	if strings.Contains(r, "10.213.1.1 . ") || strings.Contains(r, "10.213.1.255 . ") {
		t.Error("a node address or a broadcast address taken for a pod")
	}
	// The refusal comes last, after both accepts.
	if strings.Index(r, "reject") < strings.Index(r, "@outside-reachable accept") {
		t.Errorf("refusal before the accepts:\n%s", r)
	}
}
