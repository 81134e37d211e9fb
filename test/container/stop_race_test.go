package container_test

import (
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	fp "github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// TestStopPodSandboxWithContainerMadeMeanwhile plays a kubelet that
// creates and starts a container while the pod is being stopped (its
// create found the pod ready): the stop, held 3 s after it stopped the
// pod's containers (a fault point's delay), must stop that one too and
// succeed, not fail on a monitor that still has a running container.
func TestStopPodSandboxWithContainerMadeMeanwhile(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "reached")
	e := newEnv(t, framework.WithEnv(fp.Env(fp.StopContainers, marker, 3*time.Second)...))
	podCfg := e.podConfig("stoprace")
	pod := e.runPod(podCfg)
	first := e.run(pod, podCfg, e.ctrConfig("first", "sleep 100000"))

	stopped := make(chan error, 1)
	go func() {
		_, err := e.d.Runtime.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		stopped <- err
	}()
	framework.WaitFile(t, marker, 20*time.Second, "the stop did not reach its containers-stopped step")
	late := e.run(pod, podCfg, e.ctrConfig("late", "sleep 100000"))
	if err := <-stopped; err != nil {
		t.Fatalf("StopPodSandbox with a container made while it ran: %v", err)
	}
	for _, id := range []string{first, late} {
		if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s after the pod's stop: %s", id, st.State)
		}
	}
	resp, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("pod after its stop: %v, %v", resp.GetStatus().GetState(), err)
	}
}
