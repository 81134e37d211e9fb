package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog starts a new log file after the kubelet rotated it.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if err := s.containers.ReopenLog(ctx, req.GetContainerId()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
