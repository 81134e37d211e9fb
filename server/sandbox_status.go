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
	st, info, err := s.sandboxes.Status(ctx, req.GetPodSandboxId(), req.GetVerbose())
	if err != nil {
		return nil, sandboxError(err)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info, Timestamp: time.Now().UnixNano()}, nil
}
