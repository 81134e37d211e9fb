package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateContainerResources changes a container's cgroup limits.
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if err := s.containers.UpdateResources(ctx, req.GetContainerId(), req.GetLinux()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}
