package proc

import (
	"os"
	"testing"
)

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain/path`:       "/plain/path",
		`/with\040space`:    "/with space",
		`/tab\011and\134bs`: "/tab\tand\\bs",
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAliveAndList(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if Alive(0) || Alive(-1) {
		t.Error("pid 0 or -1 is alive")
	}
	procs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PID == os.Getpid() {
			t.Error("List includes the caller")
		}
	}
	if len(procs) == 0 {
		t.Error("no processes listed")
	}
}

func TestParseStatCountsFieldsAfterTheCommandName(t *testing.T) {
	line := "4242 (valkey (x) srv) S 1 4242 4242 0 -1 4194560 107 0 0 0 1 2 0 0 20 0 4 0 987654 1000 200"
	st, ok := parseStat(line)
	if !ok || st.Session != 4242 || st.StartTime != 987654 {
		t.Fatalf("parseStat = %+v, %v; want session 4242, start 987654", st, ok)
	}
	if _, ok := parseStat("garbage"); ok {
		t.Fatal("parseStat accepted a line without a command name")
	}
	self, ok := ReadStat(os.Getpid())
	if !ok || !Same(os.Getpid(), self.StartTime) || Same(os.Getpid(), self.StartTime+1) {
		t.Fatalf("own stat %+v: Same does not tell this process from another", self)
	}
}
