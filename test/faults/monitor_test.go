package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// The matrix of a pod's processes dying under berth: its monitor (with
// berth up, or berth crashing around it), its pause (alone, or as the init
// of a shared PID namespace) and a container's own process. In every case
// each exit is reported, the pod can be stopped and removed without an
// error, and nothing of it is left on the host.

// podUnderTest is a pod with two long-running containers and one that
// has already exited with code 3 (its real exit must survive whatever
// happens to the pod afterwards), with the pids of its processes.
type podUnderTest struct {
	pod            string
	cfg            *runtimeapi.PodSandboxConfig
	ctrs           []string // running
	pids           []int
	exited         string
	pause, monitor int
}

// pid is the PID namespace of pod and containers: NamespaceMode_CONTAINER
// is what the kubelet asks for unless the pod shares its process namespace.
func startPod(e *framework.PodEnv, name string, pid runtimeapi.NamespaceMode) podUnderTest {
	e.T.Helper()
	ns := &runtimeapi.NamespaceOption{Pid: pid}
	pod, cfg := e.RunPodWith(name, func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	})
	withNS := func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}}
	}
	p := podUnderTest{pod: pod, cfg: cfg}
	p.exited = e.Run(pod, cfg, "exited", "exit 3", withNS)
	for _, c := range []string{"a", "b"} {
		id := e.Run(pod, cfg, c, "exec sleep 100000", withNS)
		p.ctrs = append(p.ctrs, id)
		p.pids = append(p.pids, containerPid(e, id))
	}
	e.WaitExit(p.exited, settle)
	p.pause = pausePid(e, pod)
	p.monitor = framework.MonitorOf(e.T, pod, p.pause)
	checkMountNS(e.T, p.monitor)
	checkKind(e.T, p.monitor)
	for i, pid := range p.pids {
		if framework.ParentPID(e.T, pid) != p.monitor {
			e.T.Fatalf("container %s (pid %d) is not the monitor's (%d) child", p.ctrs[i], pid, p.monitor)
		}
	}
	return p
}

// checkExited: the container that exited before the fault still reports
// its own exit.
func (p podUnderTest) checkExited(e *framework.PodEnv) {
	e.T.Helper()
	if st := containerState(e, p.exited); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 || st.Reason != "Error" {
		e.T.Errorf("container that exited before the fault: %s, exit %d, reason %q; want EXITED, 3, Error", st.State, st.ExitCode, st.Reason)
	}
}

// checkMonitorGone: every running container is exited, says why through
// ContainerStatus and ListContainers, and none of the pod's processes runs.
func (p podUnderTest) checkMonitorGone(e *framework.PodEnv) {
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
	p.checkExited(e)
	waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	for i, pid := range p.pids {
		waitGone(e.T, pid, "container "+p.ctrs[i])
	}
	waitGone(e.T, p.pause, "pause of a pod whose monitor died")
}

// TestKillMonitor: the monitor dies with berth up, then berth crashes
// right after it (berth may or may not have seen it go), and berth is
// down when it dies. The restarted berth finds out from its records and
// the host alone. Events are checked where berth stays up: a restarted
// berth publishes what it finds during recovery, before any client can
// have subscribed (the kubelet's relist sees those exits).
func TestKillMonitor(t *testing.T) {
	for _, order := range []string{"berth-up", "then-berth", "berth-first"} {
		t.Run(order, func(t *testing.T) {
			e := framework.NewPodEnv(t, "faults-mon")
			before := framework.SnapshotHost(t, e.Scope())
			stops := watchStops(e)
			p := startPod(e, "monkill", runtimeapi.NamespaceMode_CONTAINER)
			// An exec with no timeout is running when the monitor dies:
			// it must end, not wait forever.
			execDone := make(chan error, 1)
			if order == "berth-up" {
				go func() {
					_, err := e.D.Runtime.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: p.ctrs[0], Cmd: []string{"sleep", "100000"}})
					execDone <- err
				}()
				waitExecRunning(t, p.pids[0])
			}
			switch order {
			case "berth-up":
				kill(t, p.monitor, "monitor")
				select {
				case err := <-execDone:
					t.Logf("ExecSync when the monitor died: %v", err)
					if err == nil {
						t.Error("ExecSync of a sleep succeeded although the monitor died")
					}
				case <-time.After(settle):
					t.Errorf("ExecSync still running %s after the monitor died", settle)
				}
			case "then-berth":
				kill(t, p.monitor, "monitor")
				e.D.Kill()
			case "berth-first":
				e.D.Kill()
				kill(t, p.monitor, "monitor")
			}
			waitGone(t, p.monitor, "monitor")
			if !e.D.Running() {
				e.D.Restart()
			}
			p.checkMonitorGone(e)
			if order == "berth-up" {
				stops.expect(p.ctrs...)
			}
			stopAndRemove(e, p.pod)
			framework.CheckHost(t, before)
		})
	}
}

