package server

import (
	"context"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxCheckpointTimeout caps a request's timeout (seconds, which a
// Duration cannot hold beyond 292 years).
const maxCheckpointTimeout = 24 * time.Hour

// CheckpointContainer dumps a running container with CRIU into a tar at
// the request's location, the container left running (KEP-2008).
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	loc := req.GetLocation()
	switch {
	case loc == "":
		return nil, status.Error(codes.InvalidArgument, "location: required")
	case !filepath.IsAbs(loc):
		return nil, status.Errorf(codes.InvalidArgument, "location: %q is not an absolute path", loc)
	case req.GetTimeout() < 0:
		return nil, status.Errorf(codes.InvalidArgument, "timeout: %d is negative", req.GetTimeout())
	}
	timeout := maxCheckpointTimeout
	if req.GetTimeout() < int64(maxCheckpointTimeout/time.Second) {
		timeout = time.Duration(req.GetTimeout()) * time.Second
	}
	if err := s.containers.Checkpoint(ctx, req.GetContainerId(), loc, timeout); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}
