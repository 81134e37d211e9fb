package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec returns the URL of an interactive exec session.
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if s.streams == nil {
		return nil, errNoStreams
	}
	if err := s.runningContainer(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	return s.streams.GetExec(req)
}
