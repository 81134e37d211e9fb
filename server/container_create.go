package server

import (
	"context"
	"fmt"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
)

// CreateContainer creates a container in a pod, ready to start.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	// The CRI: log_path is relative to the pod's log_directory. One that
	// climbs out of it would have the pod process create and write a
	// root-owned file anywhere on the host.
	if lp := req.GetConfig().GetLogPath(); lp != "" && !filepath.IsAbs(lp) && !filepath.IsLocal(lp) {
		return nil, invalidf("config.log_path: %q climbs out of the pod's log_directory", lp)
	}
	if err := checkContainerConfig(req.GetConfig()); err != nil {
		return nil, rpcError(err)
	}
	id, err := s.containers.Create(ctx, req.GetPodSandboxId(), req.GetConfig(), req.GetSandboxConfig())
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

// checkContainerConfig refuses a config without what every container
// needs, in the container service's words.
func checkContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("%w: config: missing", container.ErrInvalid)
	case cfg.GetMetadata().GetName() == "":
		return fmt.Errorf("%w: config.metadata.name: missing", container.ErrInvalid)
	case cfg.GetImage().GetImage() == "":
		return fmt.Errorf("%w: config.image.image: missing", container.ErrInvalid)
	}
	return nil
}
