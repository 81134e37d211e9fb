package events_test

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestPodSandboxStatusContainers checks what the kubelet's Evented PLEG
// reads of PodSandboxStatus: a timestamp, and with it the statuses of
// every container of that pod and of no other (GetPodStatus then asks
// for no container one by one; without them it takes the pod for one
// with no containers and creates them again).
func TestPodSandboxStatusContainers(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	status := func(pod string) *runtimeapi.PodSandboxStatusResponse {
		t.Helper()
		resp, err := e.D.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	pod, podCfg := e.RunPod("pss")
	other, otherCfg := e.RunPod("pss-other")
	before := time.Now().UnixNano()
	if resp := status(pod); resp.Timestamp < before || len(resp.ContainersStatuses) != 0 {
		t.Fatalf("pod without containers: timestamp %d (asked at %d), %d container statuses", resp.Timestamp, before, len(resp.ContainersStatuses))
	}
	running := e.create(pod, podCfg, "running", "sleep 100000")
	e.start(running)
	created := e.create(pod, podCfg, "created", "true")
	elsewhere := e.create(other, otherCfg, "elsewhere", "sleep 100000")
	e.start(elsewhere)

	got := map[string]runtimeapi.ContainerState{}
	for _, st := range status(pod).ContainersStatuses {
		if st.Metadata == nil || st.Image == nil {
			t.Fatalf("container status without metadata or image: %v", st)
		}
		got[st.Id] = st.State
	}
	want := map[string]runtimeapi.ContainerState{running: runtimeapi.ContainerState_CONTAINER_RUNNING, created: runtimeapi.ContainerState_CONTAINER_CREATED}
	if len(got) != len(want) || got[running] != want[running] || got[created] != want[created] {
		t.Fatalf("container statuses of the pod: got %v, want %v (the other pod's %s must not be among them)", got, want, elsewhere)
	}
	if sts := status(other).ContainersStatuses; len(sts) != 1 || sts[0].Id != elsewhere {
		t.Fatalf("the other pod's container statuses: %v", sts)
	}
}
