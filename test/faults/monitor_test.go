package faults_test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// The matrix of a pod's processes dying under berth: its monitor (with
// berth up, or berth crashing around it), its pause (alone, or as the init
// of a shared PID namespace) and a container's own process. In every case
// each exit is reported, the pod can be stopped and removed without an
// error, and nothing of it is left on the host.

// twoSleepers runs a pod with two long-running containers and returns the
// pod, the containers and their pids, pause's pid and the monitor's.
type twoSleepers struct {
	pod            string
	ctrs           []string
	pids           []int
	pause, monitor int
}

// pid is the PID namespace of pod and containers: NamespaceMode_CONTAINER
// is what the kubelet asks for unless the pod shares its process namespace.
func startTwoSleepers(e *framework.PodEnv, name string, pid runtimeapi.NamespaceMode) twoSleepers {
	e.T.Helper()
	ns := &runtimeapi.NamespaceOption{Pid: pid}
	pod, cfg := runPod(e, name, func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	})
	p := twoSleepers{pod: pod}
	for _, c := range []string{"a", "b"} {
		id := e.Run(pod, cfg, c, "exec sleep 100000", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}}
		})
		p.ctrs = append(p.ctrs, id)
		p.pids = append(p.pids, containerPid(e, id))
	}
	p.pause = pausePid(e, pod)
	p.monitor = monitorOf(e.T, pod, p.pause)
	for i, pid := range p.pids {
		if parentPid(e.T, pid) != p.monitor {
			e.T.Fatalf("container %s (pid %d) is not the monitor's (%d) child", p.ctrs[i], pid, p.monitor)
		}
	}
	return p
}

// checkMonitorGone: every container is exited, says why through
// ContainerStatus and ListContainers, and none of the pod's processes runs.
func (p twoSleepers) checkMonitorGone(e *framework.PodEnv) {
	e.T.Helper()
	for _, id := range p.ctrs {
		st := e.WaitExit(id, settle)
		if st.Reason != "MonitorGone" || !strings.Contains(st.Message, "monitor") {
			e.T.Errorf("container %s after its monitor died: reason %q, message %q", id, st.Reason, st.Message)
		}
		if st.FinishedAt == 0 {
			e.T.Errorf("container %s: exited with no finish time", id)
		}
	}
	states := listed(e)
	for _, id := range p.ctrs {
		if states[id] != runtimeapi.ContainerState_CONTAINER_EXITED {
			e.T.Errorf("ListContainers: %s is %s, want EXITED", id, states[id])
		}
	}
	waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	for i, pid := range p.pids {
		waitGone(e.T, pid, "container "+p.ctrs[i])
	}
	waitGone(e.T, p.pause, "pause of a pod whose monitor died")
}

func TestKillMonitor(t *testing.T) {
	e := framework.NewPodEnv(t, "faults-mon")
	before := framework.SnapshotHost(t, e.Scope())
	stops := watchStops(e)
	p := startTwoSleepers(e, "monkill", runtimeapi.NamespaceMode_CONTAINER)

	kill(t, p.monitor, "monitor")
	p.checkMonitorGone(e)
	stops.expect(p.ctrs...)
	stopAndRemove(e, p.pod)
	framework.CheckHost(t, before)
}

// TestKillMonitorAndBerth: the monitor dies and berth crashes, in both
// orders; the restarted berth finds out from the records and the host
// alone. (Its events are not checked: they are published during recovery,
// before any client can be subscribed; the kubelet's relist sees the exits.)
func TestKillMonitorAndBerth(t *testing.T) {
	for _, order := range []string{"monitor-first", "berth-first"} {
		t.Run(order, func(t *testing.T) {
			e := framework.NewPodEnv(t, "faults-monb")
			before := framework.SnapshotHost(t, e.Scope())
			p := startTwoSleepers(e, "monberth", runtimeapi.NamespaceMode_CONTAINER)
			if order == "berth-first" {
				e.D.Kill()
				kill(t, p.monitor, "monitor")
			} else {
				// No wait in between: berth may or may not have seen
				// the monitor go before it dies itself.
				kill(t, p.monitor, "monitor")
				e.D.Kill()
			}
			waitGone(t, p.monitor, "monitor")
			e.D.Restart()
			p.checkMonitorGone(e)
			stopAndRemove(e, p.pod)
			framework.CheckHost(t, before)
		})
	}
}

// TestKillPause: pause alone dies. The pod is not ready (the kubelet
// will kill its containers and make a new sandbox). With a PID namespace
// per container, as the kubelet asks by default, the containers keep
// running until the pod is stopped; with the pod's PID namespace shared,
// pause is its init and the kernel takes every container with it: each
// is reported exited by SIGKILL (137).
func TestKillPause(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "pid-per-container", true: "pid-shared"}[shared]
		t.Run(name, func(t *testing.T) {
			e := framework.NewPodEnv(t, "faults-pause")
			before := framework.SnapshotHost(t, e.Scope())
			stops := watchStops(e)
			pid := runtimeapi.NamespaceMode_CONTAINER
			if shared {
				pid = runtimeapi.NamespaceMode_POD
			}
			p := startTwoSleepers(e, "pausekill", pid)

			kill(t, p.pause, "pause")
			waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			if shared {
				for _, id := range p.ctrs {
					st := e.WaitExit(id, settle)
					if st.ExitCode != 137 {
						t.Errorf("container %s in the PID namespace of a killed pause: exit code %d (%s), want 137", id, st.ExitCode, st.Reason)
					}
				}
				stops.expect(p.ctrs...)
			} else {
				for i, id := range p.ctrs {
					if st := containerState(e, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !running(p.pids[i]) {
						t.Errorf("container %s after pause died: %s, process running %v; want it kept running", id, st.State, running(p.pids[i]))
					}
				}
			}
			if !running(p.monitor) {
				t.Errorf("the monitor (pid %d) died with pause", p.monitor)
			}
			stopAndRemove(e, p.pod)
			for i, pid := range p.pids {
				waitGone(t, pid, "container "+p.ctrs[i])
			}
			waitGone(t, p.monitor, "monitor of a removed pod")
			framework.CheckHost(t, before)
		})
	}
}

// TestKillContainerProcess: a container's own process is killed. Its exit
// is reported as the kernel gave it (128+9), the other container and the
// pod carry on.
func TestKillContainerProcess(t *testing.T) {
	e := framework.NewPodEnv(t, "faults-ctr")
	before := framework.SnapshotHost(t, e.Scope())
	stops := watchStops(e)
	p := startTwoSleepers(e, "ctrkill", runtimeapi.NamespaceMode_CONTAINER)

	kill(t, p.pids[0], "container a")
	st := e.WaitExit(p.ctrs[0], settle)
	if st.ExitCode != 137 || st.Reason != "Error" {
		t.Errorf("killed container: exit code %d, reason %q; want 137, Error", st.ExitCode, st.Reason)
	}
	stops.expect(p.ctrs[0])
	if states := listed(e); states[p.ctrs[0]] != runtimeapi.ContainerState_CONTAINER_EXITED || states[p.ctrs[1]] != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("ListContainers after killing a: %v, want a EXITED and b RUNNING", states)
	}
	if !running(p.pids[1]) || !running(p.pause) || !running(p.monitor) {
		t.Errorf("killing one container took others with it: b %v, pause %v, monitor %v", running(p.pids[1]), running(p.pause), running(p.monitor))
	}
	waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_READY)
	stopAndRemove(e, p.pod)
	framework.CheckHost(t, before)
}
