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
	// A service that keeps its items encoded answers without encoding
	// them again (container.Service.ListResponse).
	if enc, ok := s.containers.(encodedContainerLister); ok {
		return enc.ListResponse(ctx, req.GetFilter()), nil
	}
	return &runtimeapi.ListContainersResponse{Containers: s.containers.List(ctx, req.GetFilter())}, nil
}

type encodedContainerLister interface {
	ListResponse(ctx context.Context, filter *runtimeapi.ContainerFilter) *runtimeapi.ListContainersResponse
}
