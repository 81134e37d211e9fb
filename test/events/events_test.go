package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// watcher reads a GetContainerEvents stream in the background.
type watcher struct {
	t  *testing.T
	ch chan *runtimeapi.ContainerEventResponse
}

func (e *env) watch() *watcher {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(cancel)
	stream, err := e.D.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		e.T.Fatal(err)
	}
	w := &watcher{t: e.T, ch: make(chan *runtimeapi.ContainerEventResponse, 100)}
	go func() {
		defer close(w.ch)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			w.ch <- ev
		}
	}()
	return w
}

// next returns the next event, which must be of type typ about id.
func (w *watcher) next(typ runtimeapi.ContainerEventType, id string) *runtimeapi.ContainerEventResponse {
	w.t.Helper()
	select {
	case ev, ok := <-w.ch:
		if !ok {
			w.t.Fatalf("event stream ended while waiting for %s of %s", typ, id)
		}
		if ev.ContainerEventType != typ || ev.ContainerId != id {
			w.t.Fatalf("got %s of %s, want %s of %s", ev.ContainerEventType, ev.ContainerId, typ, id)
		}
		if ev.CreatedAt == 0 || ev.PodSandboxStatus == nil || ev.PodSandboxStatus.Metadata == nil {
			w.t.Fatalf("event without time or pod status: %v", ev)
		}
		return ev
	case <-time.After(30 * time.Second):
		w.t.Fatalf("no %s event of %s within 30s", typ, id)
		return nil
	}
}

func (w *watcher) none() {
	w.t.Helper()
	select {
	case ev := <-w.ch:
		w.t.Fatalf("unexpected event %s of %s", ev.ContainerEventType, ev.ContainerId)
	case <-time.After(300 * time.Millisecond):
	}
}

func statusOf(ev *runtimeapi.ContainerEventResponse, id string) *runtimeapi.ContainerStatus {
	for _, s := range ev.ContainersStatuses {
		if s.Id == id {
			return s
		}
	}
	return nil
}

const (
	created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// TestContainerEvents follows a pod and a container that exits by itself
// through their lives, on two streams at once.
func TestContainerEvents(t *testing.T) {
	e := newEnv(t)
	w1, w2 := e.watch(), e.watch()
	time.Sleep(100 * time.Millisecond) // let both subscriptions reach the server
	pod, podCfg := e.RunPod("evt")
	for _, w := range []*watcher{w1, w2} {
		ev := w.next(created, pod)
		if ev.PodSandboxStatus.Id != pod || ev.PodSandboxStatus.Metadata.Name != "evt" || ev.PodSandboxStatus.Metadata.Uid != podCfg.Metadata.Uid {
			t.Fatalf("pod status in the event: %v", ev.PodSandboxStatus)
		}
		if st := w.next(started, pod).PodSandboxStatus.State; st != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("pod started, state %s", st)
		}
	}

	// A container that exits by itself, a while after its start: no
	// request is in flight when it does.
	ctr := e.create(pod, podCfg, "quitter", "sleep 1; exit 3")
	ev := w1.next(created, ctr)
	if st := statusOf(ev, ctr); st == nil || st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("created event: container status %v", st)
	}
	e.start(ctr)
	w1.next(started, ctr)
	ev = w1.next(stopped, ctr)
	st := statusOf(ev, ctr)
	if st == nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 || st.Reason != "Error" || st.FinishedAt == 0 {
		t.Fatalf("stopped event: container status %v", st)
	}
	if ev.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("stopped event: pod %s", ev.PodSandboxStatus.State)
	}
	for _, want := range []runtimeapi.ContainerEventType{created, started, stopped} {
		w2.next(want, ctr)
	}

	// One that exits at once: still created, started, stopped, in order.
	instant := e.create(pod, podCfg, "instant", "true")
	e.start(instant)
	w1.next(created, instant)
	w1.next(started, instant)
	if st := statusOf(w1.next(stopped, instant), instant); st.ExitCode != 0 || st.FinishedAt < st.StartedAt {
		t.Fatalf("instant: %v", st)
	}

	// StopContainer of a running container: one stopped event.
	sleeper := e.create(pod, podCfg, "sleeper", "sleep 100000")
	e.start(sleeper)
	w1.next(created, sleeper)
	w1.next(started, sleeper)
	if _, err := e.D.Runtime.StopContainer(framework.Ctx(t), &runtimeapi.StopContainerRequest{ContainerId: sleeper, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(w1.next(stopped, sleeper), sleeper); st.ExitCode != 143 {
		t.Fatalf("stopped sleeper: %v", st)
	}
	w1.none()

	if _, err := e.D.Runtime.RemoveContainer(framework.Ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: ctr}); err != nil {
		t.Fatal(err)
	}
	if ev := w1.next(deleted, ctr); statusOf(ev, ctr) != nil || statusOf(ev, sleeper) == nil {
		t.Fatalf("deleted event: statuses %v", ev.ContainersStatuses)
	}

	// The pod: stopped (its container first, already exited: no event),
	// then removed, with its last status.
	if _, err := e.D.Runtime.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if st := w1.next(stopped, pod).PodSandboxStatus.State; st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("pod stopped, state %s", st)
	}
	if _, err := e.D.Runtime.RemovePodSandbox(framework.Ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	deletedCtrs := map[string]bool{}
	for range 2 {
		ev := <-w1.ch
		if ev.ContainerEventType != deleted {
			t.Fatalf("got %s of %s, want the remaining containers deleted", ev.ContainerEventType, ev.ContainerId)
		}
		deletedCtrs[ev.ContainerId] = true
	}
	if !deletedCtrs[sleeper] || !deletedCtrs[instant] {
		t.Fatalf("deleted %v", deletedCtrs)
	}
	if ev := w1.next(deleted, pod); ev.PodSandboxStatus.Id != pod {
		t.Fatalf("pod deleted: %v", ev.PodSandboxStatus)
	}
	w1.none()
}

func (e *env) create(pod string, podCfg *runtimeapi.PodSandboxConfig, name, script string) string {
	e.T.Helper()
	resp, err := e.D.Runtime.CreateContainer(framework.Ctx(e.T), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, SandboxConfig: podCfg, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.Image},
		Command:  []string{"sh", "-c", script},
	}})
	if err != nil {
		e.T.Fatalf("CreateContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (e *env) start(id string) {
	e.T.Helper()
	if _, err := e.D.Runtime.StartContainer(framework.Ctx(e.T), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.T.Fatal(fmt.Errorf("StartContainer: %w", err))
	}
}

// TestPodEventWhenPauseDies: pause killed behind berth's back makes the
// pod not ready, and the event says so with no request in flight.
func TestPodEventWhenPauseDies(t *testing.T) {
	e := newEnv(t)
	w := e.watch()
	time.Sleep(100 * time.Millisecond)
	pod, _ := e.RunPod("doomed")
	w.next(created, pod)
	w.next(started, pod)
	resp, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("pause pid from %q: %v", resp.Info["info"], err)
	}
	if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := w.next(stopped, pod).PodSandboxStatus.State; st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("pod state in the event: %s", st)
	}
}
