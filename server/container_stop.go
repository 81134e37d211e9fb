package server

import (
	"context"
	"math"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer stops a container within the grace period (seconds).
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if req.GetTimeout() < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	if err := s.containers.Stop(ctx, req.GetContainerId(), seconds(req.GetTimeout())); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// seconds is a CRI timeout in seconds as a Duration. A timeout too long to
// be one (about 292 years) is the longest Duration instead of overflowing
// to a negative one, which would mean no grace at all.
func seconds(n int64) time.Duration {
	if n > int64(math.MaxInt64/time.Second) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}
