package faults_test

import (
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestRestartWithFrozenMonitor: one pod's monitor is stopped (SIGSTOP,
// as a wedged process would be) when berth crashes and comes back. berth
// must still come up (it waited forever on that monitor) and serve the
// other pods; the frozen pod stays as recorded, not killed for its
// monitor's silence, and once its monitor runs again both pods go cleanly.
func TestRestartWithFrozenMonitor(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-frozen")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	healthy := c.newBystander()
	frozen := c.newBystander()

	mon := framework.MonitorOf(t, frozen.pod, pausePid(e, frozen.pod))
	if err := syscall.Kill(mon, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			syscall.Kill(mon, syscall.SIGCONT)
			thawed = true
		}
	}
	t.Cleanup(thaw)

	e.D.Kill()
	e.D.Restart()
	if pid := c.ctrPid(healthy.ctr); pid != healthy.pid {
		t.Errorf("the healthy pod's container has pid %q after the restart, %q before", pid, healthy.pid)
	}
	if st := c.podState(frozen.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("the pod whose monitor is stopped is %s after the restart; its pause still runs", st)
	}
	if st := c.ctrState(frozen.ctr); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container whose monitor is stopped is %s after the restart; it still runs", st)
	}

	thaw()
	c.removeAll()
	framework.CheckHost(t, before)
}
