package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStats measures one pod and its running containers.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	st, err := s.stats.PodSandboxStats(ctx, req.GetPodSandboxId())
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats measures the ready pods matching the filter.
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: s.stats.ListPodSandboxStats(ctx, req.GetFilter())}, nil
}
