package faults_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// newPodEnv is framework.NewPodEnv for a daemon started with opts, and
// nothing pulled yet.
func newPodEnv(t *testing.T, prefix string, opts ...framework.Option) *framework.PodEnv {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	e := &framework.PodEnv{T: t, Image: reg + "/library/busybox:latest", Parent: "/" + prefix + "-" + framework.RandHex(4)}
	e.Net = cnitest.NewNet(t)
	// Registered before the daemon, so it runs after the daemon's cleanup
	// has removed the pods inside it.
	t.Cleanup(func() { framework.RemoveCgroup(e.Parent) })
	opts = append([]framework.Option{framework.WithArgs("--cni-conf-dir", e.Net.ConfDir, "--cni-bin-dir", e.Net.BinDir)}, opts...)
	e.D = framework.StartDaemon(t, opts...)
	return e
}

// processesUnder lists the processes whose command line names a path in
// dir (the monitors name their sockets in the state dir) and all their
// descendants: the processes of one daemon's pods, nothing else's.
func processesUnder(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	var roots []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
		if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); bytes.Contains(cmd, []byte(dir+"/")) {
			roots = append(roots, pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// reboot does to a daemon's pods what a reboot does: berth and every
// process of its pods die at once, the pods' mounts and cgroups vanish
// and the state root (a tmpfs /run on a real node) comes back empty. The
// persistent root, images and all, stays.
func reboot(t *testing.T, e *framework.PodEnv) {
	t.Helper()
	e.D.Kill()
	procs := processesUnder(t, e.D.Dir)
	for _, pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range procs {
		waitGone(t, pid, "process of a pod at reboot")
	}
	if err := framework.UnmountUnder(e.D.State); err != nil {
		t.Fatalf("unmount the state root: %v", err)
	}
	framework.RemoveCgroup(e.Parent)
	if err := os.RemoveAll(e.D.State); err != nil {
		t.Fatalf("wipe the state root: %v", err)
	}
	// Writable layers are in the persistent root, but nothing can still
	// be mounted on them after a reboot.
	if err := framework.UnmountUnder(e.D.Root); err != nil {
		t.Fatalf("unmount under the root: %v", err)
	}
	t.Logf("reboot: killed %d processes, wiped %s", len(procs), e.D.State)
}
