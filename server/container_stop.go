package server

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer stops a container within the grace period (seconds).
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if req.GetTimeout() < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	if err := s.containers.Stop(ctx, req.GetContainerId(), time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, containerError(err)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}
