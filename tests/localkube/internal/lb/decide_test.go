package lb

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const class = "localkube.io/loadbalancer"

func cfg(t *testing.T, pool string, classes map[string]string) Config {
	t.Helper()
	def, err := ParsePool("default", pool)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Class: class, Default: def, Classes: map[string]Pool{}}
	for name, r := range classes {
		p, err := ParsePool(name, r)
		if err != nil {
			t.Fatal(err)
		}
		c.Classes[name] = p
	}
	return c
}

// svc is a LoadBalancer Service created `age` seconds after the epoch, with class (or none) and
// the ingress IPs of its status.
func svc(name string, age int, lbClass string, ingress ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(age), 0)),
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	if lbClass != "" {
		s.Spec.LoadBalancerClass = &lbClass
	}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress,
			corev1.LoadBalancerIngress{IP: ip, IPMode: ptrTo(corev1.LoadBalancerIPModeVIP)})
	}
	return s
}

// apply writes the changes into the Services, as the API server would.
func apply(svcs []*corev1.Service, changes []Change) {
	for _, c := range changes {
		for _, s := range svcs {
			if s.UID == c.UID {
				s.Status.LoadBalancer.Ingress = c.Ingress
			}
		}
	}
}

func ingressOf(s *corev1.Service) string {
	var ips []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	return strings.Join(ips, ",")
}

