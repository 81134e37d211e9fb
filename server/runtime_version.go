package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/version"
)

const (
	runtimeName = "berth"
	// criAPIVersion is the CRI version served, as the kubelet expects it.
	criAPIVersion = "v1"
)

// Version is the first call the kubelet makes; it exits if this fails.
func (s *Server) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           version.CRIVersion,
		RuntimeName:       runtimeName,
		RuntimeVersion:    version.Version,
		RuntimeApiVersion: criAPIVersion,
	}, nil
}
