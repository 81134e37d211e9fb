package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports the runtime and network conditions; the node is Ready
// only when both are true.
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	net := s.network.Status(ctx)
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: net.Ready, Reason: net.Reason, Message: net.Message},
		}},
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"config": s.configJSON}
	}
	return resp, nil
}
