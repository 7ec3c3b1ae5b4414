// Package faults injects faults into the local cluster for tests: network partitions between
// pods, zones and the host (nftables in the host namespace, which routes all pod traffic), paused
// and killed containers, stopped nodes (with the process kubelet), and records each fault so it can
// be undone: by "localkube fault undo", by the supervisor once the process that made it has ended,
// and by the sweep of "localkube stop" and "start".
package faults

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/proc"
)

// Proc names one process for life: a pid and its start time.
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Record is a fault in force and everything needed to undo it.
type Record struct {
	ID      string    `json:"id"`
	What    string    `json:"what"`
	Created time.Time `json:"created"`
	// Owner, when set, is the process the fault belongs to (a test): once it has ended the
	// supervisor undoes the fault, however the process ended.
	Owner *Proc `json:"owner,omitempty"`
	// Table is the nftables table (family inet, host namespace) holding the fault's rules.
	Table string `json:"table,omitempty"`
	// Paused are the processes stopped with SIGSTOP, continued on undo.
	Paused []Proc `json:"paused,omitempty"`
	// Node is a node stopped through the process kubelet.
	Node string `json:"node,omitempty"`
}

// TablePrefix starts the name of every nftables table a fault makes.
const TablePrefix = "lkfault_"

// NewID returns a short random identifier.
func NewID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// ValidID reports whether id can name a record and an nftables table.
func ValidID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func recordPath(l layout.Layout, id string) string {
	return filepath.Join(l.Faults(), id+".json")
}

// Save writes the record atomically.
func Save(l layout.Layout, r Record) error {
	if err := os.MkdirAll(l.Faults(), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := recordPath(l, r.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, recordPath(l, r.ID))
}

// ErrNoSuchFault is returned for an id without a record.
var ErrNoSuchFault = errors.New("no such fault")

// Load reads one record.
func Load(l layout.Layout, id string) (Record, error) {
	if !ValidID(id) {
		return Record{}, fmt.Errorf("%w: %q is not a fault id", ErrNoSuchFault, id)
	}
	b, err := os.ReadFile(recordPath(l, id))
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, fmt.Errorf("%w: %s", ErrNoSuchFault, id)
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("fault record %s: %w", recordPath(l, id), err)
	}
	return r, nil
}

// List returns every record, oldest first; unreadable ones are reported in errs.
func List(l layout.Layout) (records []Record, errs []error) {
	entries, err := os.ReadDir(l.Faults())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		return nil, errs
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		r, err := Load(l, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		records = append(records, r)
	}
	sort.Slice(records, func(i, j int) bool { return records[i].Created.Before(records[j].Created) })
	return records, errs
}

// OwnerGone reports whether the record has an owner and that process has ended.
func (r Record) OwnerGone() bool {
	return r.Owner != nil && !proc.Same(r.Owner.PID, r.Owner.Start)
}

// OwnerOf names the process pid for life, for Record.Owner.
func OwnerOf(pid int) (*Proc, error) {
	st, ok := proc.ReadStat(pid)
	if !ok {
		return nil, fmt.Errorf("owner process %d does not exist", pid)
	}
	return &Proc{PID: pid, Start: st.StartTime}, nil
}
