package sandbox

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/events"
)

// publish reports a change of the pod sandbox itself, under the pod's id
// (as the kubelet's event-driven PLEG expects sandbox changes), with the
// pod's status as it is now.
func (m *Manager) publish(t runtimeapi.ContainerEventType, id string) {
	if m.opts.Events == nil {
		return
	}
	st, _, _ := m.Status(context.Background(), id, false)
	m.publishStatus(t, id, st)
}

func (m *Manager) publishStatus(t runtimeapi.ContainerEventType, id string, st *runtimeapi.PodSandboxStatus) {
	m.opts.Events.Publish(events.Event{Type: t, ContainerID: id, PodID: id, At: time.Now(), Pod: st})
}

// publishStarted reports a new pod as created and started, both with the
// same status, built once.
func (m *Manager) publishStarted(id string) {
	if m.opts.Events == nil {
		return
	}
	st, _, _ := m.Status(context.Background(), id, false)
	m.publishStatus(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, id, st)
	m.publishStatus(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, id, st)
}
