// Package events carries container lifecycle events from the services
// that see them happen (the container and sandbox services, including
// exits nobody asked about) to the GetContainerEvents streams.
package events

import (
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Event is one lifecycle change. ContainerID is the pod's id for events
// about the pod sandbox itself, as the kubelet expects.
type Event struct {
	Type        runtimeapi.ContainerEventType
	ContainerID string
	PodID       string
	At          time.Time
	// Pod is the pod's status when the event happened, if the publisher
	// has it: after a pod's removal nobody else does.
	Pod *runtimeapi.PodSandboxStatus
}

// Bus fans events out to subscribers. A nil *Bus drops every event, so
// services built without one need no checks.
type Bus struct {
	mu   sync.Mutex
	subs map[*Sub]struct{}
}

// NewBus returns a bus with no subscribers.
func NewBus() *Bus { return &Bus{subs: map[*Sub]struct{}{}} }

// Sub is one subscriber.
type Sub struct {
	// C delivers the events, in the order they were published.
	C    <-chan Event
	c    chan Event
	bus  *Bus
	lost chan struct{}
	once sync.Once
}

// Subscribe returns a subscriber that may fall behind by buffer events.
func (b *Bus) Subscribe(buffer int) *Sub {
	c := make(chan Event, buffer)
	s := &Sub{C: c, c: c, bus: b, lost: make(chan struct{})}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// Lost is closed when the subscriber fell too far behind and was cut
// off: it must start over (list what exists) rather than miss events
// silently.
func (s *Sub) Lost() <-chan struct{} { return s.lost }

// Close unsubscribes.
func (s *Sub) Close() {
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
}

// Publish hands e to every subscriber without ever blocking the service
// that publishes it.
func (b *Bus) Publish(e Event) {
	if b == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.c <- e:
		default:
			delete(b.subs, s)
			s.once.Do(func() { close(s.lost) })
		}
	}
}
