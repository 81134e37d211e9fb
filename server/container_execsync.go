package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSync runs a command in a container and returns its output.
func (s *Server) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if len(req.GetCmd()) == 0 {
		return nil, invalidf("cmd is required")
	}
	if req.GetTimeout() < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	res, err := s.containers.ExecSync(ctx, req.GetContainerId(), req.GetCmd(), seconds(req.GetTimeout()))
	if err != nil {
		return nil, containerError(err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}
