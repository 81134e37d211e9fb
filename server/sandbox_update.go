package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodResources applies pod-level resources, as *sandbox.Manager does.
type PodResources interface {
	UpdateResources(ctx context.Context, id string, overhead, res *runtimeapi.LinuxContainerResources) error
}

// UpdatePodSandboxResources applies the pod-level resources the kubelet
// computed after a resize to the pod's cgroup.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if req.GetResources() == nil {
		return nil, invalidf("resources is required")
	}
	u, ok := s.sandboxes.(PodResources)
	if !ok {
		return nil, errNoSandboxes
	}
	if err := u.UpdateResources(ctx, req.GetPodSandboxId(), req.GetOverhead(), req.GetResources()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
