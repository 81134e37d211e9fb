package cgprime

import (
	"os"
	"testing"
	"time"
)

func TestPrimeLeavesTheProcessWhereItIs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to write cgroup.procs")
	}
	path := ownProcsFile()
	if path == "" {
		t.Skip("no cgroup hierarchy found")
	}
	before, _ := os.ReadFile("/proc/self/cgroup")
	Prime()
	deadline := time.Now().Add(5 * time.Second)
	for inflight.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if inflight.Load() {
		t.Fatal("priming did not finish")
	}
	after, _ := os.ReadFile("/proc/self/cgroup")
	if string(before) != string(after) {
		t.Errorf("cgroups changed:\n%s\nto\n%s", before, after)
	}
}
