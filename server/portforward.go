package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PortForward returns the URL of a port-forwarding session into a pod.
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if s.streams == nil {
		return nil, errNoStreams
	}
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	st, _, err := s.sandboxes.Status(ctx, req.GetPodSandboxId(), false)
	if err != nil {
		return nil, rpcError(err)
	}
	if st.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready", st.GetId())
	}
	req.PodSandboxId = st.GetId()
	return s.streams.GetPortForward(req)
}
