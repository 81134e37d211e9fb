package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StartContainer starts a created container.
func (s *Server) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if err := s.containers.Start(ctx, req.GetContainerId()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}
