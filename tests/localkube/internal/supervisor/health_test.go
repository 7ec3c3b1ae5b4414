package supervisor

import (
	"strings"
	"testing"
)

func TestProxySyncedNeedsASampleOfTheLastSync(t *testing.T) {
	before := `# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 1.7e+09
`
	if err := proxySyncedIn(strings.NewReader(before)); err == nil {
		t.Error("synced before any sync")
	}
	after := before + `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7649e+09
`
	if err := proxySyncedIn(strings.NewReader(after)); err != nil {
		t.Errorf("not synced after an IPv4 sync: %v", err)
	}
	onlyV6 := before + `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7e+09
`
	if err := proxySyncedIn(strings.NewReader(onlyV6)); err == nil {
		t.Error("an IPv6 sync is not the IPv4 rules")
	}
}

func TestCorefileServesTheClusterDomainFromTheHost(t *testing.T) {
	c := Corefile("/x/.localkube/kubeconfig")
	for _, want := range []string{
		"cluster.local:20053 in-addr.arpa:20053 ip6.arpa:20053 {",
		"bind 10.213.0.1",
		"ready 127.0.0.1:20181",
		"kubeconfig /x/.localkube/kubeconfig",
		"pods verified",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "forward") {
		t.Error("nothing is forwarded off the machine")
	}
}
