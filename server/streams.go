package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Streams is the streaming server, as *streaming.Server implements it:
// it stores a request and returns the single-use URL that serves it.
type Streams interface {
	GetExec(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(*runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

var errNoStreams = status.Error(codes.Unimplemented, "the streaming server is not enabled in this server")

// runningContainer fails unless the container exists and runs: a URL for
// a session that cannot work would only fail later, less clearly.
func (s *Server) runningContainer(ctx context.Context, id string) error {
	if s.containers == nil {
		return errNoContainers
	}
	if id == "" {
		return invalidf("container_id is required")
	}
	st, _, err := s.containers.Status(ctx, id, false)
	if err != nil {
		return rpcError(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "container %s is not running", st.GetId())
	}
	return nil
}
