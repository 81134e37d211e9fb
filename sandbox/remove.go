package sandbox

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/faultpoint"
)

// Remove stops the pod if needed, removes its containers and everything
// it has on disk and in the cgroup tree, then forgets it. Removing an
// unknown pod succeeds.
func (m *Manager) Remove(ctx context.Context, id string) error {
	return m.withPod(ctx, id, "RemovePodSandbox", m.remove)
}

func (m *Manager) remove(ctx context.Context, p *pod) error {
	rec, cfg := p.snapshot()
	if err := m.stop(ctx, p); err != nil {
		return err
	}
	if c := m.opts.Containers; c != nil {
		if err := c.RemovePodContainers(ctx, rec.ID); err != nil {
			return fmt.Errorf("remove containers: %w", err)
		}
	}
	m.opts.Faults.Hit(faultpoint.RemoveContainers, rec.ID)
	cg, err := m.openPodCgroup(&rec, cfg)
	if err != nil {
		return err
	}
	last, _, _ := m.Status(ctx, rec.ID, false)
	var described *api.PodSandbox
	if m.opts.NRI.Enabled() {
		described = p.nriDescribe()
	}
	if err := m.purge(ctx, p, cg); err != nil {
		return err
	}
	if described != nil {
		m.opts.NRI.RemovePodSandbox(ctx, described)
	}
	m.log.Info("pod sandbox removed", "pod", rec.ID)
	m.publishStatus(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, rec.ID, last)
	return nil
}

// purge removes a released pod's runtime state, cgroup, files and record,
// and forgets it. The caller names the pod in the error.
func (m *Manager) purge(ctx context.Context, p *pod, cg *podCgroup) error {
	rec, cfg := p.snapshot()
	if err := m.pause.Removed(ctx, rec.ID); err != nil {
		return err
	}
	m.opts.Faults.Hit(faultpoint.RemoveRuntime, rec.ID)
	if err := cg.Destroy(); err != nil {
		return err
	}
	if err := (podFiles{dir: rec.Dir}).remove(); err != nil {
		return err
	}
	m.opts.Faults.Hit(faultpoint.RemoveFiles, rec.ID)
	if err := m.records.Delete(rec.ID); err != nil {
		return err
	}
	p.mu.Lock()
	p.removed = true
	p.mu.Unlock()
	m.drop(rec.ID)
	m.names.Release(nameKey(cfg.GetMetadata()), rec.ID)
	return nil
}
