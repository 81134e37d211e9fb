package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats measures one container.
func (s *Server) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	if req.GetContainerId() == "" {
		return nil, invalidf("container_id is required")
	}
	st, err := s.stats.ContainerStats(ctx, req.GetContainerId())
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats measures the running containers matching the filter.
func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: s.stats.ListContainerStats(ctx, req.GetFilter())}, nil
}
