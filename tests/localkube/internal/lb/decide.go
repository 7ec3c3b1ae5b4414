// Package lb is localkube's LoadBalancer address allocator, as kind's cloud-provider-kind or k3s's
// ServiceLB are for theirs: it gives each Service of type LoadBalancer that it serves an address
// from a pool and writes it to status.loadBalancer.ingress; kube-proxy then routes that address
// (and enforces loadBalancerSourceRanges) like any load balancer's. Addresses are kept in the
// Services' status only, so a restarted allocator finds them there.
//
// Decide is the whole policy, a pure function from the Services to the status changes and Events;
// Run (controller.go) feeds it from an informer and applies what it returns.
package lb

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pool is a range of addresses, First to Last; an empty pool has none.
type Pool struct {
	Name        string
	First, Last netip.Addr
	empty       bool
}

// ParsePool reads "FIRST-LAST", a single address, or "" (a pool with no address).
func ParsePool(name, s string) (Pool, error) {
	p := Pool{Name: name}
	s = strings.TrimSpace(s)
	if s == "" {
		p.empty = true
		return p, nil
	}
	first, last, found := strings.Cut(s, "-")
	if !found {
		last = first
	}
	var err error
	if p.First, err = netip.ParseAddr(strings.TrimSpace(first)); err != nil {
		return p, fmt.Errorf("pool %s: %w", name, err)
	}
	if p.Last, err = netip.ParseAddr(strings.TrimSpace(last)); err != nil {
		return p, fmt.Errorf("pool %s: %w", name, err)
	}
	if !p.First.Is4() || !p.Last.Is4() || p.Last.Less(p.First) {
		return p, fmt.Errorf("pool %s: %q is not FIRST-LAST of IPv4 addresses in order", name, s)
	}
	return p, nil
}

// Contains reports whether a is in the pool.
func (p Pool) Contains(a netip.Addr) bool {
	return !p.empty && a.Is4() && !a.Less(p.First) && !p.Last.Less(a)
}

// Size is the number of addresses.
func (p Pool) Size() int {
	if p.empty {
		return 0
	}
	f, l := p.First.As4(), p.Last.As4()
	u := func(b [4]byte) int { return int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3]) }
	return u(l) - u(f) + 1
}

func (p Pool) String() string {
	if p.empty {
		return fmt.Sprintf("pool %s (no addresses)", p.Name)
	}
	return fmt.Sprintf("pool %s (%s-%s, %d addresses)", p.Name, p.First, p.Last, p.Size())
}

