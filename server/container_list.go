package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainers lists containers matching the filter, from memory.
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	return &runtimeapi.ListContainersResponse{Containers: s.containers.List(ctx, req.GetFilter())}, nil
}
