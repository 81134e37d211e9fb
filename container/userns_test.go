package container

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-runtime/berth/monitor"
)

// usernsProcess runs a process in a new user namespace mapping 0 to
// host, for its namespace's fd.
func usernsProcess(t *testing.T, host uint32) *os.File {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	m := []monitor.IDMap{{ContainerID: 0, HostID: host, Size: 65536}}
	exe, err := monitor.CloneIntoUserNS(cmd, &monitor.UserNS{UIDs: m, GIDs: m}, true)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	exe.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !strings.Contains(string(st), fmt.Sprintf("Uid:\t%d", host)) {
		t.Fatalf("the process is not the namespace's root (host uid %d):\n%s", host, st)
	}
	return f
}

// TestMountRootfsIDMapped: the layers seen through the rootfs of a pod in
// a user namespace belong to the pod's root (host uid 1<<20), the
// writable layer's root too, and the id-mapped layer mounts are gone once
// the overlay is up.
func TestMountRootfsIDMapped(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts, user namespaces")
	}
	const host = 1 << 20
	ns := usernsProcess(t, host)
	dir := t.TempDir()
	l1, l2 := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	os.MkdirAll(filepath.Join(l1, "bin"), 0o755)
	os.MkdirAll(l2, 0o755)
	os.WriteFile(filepath.Join(l1, "bin/sh"), []byte("#!"), 0o755)
	os.WriteFile(filepath.Join(l2, "top"), []byte("t"), 0o644)
	state := filepath.Join(dir, "state")
	idm := &idmap{userns: ns, uid: host, gid: host, scratch: filepath.Join(state, idmapDir)}
	rootfs, upper := filepath.Join(state, "rootfs"), filepath.Join(dir, "upper")
	if err := mountRootfs("c1", []string{l2, l1}, upper, rootfs, idm); err != nil {
		t.Fatal(err)
	}
	defer unmountRootfs(rootfs)
	for _, p := range []string{"bin/sh", "top", "."} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(rootfs, p), &st); err != nil || st.Uid != host || st.Gid != host {
			t.Errorf("%s: uid %d gid %d (%v), want %d", p, st.Uid, st.Gid, err, host)
		}
	}
	// The layers themselves are untouched, and nothing stays mounted
	// under the scratch dir.
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(l1, "bin/sh"), &st); st.Uid != 0 {
		t.Errorf("layer file uid %d", st.Uid)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], idm.scratch) {
			t.Errorf("id-mapped layer still mounted at %s", f[4])
		}
	}
	if err := unmountIDMapScratch(state); err != nil {
		t.Fatal(err)
	}

	// An image volume of the same layers: read-only, root's.
	vol := filepath.Join(state, volumesDir, "0")
	if err := mountImageReadOnly([]string{l2, l1}, vol, idm); err != nil {
		t.Fatal(err)
	}
	defer unmountRootfs(vol)
	if syscall.Stat(filepath.Join(vol, "bin/sh"), &st); st.Uid != host {
		t.Errorf("image volume file uid %d, want %d", st.Uid, host)
	}
}
