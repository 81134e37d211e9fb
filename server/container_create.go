package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CreateContainer creates a container in a pod, ready to start.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	id, err := s.containers.Create(ctx, req.GetPodSandboxId(), req.GetConfig(), req.GetSandboxConfig())
	if err != nil {
		return nil, containerError(err)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}
