package framework

import (
	"bytes"
	"fmt"
	"os"
	"testing"
)

// ParentPID is pid's parent; it fails t if pid is gone.
func ParentPID(t testing.TB, pid int) int {
	t.Helper()
	ppid, ok := parentOf(pid)
	if !ok {
		t.Fatalf("pid %d: no such process", pid)
	}
	return ppid
}

// MonitorOf returns the pid of pod's monitor (the Go berth-monitor or the
// C berth-podproc), which must be the parent of its pause (the monitor
// owns the whole pod from RunPodSandbox on) and name the pod on its
// command line: a test that signals it can only ever hit a process of its
// own daemon.
func MonitorOf(t testing.TB, pod string, pausePid int) int {
	t.Helper()
	ppid := ParentPID(t, pausePid)
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	if (!bytes.Contains(cmd, []byte("berth-monitor\x00")) && !bytes.Contains(cmd, []byte("berth-podproc\x00"))) || !bytes.Contains(cmd, []byte("\x00--pod\x00"+pod+"\x00")) {
		t.Fatalf("pause %d's parent %d is %q, not pod %s's monitor", pausePid, ppid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), pod)
	}
	return ppid
}
