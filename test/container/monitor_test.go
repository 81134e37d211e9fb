package container_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// podStatus returns a pod's state and the pid of its pause.
func (e *env) podStatus(id string) (runtimeapi.PodSandboxState, int) {
	e.t.Helper()
	resp, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(e.t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("PodSandboxStatus: %v", err)
	}
	return resp.Status.State, infoPid(e.t, resp.Info)
}

// containerPid is the pid in a container's verbose status.
func (e *env) containerPid(id string) int {
	e.t.Helper()
	resp, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("ContainerStatus: %v", err)
	}
	return infoPid(e.t, resp.Info)
}

func infoPid(t *testing.T, info map[string]string) int {
	t.Helper()
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
		t.Fatalf("verbose info %q: %v", info["info"], err)
	}
	return v.Pid
}

// TestMonitorKilled: a pod's monitor dies. Its containers are reported
// exited with a reason that says so, the pod is not ready (berth ends its
// pause: nobody would record its exit), and the pod is stopped and
// removed cleanly.
func TestMonitorKilled(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("monkill")
	pod := e.runPod(podCfg)
	id := e.run(pod, podCfg, e.ctrConfig("sleeper", "sleep 1000"))
	_, pause := e.podStatus(pod)
	mon := framework.MonitorOf(e.t, pod, pause)
	ctrPid := e.containerPid(id)
	if ctrPid == 0 || framework.ParentPID(t, ctrPid) != mon {
		t.Fatalf("container pid %d is not the monitor's (%d) child", ctrPid, mon)
	}

	syscall.Kill(mon, syscall.SIGKILL)
	st := e.waitExit(id, 10*time.Second)
	if st.Reason != "MonitorGone" || !strings.Contains(st.Message, "monitor") {
		t.Errorf("container after its monitor died: reason %q message %q", st.Reason, st.Message)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if state, _ := e.podStatus(pod); state == runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod still ready after its monitor died")
		}
	}
	for _, pid := range []int{pause, ctrPid} {
		for deadline := time.Now().Add(5 * time.Second); framework.Running(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d of the pod still runs", pid)
			}
		}
	}
	ctx := framework.Ctx(t)
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	var left []string
	filepath.WalkDir(e.d.State, func(p string, de os.DirEntry, err error) error {
		if err == nil && (strings.Contains(de.Name(), pod[:16]) || strings.Contains(de.Name(), id)) {
			left = append(left, p)
		}
		return nil
	})
	left = append(left, framework.CgroupDirs([]string{e.parent})...)
	if len(left) > 0 {
		t.Errorf("left after remove: %v", left)
	}
}
