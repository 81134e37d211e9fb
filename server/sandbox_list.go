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
	// A service that keeps its items encoded answers without encoding
	// them again (sandbox.Manager.ListResponse).
	if enc, ok := s.sandboxes.(encodedSandboxLister); ok {
		return enc.ListResponse(ctx, req.GetFilter()), nil
	}
	return &runtimeapi.ListPodSandboxResponse{Items: s.sandboxes.List(ctx, req.GetFilter())}, nil
}

type encodedSandboxLister interface {
	ListResponse(ctx context.Context, filter *runtimeapi.PodSandboxFilter) *runtimeapi.ListPodSandboxResponse
}
