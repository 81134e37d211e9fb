package kubelet_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/kubehost"
)

// takeTurn waits (up to 30 minutes) for the machine-wide kubelet lock
// and releases it when the test ends.
func takeTurn(t *testing.T) {
	t.Helper()
	release, err := kubehost.Lock(context.Background(), func() {
		t.Logf("another kubelet test holds %s: waiting", kubehost.LockPath)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// The kernel settings the kubelet's container manager sets (setupKernelTunables).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Host-wide paths the kubelet writes whatever its --root-dir: the device
// plugin socket dir (hard-coded in the device plugin API) and the legacy
// container log symlinks.
var kubeletHostDirs = []string{"/var/lib/kubelet", "/var/log/containers"}

// hostState is what of the machine a kubelet changes.
type hostState struct {
	sysctls map[string]string
	chains  map[string]bool // "iptables/nat/KUBE-X"
	entries map[string]bool // every path under kubeletHostDirs, and the dirs themselves
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	s := hostState{sysctls: map[string]string{}, chains: map[string]bool{}, entries: map[string]bool{}}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatalf("read sysctl: %v", err)
		}
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, c := range kubehost.KubeChains() {
		s.chains[c] = true
	}
	for _, dir := range kubeletHostDirs {
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				s.entries[p] = true
			}
			return nil
		})
	}
	return s
}

// guardHost records the host's state now and, when the test ends, undoes
// what a kubelet changed since and fails the test if anything is left:
// kernel settings written back, new KUBE-* chains deleted (with the rules
// that jump to them), new entries under /var/lib/kubelet and
// /var/log/containers removed, and cgroupRoot removed from every
// hierarchy. Registered before berth and the kubelet start, so it runs
// after both are stopped.
func guardHost(t *testing.T, cgroupRoot string) {
	t.Helper()
	before := snapshotHost(t)
	t.Cleanup(func() {
		undoHost(t, before, cgroupRoot)
		after := snapshotHost(t)
		for k, v := range before.sysctls {
			if after.sysctls[k] != v {
				t.Errorf("host: sysctl %s is %s, was %s", k, after.sysctls[k], v)
			}
		}
		for c := range after.chains {
			if !before.chains[c] {
				t.Errorf("host: iptables chain %s left", c)
			}
		}
		for p := range after.entries {
			if !before.entries[p] {
				t.Errorf("host: %s left", p)
			}
		}
		if dirs := kubehost.CgroupDirs(cgroupRoot); len(dirs) > 0 {
			t.Errorf("host: cgroups left: %v", dirs)
		}
	})
}

func undoHost(t *testing.T, before hostState, cgroupRoot string) {
	for k, v := range before.sysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		if strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			t.Errorf("restore sysctl %s=%s: %v", k, v, err)
		}
	}
	for _, c := range kubehost.KubeChains() {
		if !before.chains[c] {
			if err := kubehost.DeleteChain(c); err != nil {
				t.Error(err)
			}
		}
	}
	// Deepest first, so that a directory is empty when its turn comes.
	var created []string
	for _, dir := range kubeletHostDirs {
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil && !before.entries[p] {
				created = append(created, p)
			}
			return nil
		})
	}
	slices.SortFunc(created, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range created {
		if err := os.RemoveAll(p); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	removeCgroupTree(t, cgroupRoot)
}

// makeCgroupRoot creates path in every v1 hierarchy (and the unified one),
// as the kubelet wants its cgroupRoot to exist; cpuset gets its parent's
// cpus and mems so that children can be populated.
func makeCgroupRoot(t *testing.T, path string) {
	t.Helper()
	if framework.CgroupV2() {
		makeCgroupRootV2(t, path)
		return
	}
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		h := filepath.Join("/sys/fs/cgroup", e.Name())
		if !e.IsDir() { // cpu and cpuacct are symlinks to cpu,cpuacct
			continue
		}
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		d := h + path
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("create cgroup %s: %v", d, err)
		}
		if strings.Contains(e.Name(), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, _ := os.ReadFile(filepath.Join(h, f))
				os.WriteFile(filepath.Join(d, f), v, 0o644)
			}
		}
	}
}

// kubeletControllers are what the kubelet requires of its cgroup root on
// v2 (k8s cm/cgroup_v2_manager_linux.go), and io for its IO weights.
const kubeletControllers = "+cpu +cpuset +memory +hugetlb +pids +io"

// makeCgroupRootV2 creates path in the unified tree with the kubelet's
// controllers enabled from the root down to it and in it, so that the
// kubelet finds them in the root and can hand them on to kubepods.
func makeCgroupRootV2(t *testing.T, path string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create cgroup %s: %v", dir, err)
	}
	var chain []string
	for d := dir; d != "/sys/fs/cgroup"; d = filepath.Dir(d) {
		chain = append([]string{filepath.Dir(d)}, chain...)
	}
	for _, d := range append(chain, dir) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(kubeletControllers), 0o644); err != nil {
			t.Fatalf("enable the kubelet's controllers in %s: %v", d, err)
		}
	}
}

// removeCgroupTree kills whatever still runs under path (reported: berth
// should have stopped every pod) and removes the tree from every hierarchy.
func removeCgroupTree(t *testing.T, path string) {
	if n := kubehost.RemoveCgroupPath(slog.New(slog.NewTextHandler(testLog{t}, nil)), path); n > 0 {
		t.Errorf("%d processes or cgroups left under %s at cleanup (logged above): killed, removed", n, path)
	}
}

// testLog writes a logger's lines to the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func describeMounts(prefix string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, fmt.Sprintf("%s (%s)", f[4], strings.Join(f[5:], " ")))
		}
	}
	return out
}
