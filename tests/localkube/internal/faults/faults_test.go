package faults

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"valkey-operator.local/localkube/internal/layout"
)

const host = "10.213.0.1"

func rules(t *testing.T, from, to Side, oneWay bool) string {
	t.Helper()
	rs, err := Ruleset("lkfault_t", host, from, to, oneWay)
	if err != nil {
		t.Fatalf("Ruleset: %v", err)
	}
	return rs
}

func TestTwoPodsBothWaysDropForwardedTrafficEachWay(t *testing.T) {
	rs := rules(t, Side{Pods: []string{"10.213.1.2"}}, Side{Pods: []string{"10.213.2.3"}}, false)
	for _, want := range []string{
		"table inet lkfault_t {",
		"type filter hook forward priority filter - 10; policy accept;",
		"ip saddr { 10.213.1.2 } ip daddr { 10.213.2.3 } drop",
		"ip saddr { 10.213.2.3 } ip daddr { 10.213.1.2 } drop",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("missing %q in:\n%s", want, rs)
		}
	}
	if strings.Contains(rs, "hook input") || strings.Contains(rs, "hook output") {
		t.Errorf("pod-to-pod partition touches host traffic:\n%s", rs)
	}
}

func TestOneWayFromPodToHostDropsOnlyWhatThePodSends(t *testing.T) {
	rs := rules(t, Side{Pods: []string{"10.213.1.2"}}, Side{Host: true}, true)
	if !strings.Contains(rs, "chain input") || !strings.Contains(rs, "ip saddr { 10.213.1.2 } ip daddr 10.213.0.1 drop") {
		t.Errorf("pod -> host not dropped on input:\n%s", rs)
	}
	if strings.Contains(rs, "chain output") || strings.Contains(rs, "chain forward") {
		t.Errorf("one way cut more than one way:\n%s", rs)
	}
	both := rules(t, Side{Pods: []string{"10.213.1.2"}}, Side{Host: true}, false)
	if !strings.Contains(both, "ip saddr 10.213.0.1 ip daddr { 10.213.1.2 } drop") {
		t.Errorf("host -> pod not dropped on output:\n%s", both)
	}
}

func TestAZoneCutFromTheRestKeepsTrafficInsideTheZone(t *testing.T) {
	zone := Side{Pods: []string{"10.213.2.2-10.213.2.254"}}
	rs := rules(t, zone, Side{Rest: true, Host: true}, false)
	for _, want := range []string{
		"ip saddr { 10.213.2.2-10.213.2.254 } ip daddr != { 10.213.2.2-10.213.2.254 } drop",
		"ip saddr != { 10.213.2.2-10.213.2.254 } ip daddr { 10.213.2.2-10.213.2.254 } drop",
		"ip saddr { 10.213.2.2-10.213.2.254 } ip daddr 10.213.0.1 drop",
		"ip saddr 10.213.0.1 ip daddr { 10.213.2.2-10.213.2.254 } drop",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("missing %q in:\n%s", want, rs)
		}
	}
}

func TestTheOutsideIsCutFromPodsInTheForwardHook(t *testing.T) {
	rs := rules(t, Side{Outside: true}, Side{Pods: []string{"10.213.1.2"}}, false)
	for _, want := range []string{
		"ip saddr 10.214.0.2 ip daddr { 10.213.1.2 } drop",
		"ip saddr { 10.213.1.2 } ip daddr 10.214.0.2 drop",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("missing %q in:\n%s", want, rs)
		}
	}
	if strings.Contains(rs, "hook input") || strings.Contains(rs, "hook output") {
		t.Errorf("the outside client and pods meet in the forward hook only:\n%s", rs)
	}
	// A stopped node is cut from outside clients too.
	node := rules(t, Side{Pods: []string{"10.213.4.2-10.213.4.254"}}, Side{Rest: true, Host: true, Outside: true}, false)
	if !strings.Contains(node, "ip saddr { 10.213.4.2-10.213.4.254 } ip daddr 10.214.0.2 drop") {
		t.Errorf("node cut:\n%s", node)
	}
}

