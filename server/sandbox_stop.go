package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox stops a pod; stopping a stopped or unknown pod succeeds.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if err := s.sandboxes.Stop(ctx, req.GetPodSandboxId()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}
