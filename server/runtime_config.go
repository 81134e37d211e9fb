package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/config"
)

// RuntimeConfig tells the kubelet which cgroup driver to use; it takes this
// over its own setting.
func (s *Server) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: s.cgroupDriver},
	}, nil
}

// cgroupDriver maps the config value explicitly: the enum's zero value is
// SYSTEMD, so a forgotten mapping would silently send the kubelet to
// systemd.
func cgroupDriver(name string) (runtimeapi.CgroupDriver, error) {
	switch name {
	case config.CgroupDriverCgroupfs:
		return runtimeapi.CgroupDriver_CGROUPFS, nil
	case config.CgroupDriverSystemd:
		return runtimeapi.CgroupDriver_SYSTEMD, nil
	default:
		return 0, fmt.Errorf("unknown cgroup driver %q", name)
	}
}
