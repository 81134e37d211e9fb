package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus reports a container, from memory.
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	st, info, err := s.containers.Status(ctx, req.GetContainerId(), req.GetVerbose())
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.ContainerStatusResponse{Status: st, Info: info}, nil
}
