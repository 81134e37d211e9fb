package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveContainer removes a container; removing an unknown one succeeds.
func (s *Server) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if err := s.containers.Remove(ctx, req.GetContainerId()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}
