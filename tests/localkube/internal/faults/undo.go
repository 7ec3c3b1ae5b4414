package faults

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"valkey-operator.local/localkube/internal/layout"
)

// NodeFaultFile is the file that stops a node in the process kubelet, and AppliedFile the one the
// kubelet writes once it acts on it (and removes when the node is back).
func NodeFaultFile(l layout.Layout, node string) string {
	return filepath.Join(l.KubeletFaults(), node)
}

func appliedFile(l layout.Layout, node string) string { return NodeFaultFile(l, node) + ".applied" }

// KubeletWait bounds how long a command waits for the process kubelet to act on a node fault.
const KubeletWait = 30 * time.Second

// waitFor polls cond every 100 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// Undo removes everything the fault did, then its record. Each part is attempted; the first
// error is returned with the record kept, so it can be undone again.
func Undo(l layout.Layout, r Record) error {
	var errs []error
	if r.Table != "" {
		if err := DeleteTable(r.Table); err != nil {
			errs = append(errs, err)
		}
	}
	Continue(r.Paused)
	if r.Node != "" {
		if err := os.Remove(NodeFaultFile(l, r.Node)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		// Back when the kubelet says so; a kubelet that is not running has nothing to resume.
		if !waitFor(KubeletWait, func() bool { return !exists(appliedFile(l, r.Node)) }) {
			fmt.Fprintf(os.Stderr, "localkube: node %s: the kubelet did not confirm within %s that it is back\n", r.Node, KubeletWait)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("undoing fault %s (%s): %w", r.ID, r.What, errors.Join(errs...))
	}
	if err := os.Remove(recordPath(l, r.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Reap undoes the faults whose owner process has ended; it returns what it undid.
func Reap(l layout.Layout) ([]Record, error) {
	records, errs := List(l)
	var reaped []Record
	for _, r := range records {
		if !r.OwnerGone() {
			continue
		}
		if err := Undo(l, r); err != nil {
			errs = append(errs, err)
			continue
		}
		reaped = append(reaped, r)
	}
	return reaped, errors.Join(errs...)
}

// Leftovers lists what faults left in force: records, nftables tables and node fault files.
func Leftovers(l layout.Layout) []string {
	var out []string
	records, _ := List(l)
	for _, r := range records {
		out = append(out, fmt.Sprintf("fault %s (%s)", r.ID, r.What))
	}
	for _, t := range Tables() {
		out = append(out, "nftables table inet "+t)
	}
	if entries, err := os.ReadDir(l.KubeletFaults()); err == nil {
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".applied") {
				out = append(out, "stopped node "+e.Name())
			}
		}
	}
	return out
}

// Sweep undoes every fault, with or without a record: "localkube stop" and "start" call it, so a
// fault whose owner was killed before it could undo it never outlives the cluster. Processes are
// continued first (the sweep may be about to kill them, and a stopped process ignores SIGTERM).
func Sweep(l layout.Layout) error {
	var errs []error
	records, listErrs := List(l)
	errs = append(errs, listErrs...)
	for _, r := range records {
		Continue(r.Paused)
	}
	for _, t := range Tables() {
		if err := DeleteTable(t); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range []string{l.Faults(), l.KubeletFaults()} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