// first returns the lowest address of the pool for which free holds.
func (p Pool) first(free func(netip.Addr) bool) (netip.Addr, bool) {
	if p.empty {
		return netip.Addr{}, false
	}
	for a := p.First; !p.Last.Less(a); a = a.Next() {
		if free(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Config says which Services the allocator serves and from which pool.
type Config struct {
	// Class is the allocator's own loadBalancerClass: its Services, and those with no class,
	// take addresses from Default.
	Class   string
	Default Pool
	// Classes are further classes served, each from its own pool (possibly empty).
	Classes map[string]Pool
}

// poolFor is the pool that serves svc, if the allocator serves it: type LoadBalancer, and no
// class, its own class or one of Classes. A Service of another class belongs to another
// allocator and is never touched.
func (c Config) poolFor(svc *corev1.Service) (Pool, bool) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return Pool{}, false
	}
	if svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == c.Class {
		return c.Default, true
	}
	p, ok := c.Classes[*svc.Spec.LoadBalancerClass]
	return p, ok
}

// inAnyPool reports whether a is an address the allocator hands out.
func (c Config) inAnyPool(a netip.Addr) bool {
	if c.Default.Contains(a) {
		return true
	}
	for _, p := range c.Classes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Change is a Service's status.loadBalancer.ingress to write (empty: clear it).
type Change struct {
	Namespace, Name string
	UID             types.UID
	Ingress         []corev1.LoadBalancerIngress
}

// Event is what the allocator tells about a Service it serves.
type Event struct {
	Namespace, Name string
	UID             types.UID
	Warning         bool
	Reason, Note    string
}

// Event reasons, as MetalLB names them.
const (
	ReasonAllocated = "IPAllocated"
	ReasonFailed    = "AllocationFailed"
)

// Decide computes, from every Service, the ingress each served LoadBalancer Service must carry and
// what to tell about it. Each keeps a valid address it already has (in its pool, not held by an
// older Service, the one it asks for if it asks); the others get one: the address their
// spec.loadBalancerIP asks for, if it is in their pool and free, else the lowest free address.
// Services that ask for an address come first, oldest first, so an automatic allocation never
// takes the address someone asked for in the same pass. A Service that cannot get one stays
// pending with a Warning that says why. A Service no longer of type LoadBalancer loses the
// address it had from a pool (which frees it); a deleted one frees it by being gone.
func Decide(cfg Config, services []*corev1.Service) (changes []Change, events []Event) {
	svcs := slices.Clone(services)
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	taken := map[netip.Addr]*corev1.Service{}
	assigned := map[*corev1.Service]netip.Addr{}
	var pending []*corev1.Service

	// Keep the valid addresses already given, oldest Service first.
	for _, svc := range svcs {
		pool, served := cfg.poolFor(svc)
		if !served {
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer && holdsPoolAddress(cfg, svc) {
				changes = append(changes, change(svc, nil))
			}
			// Another allocator's Service that shows one of these addresses keeps it from
			// being given twice.
			if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				for _, in := range svc.Status.LoadBalancer.Ingress {
					if a, err := netip.ParseAddr(in.IP); err == nil && cfg.inAnyPool(a) && taken[a] == nil {
						taken[a] = svc
					}
				}
			}
			continue
		}
		if a, ok := currentAddr(svc); ok && pool.Contains(a) && taken[a] == nil && requestAllows(svc, a) {
			taken[a] = svc
			assigned[svc] = a
			continue
		}
		pending = append(pending, svc)
	}
	// Then those that ask for an address, then the rest.
	slices.SortStableFunc(pending, func(a, b *corev1.Service) int {
		ra, rb := a.Spec.LoadBalancerIP != "", b.Spec.LoadBalancerIP != ""
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
	for _, svc := range pending {
		pool, _ := cfg.poolFor(svc)
		a, why := allocate(pool, svc, taken)
		if why != "" {
			events = append(events, event(svc, true, ReasonFailed, why))
			// A stale address (outside the pool, or another's) must not keep routing here.
			if len(svc.Status.LoadBalancer.Ingress) > 0 {
				changes = append(changes, change(svc, nil))
			}
			continue
		}
		taken[a] = svc
		assigned[svc] = a
		events = append(events, event(svc, false, ReasonAllocated, fmt.Sprintf("Assigned IP %s from %s", a, pool)))
	}
	for _, svc := range svcs {
		a, ok := assigned[svc]
		if !ok {
			continue
		}
		want := []corev1.LoadBalancerIngress{{IP: a.String(), IPMode: ptrTo(corev1.LoadBalancerIPModeVIP)}}
		if !ingressEqual(svc.Status.LoadBalancer.Ingress, want) {
			changes = append(changes, change(svc, want))
		}
	}
	return changes, events
}

// allocate picks svc's address, or says why there is none.
func allocate(pool Pool, svc *corev1.Service, taken map[netip.Addr]*corev1.Service) (netip.Addr, string) {
	if req := svc.Spec.LoadBalancerIP; req != "" {
		a, err := netip.ParseAddr(req)
		switch {
		case err != nil:
			return a, fmt.Sprintf("spec.loadBalancerIP %q is not an IP address", req)
		case !pool.Contains(a):
			return a, fmt.Sprintf("The requested IP %s is not in %s", a, pool)
		case taken[a] != nil:
			return a, fmt.Sprintf("The requested IP %s is in use by Service %s/%s", a, taken[a].Namespace, taken[a].Name)
		}
		return a, ""
	}
	a, ok := pool.first(func(a netip.Addr) bool { return taken[a] == nil })
	if !ok {
		return a, fmt.Sprintf("No free address in %s", pool)
	}
	return a, ""
}

// currentAddr is the first ingress IP of svc's status.
func currentAddr(svc *corev1.Service) (netip.Addr, bool) {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// requestAllows: a Service that asks for an address keeps only that one.
func requestAllows(svc *corev1.Service, a netip.Addr) bool {
	req := svc.Spec.LoadBalancerIP
	if req == "" {
		return true
	}
	r, err := netip.ParseAddr(req)
	return err == nil && r == a
}

func holdsPoolAddress(cfg Config, svc *corev1.Service) bool {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && cfg.inAnyPool(a) {
			return true
		}
	}
	return false
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && len(x.Ports) == 0 && len(y.Ports) == 0 &&
			(x.IPMode == nil) == (y.IPMode == nil) && (x.IPMode == nil || *x.IPMode == *y.IPMode)
	})
}

func change(svc *corev1.Service, ingress []corev1.LoadBalancerIngress) Change {
	return Change{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, Ingress: ingress}
}

func event(svc *corev1.Service, warning bool, reason, note string) Event {
	return Event{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, Warning: warning, Reason: reason, Note: note}
}

func ptrTo[T any](v T) *T { return &v }
