package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateRuntimeConfig takes the node's pod CIDR, which IPAM then assigns
// pod IPs from. The kubelet sends it once it knows it; an empty CIDR is a
// no-op.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if cidr == "" || s.sandboxes == nil {
		return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
	}
	if err := s.sandboxes.UpdatePodCIDR(ctx, cidr); err != nil {
		return nil, rpcError(err)
	}
	s.log.Info("pod CIDR updated", "pod_cidr", cidr)
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}