func TestParsePool(t *testing.T) {
	p, err := ParsePool("p", "10.0.0.250-10.0.1.3")
	if err != nil || p.Size() != 10 {
		t.Fatalf("size %d, err %v", p.Size(), err)
	}
	if one, err := ParsePool("one", "10.1.1.1"); err != nil || one.Size() != 1 {
		t.Fatalf("a single address: size %d, err %v", one.Size(), err)
	}
	if none, err := ParsePool("none", ""); err != nil || none.Size() != 0 || none.Contains(p.First) {
		t.Fatalf("an empty pool holds nothing: %v %v", none, err)
	}
	for _, bad := range []string{"10.0.0.5-10.0.0.1", "x", "::1-::2", "10.0.0.1-"} {
		if _, err := ParsePool("bad", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestServedServicesGetTheLowestFreeAddressAndKeepIt(t *testing.T) {
	c := cfg(t, "10.213.255.1-10.213.255.3", nil)
	svcs := []*corev1.Service{
		svc("kept", 1, "", "10.213.255.2"),
		svc("no-class", 2, ""),
		svc("own-class", 3, class),
		svc("other-class", 4, "example.com/nobody"),
	}
	clusterIP := svc("cluster-ip", 5, "")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	svcs = append(svcs, clusterIP)

	changes, events := Decide(c, svcs)
	apply(svcs, changes)
	if got := ingressOf(svcs[0]); got != "10.213.255.2" {
		t.Errorf("a valid address is kept: %q", got)
	}
	if got := ingressOf(svcs[1]); got != "10.213.255.1" {
		t.Errorf("no class: %q, want the lowest free address", got)
	}
	if got := ingressOf(svcs[2]); got != "10.213.255.3" {
		t.Errorf("own class: %q", got)
	}
	if got := ingressOf(svcs[3]) + ingressOf(svcs[4]); got != "" {
		t.Errorf("another class and a ClusterIP Service are not touched: %q", got)
	}
	if len(events) != 2 || events[0].Reason != ReasonAllocated || events[0].Warning {
		t.Errorf("events: %+v", events)
	}
	// The next pass changes nothing and tells nothing.
	if changes, events := Decide(c, svcs); len(changes)+len(events) != 0 {
		t.Errorf("a second pass: %+v %+v", changes, events)
	}
}

func TestAnEmptyPoolLeavesTheServicePendingWithAWarning(t *testing.T) {
	c := cfg(t, "10.213.255.1-10.213.255.1", map[string]string{"localkube.io/no-addresses": ""})
	svcs := []*corev1.Service{svc("first", 1, ""), svc("second", 2, ""), svc("none", 3, "localkube.io/no-addresses")}
	changes, events := Decide(c, svcs)
	apply(svcs, changes)
	if ingressOf(svcs[0]) != "10.213.255.1" || ingressOf(svcs[1]) != "" || ingressOf(svcs[2]) != "" {
		t.Fatalf("ingress: %q %q %q", ingressOf(svcs[0]), ingressOf(svcs[1]), ingressOf(svcs[2]))
	}
	warnings := map[string]string{}
	for _, e := range events {
		if e.Warning {
			warnings[e.Name] = e.Note
		}
	}
	if !strings.Contains(warnings["second"], "No free address in pool default (10.213.255.1-10.213.255.1, 1 addresses)") {
		t.Errorf("second: %q", warnings["second"])
	}
	if !strings.Contains(warnings["none"], "pool localkube.io/no-addresses (no addresses)") {
		t.Errorf("none: %q", warnings["none"])
	}
	// The first goes: its address is the second's.
	changes, _ = Decide(c, svcs[1:])
	apply(svcs, changes)
	if ingressOf(svcs[1]) != "10.213.255.1" {
		t.Errorf("the freed address goes to the pending Service: %q", ingressOf(svcs[1]))
	}
}

func TestARequestedAddressWaitsForItsHolderAndComesBeforeAutomaticOnes(t *testing.T) {
	c := cfg(t, "10.213.255.1-10.213.255.3", nil)
	holder := svc("holder", 1, "", "10.213.255.2")
	wants := svc("wants", 2, "")
	wants.Spec.LoadBalancerIP = "10.213.255.2"
	outside := svc("outside", 3, "")
	outside.Spec.LoadBalancerIP = "10.0.0.9"
	// Older than "asks", but asks for nothing: it must not take .1, which "asks" wants.
	auto := svc("auto", 4, "")
	asks := svc("asks", 5, "")
	asks.Spec.LoadBalancerIP = "10.213.255.1"
	svcs := []*corev1.Service{holder, wants, outside, auto, asks}

	changes, events := Decide(c, svcs)
	apply(svcs, changes)
	if ingressOf(asks) != "10.213.255.1" || ingressOf(auto) != "10.213.255.3" || ingressOf(wants) != "" || ingressOf(outside) != "" {
		t.Fatalf("asks %q auto %q wants %q outside %q", ingressOf(asks), ingressOf(auto), ingressOf(wants), ingressOf(outside))
	}
	notes := map[string]string{}
	for _, e := range events {
		notes[e.Name] = e.Note
	}
	if !strings.Contains(notes["wants"], "10.213.255.2 is in use by Service ns/holder") {
		t.Errorf("wants: %q", notes["wants"])
	}
	if !strings.Contains(notes["outside"], "10.0.0.9 is not in pool default") {
		t.Errorf("outside: %q", notes["outside"])
	}
	changes, _ = Decide(c, []*corev1.Service{wants, outside, auto, asks})
	apply(svcs, changes)
	if ingressOf(wants) != "10.213.255.2" {
		t.Errorf("once its holder is gone: %q", ingressOf(wants))
	}
}

func TestConflictsAndStaleAddressesAreRepaired(t *testing.T) {
	c := cfg(t, "10.213.255.1-10.213.255.5", nil)
	older := svc("older", 1, "", "10.213.255.1")
	younger := svc("younger", 2, "", "10.213.255.1")
	stale := svc("stale", 3, "", "192.0.2.7")
	gone := svc("no-longer-lb", 4, "", "10.213.255.3")
	gone.Spec.Type = corev1.ServiceTypeClusterIP
	foreign := svc("foreign", 5, "example.com/other", "10.213.255.2")
	svcs := []*corev1.Service{younger, older, stale, gone, foreign}
	changes, _ := Decide(c, svcs)
	apply(svcs, changes)
	if ingressOf(older) != "10.213.255.1" || ingressOf(younger) == "10.213.255.1" || ingressOf(younger) == "" {
		t.Errorf("the older keeps a shared address, the younger gets another: %q %q", ingressOf(older), ingressOf(younger))
	}
	if a := ingressOf(stale); a == "192.0.2.7" || a == "" {
		t.Errorf("an address outside the pool is replaced: %q", a)
	}
	if ingressOf(gone) != "" {
		t.Errorf("a Service no longer of type LoadBalancer gives its address back: %q", ingressOf(gone))
	}
	if ingressOf(foreign) != "10.213.255.2" {
		t.Errorf("another class's status is left alone: %q", ingressOf(foreign))
	}
	if ingressOf(younger) == "10.213.255.2" || ingressOf(stale) == "10.213.255.2" {
		t.Errorf("an address another class's Service shows is not given again: %q %q", ingressOf(younger), ingressOf(stale))
	}
}
