// Package bridge creates and deletes the Linux bridge that pods and the API server share.
package bridge

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// Up creates the bridge with the address, or repairs a bridge left from an earlier run.
func Up(name, cidr string) error {
	if !Exists(name) {
		if err := ip("link", "add", name, "type", "bridge"); err != nil {
			return err
		}
	}
	addrs, err := addresses(name)
	if err != nil {
		return err
	}
	if !contains(addrs, cidr) {
		if err := ip("addr", "add", cidr, "dev", name); err != nil {
			return err
		}
	}
	// A bridge takes the lowest address of its ports unless its own is set: every pod's veth
	// that came or went could change it, and the pods' neighbour entries for their gateway went
	// stale with it (a pod re-created on the real node cut the others off for seconds, and the
	// kubelet's probes with them). A fixed, locally administered address never changes.
	if err := ip("link", "set", name, "address", Address); err != nil {
		return err
	}
	return ip("link", "set", name, "up")
}

// Address is the bridge's own MAC address (locally administered: 02:...; "lk").
const Address = "02:6c:6b:00:00:01"

// Down deletes the bridge; a missing bridge is not an error.
func Down(name string) error {
	if !Exists(name) {
		return nil
	}
	return ip("link", "del", name)
}

// Exists reports whether a network interface of that name exists in this namespace.
func Exists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func addresses(name string) ([]string, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
