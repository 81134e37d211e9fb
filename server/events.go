package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/events"
)

// eventBuffer is how many events a client may lag behind before its
// stream is ended (it then lists again, as the kubelet does on errors).
const eventBuffer = 4096

// GetContainerEvents streams container and pod sandbox lifecycle events,
// each with the pod's status and its containers' statuses, until the
// client goes away.
func (s *Server) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	if s.events == nil || s.sandboxes == nil || s.containers == nil {
		return status.Error(codes.Unimplemented, "container events are not enabled in this server")
	}
	ctx := stream.Context()
	sub := s.events.Subscribe(eventBuffer)
	defer sub.Close()
	// A pod's last known status, for the events that come after it is gone.
	pods := map[string]*runtimeapi.PodSandboxStatus{}
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-sub.Lost():
			return status.Error(codes.ResourceExhausted, "the event stream fell behind and was ended: list pods and containers again")
		case e := <-sub.C:
			resp := s.eventResponse(ctx, e, pods)
			if resp == nil {
				s.log.Debug("event without a known pod dropped", "container", e.ContainerID, "pod", e.PodID, "type", e.Type)
				continue
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func (s *Server) eventResponse(ctx context.Context, e events.Event, pods map[string]*runtimeapi.PodSandboxStatus) *runtimeapi.ContainerEventResponse {
	pod := e.Pod
	if pod == nil {
		if st, _, err := s.sandboxes.Status(ctx, e.PodID, false); err == nil {
			pod = st
		} else {
			pod = pods[e.PodID]
		}
	}
	if pod == nil {
		return nil
	}
	if e.Type == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT && e.ContainerID == e.PodID {
		delete(pods, e.PodID)
	} else {
		pods[e.PodID] = pod
	}
	resp := &runtimeapi.ContainerEventResponse{
		ContainerId:        e.ContainerID,
		ContainerEventType: e.Type,
		CreatedAt:          e.At.UnixNano(),
		PodSandboxStatus:   pod,
		ContainersStatuses: s.podContainerStatuses(ctx, e.PodID),
	}
	return resp
}
