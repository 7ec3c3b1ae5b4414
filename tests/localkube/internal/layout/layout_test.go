package layout

import (
	"os"
	"path/filepath"
	"testing"
)

// A .localkube that is a symlink to another checkout's keeps its own checkout
// as Root but resolves Dir, so that mounts found in /proc/mounts match it.
func TestNewResolvesASymlinkedDirButKeepsItsCheckout(t *testing.T) {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(tmp, "main", ".localkube")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(other, ".localkube")
	if err := os.Symlink(shared, link); err != nil {
		t.Fatal(err)
	}
	l, err := New(link)
	if err != nil {
		t.Fatal(err)
	}
	if l.Dir != shared {
		t.Errorf("Dir = %s, want the resolved %s", l.Dir, shared)
	}
	if l.Root != other {
		t.Errorf("Root = %s, want the checkout it was named from, %s", l.Root, other)
	}
}
