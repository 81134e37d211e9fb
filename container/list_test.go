package container

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/reserve"
)

// ListResponse, decoded as a client does, holds what List returns, for
// every filter, and follows a container's state change.
func TestListResponse(t *testing.T) {
	s := newTestService(t)
	pods := []string{"aa" + reserve.NewID()[2:], "bb" + reserve.NewID()[2:]}
	states := []State{StateCreated, StateRunning, StateExited}
	var ids []string
	for i := range 6 {
		id := reserve.NewID()
		ids = append(ids, id)
		s.ctrs[id] = &ctr{
			rec: Record{ID: id, PodID: pods[i%2], State: states[i%3], ImageRef: "sha256:ref", ImageID: "sha256:img", CreatedAt: int64(1000 + i)},
			cfg: &runtimeapi.ContainerConfig{
				Metadata:    &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i), Attempt: uint32(i)},
				Image:       &runtimeapi.ImageSpec{Image: "busybox"},
				Labels:      map[string]string{"app": []string{"x", "y"}[i%2], "io.kubernetes.pod.name": "p"},
				Annotations: map[string]string{"io.kubernetes.container.hash": fmt.Sprint(i)},
			},
			exited: make(chan struct{}),
		}
	}
	// Neither listed: one being created, and a pod's infra container.
	s.ctrs["creating"] = &ctr{rec: Record{ID: "creating", PodID: pods[0], State: StateCreating}, cfg: &runtimeapi.ContainerConfig{}, exited: make(chan struct{})}
	s.ctrs["infra"] = &ctr{rec: Record{ID: "infra", PodID: pods[0], State: StateRunning, Sandbox: true}, cfg: &runtimeapi.ContainerConfig{}, exited: make(chan struct{})}

	filters := []*runtimeapi.ContainerFilter{
		nil,
		{},
		{Id: ids[3]},
		{Id: ids[3][:10]},
		{PodSandboxId: pods[1]},
		{PodSandboxId: pods[0][:4]},
		{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}},
		{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}},
		{LabelSelector: map[string]string{"app": "y"}},
		{LabelSelector: map[string]string{"app": "y", "io.kubernetes.pod.name": "p"}},
		{PodSandboxId: pods[0], State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}, LabelSelector: map[string]string{"app": "x"}},
		{LabelSelector: map[string]string{"app": "z"}},
		{Id: "nosuch"},
	}
	for _, f := range filters {
		checkListResponse(t, s, f)
	}
	// Encoded once: a second call reuses the items.
	c := s.ctrs[ids[0]]
	before := c.listed.Load()
	checkListResponse(t, s, nil)
	if before == nil || c.listed.Load() != before {
		t.Errorf("the encoded item was rebuilt without a change")
	}
	// A state change is seen, in the item and by the state filter.
	c.mu.Lock()
	c.rec.State = StateExited
	c.mu.Unlock()
	for _, f := range filters {
		checkListResponse(t, s, f)
	}
	if got := listedStates(t, s, &runtimeapi.ContainerFilter{Id: ids[0]}); len(got) != 1 || got[0] != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("after the exit, ListResponse has states %v, want [EXITED]", got)
	}
}

// checkListResponse decodes ListResponse, with its pre-encoded items, as a
// client does, and compares it with List (order aside: both follow a map).
func checkListResponse(t *testing.T, s *Service, f *runtimeapi.ContainerFilter) {
	t.Helper()
	got := decodeListResponse(t, s, f)
	want := s.List(context.Background(), f)
	byID := func(l []*runtimeapi.Container) {
		sort.Slice(l, func(i, j int) bool { return l[i].Id < l[j].Id })
	}
	byID(got.Containers)
	byID(want)
	if len(got.Containers) != len(want) || !proto.Equal(got, &runtimeapi.ListContainersResponse{Containers: want}) {
		t.Errorf("ListResponse(%v) decodes to\n%v\nwant (List)\n%v", f, got, want)
	}
}

func decodeListResponse(t *testing.T, s *Service, f *runtimeapi.ContainerFilter) *runtimeapi.ListContainersResponse {
	t.Helper()
	data, err := proto.Marshal(s.ListResponse(context.Background(), f))
	if err != nil {
		t.Fatal(err)
	}
	var got runtimeapi.ListContainersResponse
	if err := proto.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func listedStates(t *testing.T, s *Service, f *runtimeapi.ContainerFilter) []runtimeapi.ContainerState {
	var out []runtimeapi.ContainerState
	for _, c := range decodeListResponse(t, s, f).Containers {
		out = append(out, c.State)
	}
	return out
}
