package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// waitNotReady polls PodSandboxStatus until the pod is not ready.
func (e *env) waitNotReady(id string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := e.status(id)
		if st.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s still %v", id, st.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); framework.Running(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
	}
}

// monitorSocket is where pod id's monitor serves (monitor.PathsFor).
func (e *env) monitorSocket(id string) string {
	return filepath.Join(e.d.State, "monitors", id[:16]+".sock")
}

// checkRemoved checks that nothing of pod id is left, the monitor's
// socket and directory included.
func (e *env) checkRemoved(id string, info podInfo) {
	e.t.Helper()
	if left := e.leftovers(id, info.CgroupPath); len(left) > 0 {
		e.t.Errorf("left of %s: %v", id, left)
	}
	if _, err := os.Stat(e.monitorSocket(id)); !os.IsNotExist(err) {
		e.t.Errorf("monitor socket of %s left (%v)", id, err)
	}
}

func TestPauseIsTheMonitorsChild(t *testing.T) {
	e := newEnv(t)
	id := e.run(e.config("a"))
	_, info := e.status(id)
	mon := framework.MonitorOf(e.t, id, info.Pid)
	e.stop(id)
	// Containers, then pause, then the monitor: it is gone after the stop.
	waitGone(t, mon, "monitor of a stopped pod")
	if _, err := os.Stat(e.monitorSocket(id)); !os.IsNotExist(err) {
		t.Errorf("monitor socket after stop: %v", err)
	}
	e.remove(id)
	e.checkRemoved(id, info)
}

func TestKilledPauseMakesPodNotReady(t *testing.T) {
	e := newEnv(t)
	id := e.run(e.config("a"))
	_, info := e.status(id)
	mon := framework.MonitorOf(e.t, id, info.Pid)
	syscall.Kill(info.Pid, syscall.SIGKILL)
	e.waitNotReady(id)
	// The monitor recorded pause's exit like a container's. Berth sees
	// the exit through its own pidfd: the record may come a moment later.
	exit := filepath.Join(e.d.State, "monitors", id, "exit.json")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		data, err := os.ReadFile(exit)
		if err == nil && strings.Contains(string(data), `"signal":9`) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("pause's exit record %s: %q, %v", exit, data, err)
			break
		}
	}
	e.stop(id)
	waitGone(t, mon, "monitor")
	e.remove(id)
	e.checkRemoved(id, info)
}

func TestKilledMonitorMakesPodNotReady(t *testing.T) {
	e := newEnv(t)
	id := e.run(e.config("a"))
	_, info := e.status(id)
	mon := framework.MonitorOf(e.t, id, info.Pid)
	syscall.Kill(mon, syscall.SIGKILL)
	// Nobody would record pause's exit any more: berth ends it.
	e.waitNotReady(id)
	waitGone(t, info.Pid, "pause of a pod whose monitor died")
	e.stop(id)
	e.remove(id)
	e.checkRemoved(id, info)
}

// TestMonitorKilledWhileBerthDown: the monitor dies while berth is down;
// the restarted berth ends the orphaned pause and reports the pod not
// ready, and the pod is stopped and removed cleanly.
func TestMonitorKilledWhileBerthDown(t *testing.T) {
	e := newEnv(t)
	id := e.run(e.config("a"))
	_, info := e.status(id)
	mon := framework.MonitorOf(e.t, id, info.Pid)
	e.d.Kill()
	syscall.Kill(mon, syscall.SIGKILL)
	waitGone(t, mon, "monitor")
	e.d.Restart()
	if st, _ := e.status(id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod whose monitor died while berth was down: %v", st.State)
	}
	waitGone(t, info.Pid, "orphaned pause")
	e.stop(id)
	e.remove(id)
	e.checkRemoved(id, info)
}
