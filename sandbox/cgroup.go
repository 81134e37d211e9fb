package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// Cgroup drivers, as the kubelet names them.
const (
	DriverCgroupfs = string(cgroup.Cgroupfs)
	DriverSystemd  = string(cgroup.Systemd)
)

// podParent is the parent the kubelet gave the pod (its own cgroup,
// holding pause and the containers), or berth's default, shared by every
// pod that names none.
func (m *Manager) podParent(cfg *runtimeapi.PodSandboxConfig) (cgroup.Parent, error) {
	name := cfg.GetLinux().GetCgroupParent()
	if name == "" {
		return m.defaultParent, nil
	}
	return m.cgroups.Parent(name)
}

// podCgroup is pause's cgroup, a child of the pod's parent named by the
// pod's id: a directory in every hierarchy (each v1 controller, the named
// ones and, on a hybrid host, the unified one) with cgroupfs, the scope
// berth-<id>.scope with systemd.
type podCgroup struct {
	cg  cgroup.Cgroup
	mgr *cgroup.Manager
}

// newPodCgroup makes the pause cgroup of a new pod id from its config.
func (m *Manager) newPodCgroup(id string, cfg *runtimeapi.PodSandboxConfig) (*podCgroup, error) {
	parent, err := m.podParent(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return openCgroup(parent.Child(id))
}

// pauseCgroup is the pause cgroup a pod's record names.
func (m *Manager) pauseCgroup(rec *Record, cfg *runtimeapi.PodSandboxConfig) (cgroup.Cgroup, error) {
	if rec.Cgroup != "" {
		return m.cgroups.FromSpec(rec.Cgroup)
	}
	parent, err := m.podParent(cfg)
	if err != nil {
		return cgroup.Cgroup{}, err
	}
	return parent.Child(rec.ID), nil
}

// openPodCgroup opens again the pause cgroup a pod's record names.
func (m *Manager) openPodCgroup(rec *Record, cfg *runtimeapi.PodSandboxConfig) (*podCgroup, error) {
	cg, err := m.pauseCgroup(rec, cfg)
	if err != nil {
		return nil, err
	}
	return openCgroup(cg)
}

func openCgroup(cg cgroup.Cgroup) (*podCgroup, error) {
	mgr, err := cg.Manager(nil)
	if err != nil {
		return nil, err
	}
	return &podCgroup{cg: cg, mgr: mgr}, nil
}

// Prepare makes what can be made before pause runs and returns the
// cgroup's directories by hierarchy, for pause's runtime to join it.
func (c *podCgroup) Prepare() (map[string]string, error) { return c.mgr.Prepare() }

// Attach moves pid (pause, started by berth itself) into the cgroup.
func (c *podCgroup) Attach(pid int) error { return c.mgr.Join(pid) }

// KillAll SIGKILLs whatever still runs in the cgroup and waits for it to
// exit: what a crash in the middle of RunPodSandbox can leave behind.
func (c *podCgroup) KillAll(ctx context.Context) error {
	// Every hierarchy is asked: a crash may have come between joining
	// one controller and the next.
	pids := map[int]bool{}
	for _, dir := range c.mgr.GetPaths() {
		list, err := cgroups.GetAllPids(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("list cgroup %s: %w", c.cg.Path(), err)
		}
		for _, pid := range list {
			pids[pid] = true
		}
	}
	var errs []error
	for pid := range pids {
		p, err := OpenProcess(pid, 0, nil)
		if err != nil {
			continue // already gone
		}
		if err := p.Stop(ctx, 0); err != nil {
			errs = append(errs, err)
		}
		p.Close()
	}
	return errors.Join(errs...)
}

// Destroy removes the cgroup, a missing one included: with systemd the
// scope is stopped and reset (a failed unit is not left behind), and the
// directories systemd does not manage are removed.
func (c *podCgroup) Destroy() error {
	if err := c.mgr.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.cg.Path(), err)
	}
	return nil
}

// Exists reports whether the cgroup is still there in some hierarchy.
func (c *podCgroup) Exists() bool {
	for _, p := range c.mgr.GetPaths() {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
