package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// Waits are generous: other engineers' tests load the same 2-core machine,
// and a wait that runs out is a failure, not a measurement.
const settle = 60 * time.Second

// infoPid is the pid in a verbose status's "info" document.
func infoPid(t *testing.T, what string, info map[string]string) int {
	t.Helper()
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil || v.Pid <= 0 {
		t.Fatalf("%s: no pid in verbose info %q (%v)", what, info["info"], err)
	}
	return v.Pid
}

func pausePid(e *framework.PodEnv, pod string) int {
	e.T.Helper()
	resp, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(e.T), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		e.T.Fatalf("PodSandboxStatus %s: %v", pod, err)
	}
	return infoPid(e.T, "pod "+pod, resp.Info)
}

func containerPid(e *framework.PodEnv, id string) int {
	e.T.Helper()
	resp, err := e.D.Runtime.ContainerStatus(framework.Ctx(e.T), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.T.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return infoPid(e.T, "container "+id, resp.Info)
}

func kill(t *testing.T, pid int, what string) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", what, pid, err)
	}
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(settle); framework.Running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs after %s", what, pid, settle)
		}
	}
}

func waitPodState(e *framework.PodEnv, pod string, want runtimeapi.PodSandboxState) {
	e.T.Helper()
	for deadline := time.Now().Add(settle); ; time.Sleep(20 * time.Millisecond) {
		resp, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(e.T), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			e.T.Fatalf("PodSandboxStatus %s: %v", pod, err)
		}
		if resp.Status.State == want {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("pod %s still %s after %s, want %s", pod, resp.Status.State, settle, want)
		}
	}
}

func containerState(e *framework.PodEnv, id string) *runtimeapi.ContainerStatus {
	e.T.Helper()
	resp, err := e.D.Runtime.ContainerStatus(framework.Ctx(e.T), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.T.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.Status
}

// listed is each container's state as ListContainers reports it.
func listed(e *framework.PodEnv) map[string]runtimeapi.ContainerState {
	e.T.Helper()
	resp, err := e.D.Runtime.ListContainers(framework.Ctx(e.T), &runtimeapi.ListContainersRequest{})
	if err != nil {
		e.T.Fatalf("ListContainers: %v", err)
	}
	out := map[string]runtimeapi.ContainerState{}
	for _, c := range resp.Containers {
		out[c.Id] = c.State
	}
	return out
}

// stopAndRemove is what the kubelet does with a pod it gave up on: both
// calls must succeed, and the pod and its containers be gone from the lists.
func stopAndRemove(e *framework.PodEnv, pod string) {
	e.T.Helper()
	ctx := framework.Ctx(e.T)
	if _, err := e.D.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		e.T.Fatalf("StopPodSandbox %s: %v", pod, err)
	}
	if _, err := e.D.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		e.T.Fatalf("RemovePodSandbox %s: %v", pod, err)
	}
	pods, err := e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: pod}})
	if err != nil || len(pods.Items) != 0 {
		e.T.Errorf("pod %s still listed after its removal: %v %v", pod, pods, err)
	}
	ctrs, err := e.D.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil || len(ctrs.Containers) != 0 {
		e.T.Errorf("containers of pod %s still listed after its removal: %v %v", pod, ctrs, err)
	}
}

// stopEvents follows GetContainerEvents and reports the containers a
// CONTAINER_STOPPED_EVENT was seen for.
type stopEvents struct {
	t    *testing.T
	seen chan string
}

func watchStops(e *framework.PodEnv) *stopEvents {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(cancel)
	stream, err := e.D.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		e.T.Fatalf("GetContainerEvents: %v", err)
	}
	w := &stopEvents{t: e.T, seen: make(chan string, 64)}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			if ev.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				select {
				case w.seen <- ev.ContainerId:
				default:
				}
			}
		}
	}()
	return w
}

// expect waits for a stop event of every id.
func (w *stopEvents) expect(ids ...string) {
	w.t.Helper()
	missing := map[string]bool{}
	for _, id := range ids {
		missing[id] = true
	}
	timeout := time.After(settle)
	for len(missing) > 0 {
		select {
		case id := <-w.seen:
			delete(missing, id)
		case <-timeout:
			w.t.Errorf("no CONTAINER_STOPPED_EVENT within %s for %v", settle, keys(missing))
			return
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func mountNS(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	return ns
}

// checkMountNS fails unless the monitor's main thread is in the host's
// mount namespace: one left in a container's keeps that container's
// rootfs (and its writable layer's disk space) after its removal.
func checkMountNS(t *testing.T, monitor int) {
	t.Helper()
	if got, want := mountNS(monitor), mountNS(os.Getpid()); got != want {
		t.Errorf("monitor %d is in mount namespace %s, not the host's %s", monitor, got, want)
	}
}

// checkKind: the pod's own process is of the kind the run asked for
// (framework.EnvPodProcess), so that a run with the C pod process kills
// the C pod process.
func checkKind(t *testing.T, monitor int) {
	t.Helper()
	want := framework.PodProcessBinary()
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", monitor)); strings.TrimSpace(string(comm)) != want {
		t.Fatalf("pod process %d is %q, want %s", monitor, comm, want)
	}
}

// waitExecRunning waits until a process other than the container's own
// runs beside it in its cgroup: an exec has started.
func waitExecRunning(t *testing.T, ctrPid int) {
	t.Helper()
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ctrPid))
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, line := range strings.Split(string(cg), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "pids" {
			path = "/sys/fs/cgroup/pids" + f[2] + "/cgroup.procs"
		} else if f[0] == "0" && framework.CgroupV2() {
			path = "/sys/fs/cgroup" + f[2] + "/cgroup.procs"
		}
	}
	for deadline := time.Now().Add(settle); ; time.Sleep(20 * time.Millisecond) {
		if procs, err := os.ReadFile(path); err == nil && len(strings.Fields(string(procs))) > 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exec in the container's cgroup %s after %s", path, settle)
		}
	}
}
