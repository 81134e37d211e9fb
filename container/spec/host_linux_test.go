package spec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// SystemHost.Hugetlb agrees with the cgroup tree: a hierarchy whose root
// has hugetlb.*.limit_in_bytes files (v1), or hugetlb in the root's
// cgroup.controllers (v2).
func TestSystemHostHugetlb(t *testing.T) {
	h := SystemHost{}
	var want bool
	if h.CgroupV2() {
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		want = slices.Contains(strings.Fields(string(b)), "hugetlb")
	} else {
		m, _ := filepath.Glob("/sys/fs/cgroup/*/hugetlb.*.limit_in_bytes")
		want = len(m) > 0
	}
	if got := h.Hugetlb(); got != want {
		t.Errorf("Hugetlb() = %v, the cgroup tree says %v", got, want)
	}
}
