package events

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestBus(t *testing.T) {
	var nilBus *Bus
	nilBus.Publish(Event{}) // no panic

	b := NewBus()
	fast, slow := b.Subscribe(10), b.Subscribe(1)
	defer fast.Close()
	for _, id := range []string{"a", "b", "c"} {
		b.Publish(Event{Type: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, ContainerID: id})
	}
	for _, want := range []string{"a", "b", "c"} {
		if e := <-fast.C; e.ContainerID != want || e.At.IsZero() {
			t.Fatalf("got %+v, want %s", e, want)
		}
	}
	select {
	case <-slow.Lost():
	default:
		t.Fatal("a subscriber that fell behind was not told")
	}
	if e := <-slow.C; e.ContainerID != "a" {
		t.Fatalf("slow got %+v", e)
	}
	fast.Close()
	b.Publish(Event{ContainerID: "d"})
	select {
	case e := <-fast.C:
		t.Fatalf("closed subscriber got %+v", e)
	default:
	}
}
