package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Attach returns the URL of a session attached to a container's streams.
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if s.streams == nil {
		return nil, errNoStreams
	}
	if err := s.runningContainer(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	return s.streams.GetAttach(req)
}
