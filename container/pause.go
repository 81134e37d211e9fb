package container

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgroup"
)

// StartInfra runs pause from an image as a pod's infra container (the
// pause_image setting), through the pod's own process like any container,
// with the pod's id as its own, in the pod's cgroup: the child of
// cgroupParent named by that id. It returns the infra process's pid.
func (s *Service) StartInfra(ctx context.Context, podID string, podCfg *runtimeapi.PodSandboxConfig, netns string, cgroupParent cgroup.Parent, image string) (int, error) {
	pod := spec.Pod{ID: podID, Config: podCfg, NetNSPath: netns, CgroupParent: cgroupParent}
	psc := podCfg.GetLinux().GetSecurityContext()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "POD"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Privileged:       psc.GetPrivileged(),
			NamespaceOptions: psc.GetNamespaceOptions(),
			SelinuxOptions:   psc.GetSelinuxOptions(),
			RunAsUser:        psc.GetRunAsUser(),
			RunAsGroup:       psc.GetRunAsGroup(),
			ReadonlyRootfs:   psc.GetReadonlyRootfs(),
			Seccomp:          psc.GetSeccomp(),
		}},
	}
	c, err := s.create(ctx, podID, pod, cfg, podCfg, true, nil)
	if err != nil {
		return 0, err
	}
	if err := s.start(ctx, c); err != nil {
		return 0, err
	}
	return c.snapshot().Pid, nil
}

// RemoveInfra forgets a stopped pod's infra container, if it has one:
// its rootfs, image lease and record.
func (s *Service) RemoveInfra(ctx context.Context, podID string) error {
	s.mu.RLock()
	infra := s.ctrs[podID]
	s.mu.RUnlock()
	if infra == nil || !infra.rec.Sandbox {
		return nil
	}
	rec := infra.snapshot()
	if err := s.release(ctx, &rec); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.ctrs, podID)
	s.mu.Unlock()
	return nil
}