// TestKillPause: pause alone dies. The pod is not ready (the kubelet
// will kill its containers and make a new sandbox, which must work). With
// a PID namespace per container, as the kubelet asks by default, the
// containers keep running until the pod is stopped, also when pause dies
// while berth is down; with the pod's PID namespace shared, pause is its
// init and the kernel takes every container with it: each is reported
// exited by SIGKILL (137).
func TestKillPause(t *testing.T) {
	for _, tc := range []struct {
		name      string
		shared    bool
		berthDown bool
	}{
		{name: "pid-per-container"},
		{name: "pid-shared", shared: true},
		{name: "berth-down", berthDown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := framework.NewPodEnv(t, "faults-pause")
			before := framework.SnapshotHost(t, e.Scope())
			stops := watchStops(e)
			pid := runtimeapi.NamespaceMode_CONTAINER
			if tc.shared {
				pid = runtimeapi.NamespaceMode_POD
			}
			p := startPod(e, "pausekill", pid)

			if tc.berthDown {
				e.D.Kill()
			}
			kill(t, p.pause, "pause")
			if tc.berthDown {
				waitGone(t, p.pause, "pause")
				e.D.Restart()
			}
			waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			if tc.shared {
				for _, id := range p.ctrs {
					st := e.WaitExit(id, settle)
					if st.ExitCode != 137 {
						t.Errorf("container %s in the PID namespace of a killed pause: exit code %d (%s), want 137", id, st.ExitCode, st.Reason)
					}
				}
				stops.expect(p.ctrs...)
			} else {
				for i, id := range p.ctrs {
					if st := containerState(e, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !framework.Running(p.pids[i]) {
						t.Errorf("container %s after pause died: %s, process running %v; want it kept running", id, st.State, framework.Running(p.pids[i]))
					}
				}
			}
			p.checkExited(e)
			if !framework.Running(p.monitor) {
				t.Errorf("the monitor (pid %d) died with pause", p.monitor)
			}
			stopAndRemove(e, p.pod)
			for i, pid := range p.pids {
				waitGone(t, pid, "container "+p.ctrs[i])
			}
			waitGone(t, p.monitor, "monitor of a removed pod")
			framework.CheckHost(t, before)

			// What the kubelet does next: the same pod, next attempt.
			p.cfg.Metadata.Attempt++
			again, err := e.D.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: p.cfg})
			if err != nil {
				t.Fatalf("RunPodSandbox of the pod again: %v", err)
			}
			id := e.Run(again.PodSandboxId, p.cfg, "a", "echo again", nil)
			if st := e.WaitExit(id, settle); st.ExitCode != 0 {
				t.Errorf("container of the recreated pod: exit %d (%s)", st.ExitCode, st.Message)
			}
			stopAndRemove(e, again.PodSandboxId)
			framework.CheckHost(t, before)
		})
	}
}

// TestKillContainerProcess: a container's own process is killed, with
// berth up or down. Its exit is reported as the kernel gave it (128+9),
// the other container and the pod carry on.
func TestKillContainerProcess(t *testing.T) {
	for _, berthDown := range []bool{false, true} {
		t.Run(map[bool]string{false: "berth-up", true: "berth-down"}[berthDown], func(t *testing.T) {
			e := framework.NewPodEnv(t, "faults-ctr")
			before := framework.SnapshotHost(t, e.Scope())
			stops := watchStops(e)
			p := startPod(e, "ctrkill", runtimeapi.NamespaceMode_CONTAINER)

			if berthDown {
				e.D.Kill()
			}
			kill(t, p.pids[0], "container a")
			if berthDown {
				waitGone(t, p.pids[0], "container a")
				e.D.Restart()
			}
			st := e.WaitExit(p.ctrs[0], settle)
			if st.ExitCode != 137 || st.Reason != "Error" {
				t.Errorf("killed container: exit code %d, reason %q; want 137, Error", st.ExitCode, st.Reason)
			}
			if !berthDown {
				stops.expect(p.ctrs[0])
			}
			if states := listed(e); states[p.ctrs[0]] != runtimeapi.ContainerState_CONTAINER_EXITED || states[p.ctrs[1]] != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("ListContainers after killing a: %v, want a EXITED and b RUNNING", states)
			}
			if !framework.Running(p.pids[1]) || !framework.Running(p.pause) || !framework.Running(p.monitor) {
				t.Errorf("killing one container took others with it: b %v, pause %v, monitor %v", framework.Running(p.pids[1]), framework.Running(p.pause), framework.Running(p.monitor))
			}
			p.checkExited(e)
			waitPodState(e, p.pod, runtimeapi.PodSandboxState_SANDBOX_READY)
			stopAndRemove(e, p.pod)
			framework.CheckHost(t, before)
		})
	}
}