func TestNonsensePartitionsAreRefused(t *testing.T) {
	pod := Side{Pods: []string{"10.213.1.2"}}
	for name, c := range map[string]struct{ from, to Side }{
		"empty side":            {pod, Side{}},
		"rest as sender":        {Side{Rest: true}, pod},
		"host from itself":      {Side{Host: true}, Side{Host: true}},
		"host and rest":         {Side{Host: true}, Side{Rest: true}},
		"outside from itself":   {Side{Outside: true}, Side{Outside: true}},
		"outside from the host": {Side{Outside: true}, Side{Host: true}},
		"outside from the rest": {Side{Outside: true}, Side{Rest: true}},
	} {
		if _, err := Ruleset("lkfault_t", host, c.from, c.to, false); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEndpointsParse(t *testing.T) {
	eps, err := ParseEndpoints("pod/ns1/web-0, zone/zone-b,host,rest,node/localkube-a,outside")
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{
		{Kind: "pod", Namespace: "ns1", Name: "web-0"},
		{Kind: "zone", Name: "zone-b"},
		{Kind: "host"},
		{Kind: "rest"},
		{Kind: "node", Name: "localkube-a"},
		{Kind: "outside"},
	}
	if len(eps) != len(want) {
		t.Fatalf("got %v", eps)
	}
	for i := range want {
		if eps[i] != want[i] {
			t.Errorf("endpoint %d: got %+v, want %+v", i, eps[i], want[i])
		}
	}
	for _, bad := range []string{"", "pod/web-0", "zone/", "hosts", "pod/a/b/c"} {
		if _, err := ParseEndpoints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if r, err := PodRange("10.213.3.1"); err != nil || r != "10.213.3.2-10.213.3.254" {
		t.Errorf("PodRange = %q, %v", r, err)
	}
}

func TestRecordsRoundTripAndAnEndedOwnerIsGone(t *testing.T) {
	l, err := layout.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	me, err := OwnerOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live := Record{ID: "a1", What: "test", Owner: me}
	ended := Record{ID: "b2", What: "test", Owner: &Proc{PID: me.PID, Start: me.Start + 1}}
	for _, r := range []Record{live, ended} {
		if err := Save(l, r); err != nil {
			t.Fatal(err)
		}
	}
	got, errs := List(l)
	if len(errs) > 0 || len(got) != 2 {
		t.Fatalf("List = %v, %v", got, errs)
	}
	if live.OwnerGone() || !ended.OwnerGone() {
		t.Errorf("OwnerGone: live %v, ended %v", live.OwnerGone(), ended.OwnerGone())
	}
	reaped, err := Reap(l)
	if err != nil || len(reaped) != 1 || reaped[0].ID != "b2" {
		t.Fatalf("Reap = %v, %v", reaped, err)
	}
	if _, err := Load(l, "b2"); err == nil {
		t.Error("the reaped record is still there")
	}
	if _, err := Load(l, "a1"); err != nil {
		t.Errorf("the live owner's record went: %v", err)
	}
	for _, bad := range []string{"", "A", "a-b", strings.Repeat("a", 33)} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q)", bad)
		}
	}
}

// The rulesets load into the kernel (checked, not applied) where nft and root are at hand.
func TestRulesetsPassNftCheck(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs nft and root")
	}
	zone := Side{Pods: []string{"10.213.2.2-10.213.2.254"}}
	pods := Side{Pods: []string{"10.213.1.2", "10.213.3.4"}}
	for _, c := range []struct {
		from, to Side
		oneWay   bool
	}{
		{zone, Side{Rest: true, Host: true}, false},
		{pods, Side{Host: true}, true},
		{Side{Host: true}, pods, false},
		{pods, zone, false},
	} {
		rs := rules(t, c.from, c.to, c.oneWay)
		cmd := exec.Command("nft", "-c", "-f", "-")
		cmd.Stdin = strings.NewReader(rs)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nft -c refused:\n%s\n%s", rs, out)
		}
	}
}
