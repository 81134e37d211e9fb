package framework

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The leak probe must see a cgroup left under a test's parent, in every
// hierarchy of the host (v1 controllers, or the one v2 tree): a probe that
// looks in the wrong place passes without checking anything.
func TestCgroupDirsSeeALeak(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes cgroups: run as root")
	}
	parent := "/berth-probe-" + RandHex(4)
	t.Cleanup(func() { RemoveCgroup(parent) })
	var leaked []string
	for _, root := range CgroupRoots() {
		dir := filepath.Join(root, parent, "leaked-pod")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("mkdir %s: %v", dir, err)
		}
		leaked = append(leaked, dir)
	}
	if CgroupV2() && len(leaked) != 1 {
		t.Fatalf("v2 host with %d hierarchies", len(leaked))
	}
	got := CgroupDirs([]string{parent})
	for _, dir := range leaked {
		if !slices.Contains(got, dir) {
			t.Errorf("probe missed the leaked cgroup %s (found %v)", dir, got)
		}
	}
	RemoveCgroup(parent)
	if got := CgroupDirs([]string{parent}); len(got) != 0 {
		t.Errorf("after RemoveCgroup: %v", got)
	}
	for _, root := range CgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, parent)); err == nil {
			t.Errorf("RemoveCgroup left %s", filepath.Join(root, parent))
		}
	}
}

func TestCgroupFile(t *testing.T) {
	got := CgroupFile("/p/c", "cpu", "cpu.shares", "cpu.weight")
	want := "/sys/fs/cgroup/cpu/p/c/cpu.shares"
	if CgroupV2() {
		want = "/sys/fs/cgroup/p/c/cpu.weight"
	}
	if got != want {
		t.Errorf("CgroupFile = %s, want %s", got, want)
	}
}
