package server

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus reports one pod, from memory.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	// Recorded before the statuses are read: the kubelet keeps what is
	// newest by this time, and the statuses are at least this new.
	at := time.Now()
	st, info, err := s.sandboxes.Status(ctx, req.GetPodSandboxId(), req.GetVerbose())
	if err != nil {
		return nil, rpcError(err)
	}
	// With a timestamp set, the kubelet's Evented PLEG takes the pod's
	// container statuses from this response instead of asking for each:
	// without them, it would take the pod for one with no containers and
	// create them again.
	return &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info, Timestamp: at.UnixNano(), ContainersStatuses: s.podContainerStatuses(ctx, st.GetId())}, nil
}

// podContainerStatuses are the statuses of a pod's containers.
func (s *Server) podContainerStatuses(ctx context.Context, podID string) []*runtimeapi.ContainerStatus {
	if s.containers == nil || podID == "" {
		return nil
	}
	return s.containers.PodStatuses(ctx, podID)
}
