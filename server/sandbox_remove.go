package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox removes a pod, stopping it first; removing an unknown
// pod succeeds.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if err := s.sandboxes.Remove(ctx, req.GetPodSandboxId()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
