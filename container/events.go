package container

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/events"
)

// publish reports a lifecycle change of a container. The pod's infra
// container is the pod sandbox's business: its changes are the pod's.
func (s *Service) publish(t runtimeapi.ContainerEventType, rec *Record) {
	if rec.Sandbox {
		return
	}
	s.opts.Events.Publish(events.Event{Type: t, ContainerID: rec.ID, PodID: rec.PodID, At: time.Now()})
}
