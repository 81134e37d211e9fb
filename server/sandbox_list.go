package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox lists pods matching the filter, from memory.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	return &runtimeapi.ListPodSandboxResponse{Items: s.sandboxes.List(ctx, req.GetFilter())}, nil
}
