package framework

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Reboot does to the daemon and its pods what a reboot of the node does:
// berth and every process of its pods die at once, the pods' mounts and
// cgroups (those under cgroupParents) vanish, and the state root (a tmpfs
// /run on a real node) comes back empty. The persistent root, images and
// all, stays. The daemon is left stopped: Restart brings it back.
func (d *Daemon) Reboot(t testing.TB, cgroupParents ...string) {
	t.Helper()
	d.Kill()
	procs := ProcessesUnder(d.Dir)
	for _, pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range procs {
		for Running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("reboot: pid %d (%s) still runs after SIGKILL", pid, cmdlineOf(pid))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := UnmountUnder(d.State); err != nil {
		t.Fatalf("reboot: unmount the state root: %v", err)
	}
	for _, parent := range cgroupParents {
		RemoveCgroup(parent)
	}
	if err := os.RemoveAll(d.State); err != nil {
		t.Fatalf("reboot: wipe the state root: %v", err)
	}
	// Writable layers are in the persistent root, but nothing can still
	// be mounted on them after a reboot.
	if err := UnmountUnder(d.Root); err != nil {
		t.Fatalf("reboot: unmount under the root: %v", err)
	}
	t.Logf("reboot: killed %d processes, wiped %s", len(procs), d.State)
}
