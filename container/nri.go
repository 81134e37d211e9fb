package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/nri"
)

// NRI: the container side of berth's NRI support (package nri). The hooks
// themselves are called from create.go, lifecycle.go and exec.go; this
// file describes containers to plugins and applies what plugins ask for.

// nriContainer describes a container to NRI plugins: from its record and
// CRI config, and from its OCI spec for what the container really gets.
func nriContainer(rec *Record, cfg *runtimeapi.ContainerConfig, oci *specs.Spec) *api.Container {
	c := &api.Container{
		Id:           rec.ID,
		PodSandboxId: rec.PodID,
		Name:         cfg.GetMetadata().GetName(),
		State:        nriState(rec.State),
		Labels:       cfg.GetLabels(),
		Annotations:  cfg.GetAnnotations(),
		CreatedAt:    rec.CreatedAt,
		StartedAt:    rec.StartedAt,
		Image:        &api.Image{Name: cfg.GetImage().GetImage()},
	}
	if rec.State == StateRunning || rec.State == StateCreated {
		c.Pid = uint32(rec.Pid)
	}
	if e := rec.Exit; e != nil && rec.State == StateExited {
		c.FinishedAt = e.FinishedAt.UnixNano()
		c.ExitCode = int32(e.Code)
		c.StatusMessage = e.Message
		c.StatusReason = exitReason(rec.Reason, e)
	}
	if oci == nil {
		return c
	}
	if len(oci.Annotations) > 0 {
		c.Annotations = oci.Annotations
	}
	c.Mounts = api.FromOCIMounts(oci.Mounts)
	c.Hooks = api.FromOCIHooks(oci.Hooks)
	if p := oci.Process; p != nil {
		c.Args = p.Args
		c.Env = p.Env
		for _, r := range p.Rlimits {
			c.Rlimits = append(c.Rlimits, &api.POSIXRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft})
		}
		c.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: p.User.AdditionalGids}
	}
	if l := oci.Linux; l != nil {
		lc := &api.LinuxContainer{
			Namespaces:  api.FromOCILinuxNamespaces(l.Namespaces),
			Devices:     api.FromOCILinuxDevices(l.Devices),
			Resources:   api.FromOCILinuxResources(l.Resources, nil),
			CgroupsPath: l.CgroupsPath,
			Sysctl:      l.Sysctl,
			NetDevices:  api.FromOCILinuxNetDevices(l.NetDevices),
		}
		if l.Seccomp != nil {
			lc.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
		if p := oci.Process; p != nil {
			if p.OOMScoreAdj != nil {
				lc.OomScoreAdj = api.Int(*p.OOMScoreAdj)
			}
			lc.IoPriority = api.FromOCILinuxIOPriority(p.IOPriority)
			lc.Scheduler = api.FromOCILinuxScheduler(p.Scheduler)
		}
		lc.SeccompProfile = seccompProfile(cfg.GetLinux().GetSecurityContext().GetSeccomp())
		c.Linux = lc
	}
	return c
}

func nriState(s State) api.ContainerState {
	switch s {
	case StateCreated:
		return api.ContainerState_CONTAINER_CREATED
	case StateRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case StateExited:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

func seccompProfile(p *runtimeapi.SecurityProfile) *api.SecurityProfile {
	if p == nil {
		return nil
	}
	out := &api.SecurityProfile{LocalhostRef: p.GetLocalhostRef()}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_Unconfined:
		out.ProfileType = api.SecurityProfile_UNCONFINED
	case runtimeapi.SecurityProfile_Localhost:
		out.ProfileType = api.SecurityProfile_LOCALHOST
	default:
		out.ProfileType = api.SecurityProfile_RUNTIME_DEFAULT
	}
	return out
}

// nriDescribe describes c as it is now.
func (c *ctr) nriDescribe() *api.Container {
	c.mu.RLock()
	rec, cfg, raw := c.rec, c.cfg, c.spec
	c.mu.RUnlock()
	var oci *specs.Spec
	if len(raw) > 0 {
		oci = &specs.Spec{}
		if json.Unmarshal(raw, oci) != nil {
			oci = nil
		}
	}
	return nriContainer(&rec, cfg, oci)
}

// nriHost is what NRI adjustments must respect here.
func (s *Service) nriHost() nri.Host {
	return nri.Host{CgroupV2: s.host.CgroupV2(), MinOOMScoreAdj: s.host.OwnOOMScoreAdj()}
}

// nriStopped tells plugins that c has stopped (once; no-op without NRI).
func (s *Service) nriStopped(ctx context.Context, c *ctr) {
	if s.opts.NRI.Enabled() && c.isExited() && !c.snapshot().Sandbox {
		s.opts.NRI.StopContainer(ctx, c.nriDescribe())
	}
}

// nriCreate asks NRI plugins about a container being created and applies
// their adjustment to its spec. From here on, a failed create tells the
// plugins the container is gone.
func (s *Service) nriCreate(ctx context.Context, rec *Record, cfg *runtimeapi.ContainerConfig, oci *specs.Spec, cleanups *[]cleanup) error {
	described := nriContainer(rec, cfg, oci)
	*cleanups = append(*cleanups, cleanup{"NRI undo of CreateContainer", func(ctx context.Context) error {
		s.opts.NRI.UndoCreateContainer(ctx, described)
		return nil
	}})
	adj, err := s.opts.NRI.CreateContainer(ctx, described)
	if err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	if err := nri.AdjustSpec(oci, adj, s.nriHost()); err != nil {
		if errors.Is(err, nri.ErrUnsupported) {
			return fmt.Errorf("%w: container %s: %w", ErrInvalid, rec.ID, err)
		}
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	if adj.GetLinux().GetResources() == nil && adj.GetLinux().GetOomScoreAdj() == nil {
		return nil
	}
	// Status reports the resources the container really got.
	oom := cfg.GetLinux().GetResources().GetOomScoreAdj()
	if oci.Process != nil && oci.Process.OOMScoreAdj != nil {
		oom = int64(*oci.Process.OOMScoreAdj)
	}
	var res *specs.LinuxResources
	if oci.Linux != nil {
		res = oci.Linux.Resources
	}
	rec.Resources, err = proto.Marshal(criResources(res, oom))
	return err
}

// nriUpdateResources is UpdateContainerResources with NRI: plugins may
// change the resources before they are applied.
func (s *Service) nriUpdateResources(ctx context.Context, c *ctr, r *runtimeapi.LinuxContainerResources) error {
	ctx, unblock := s.opts.NRI.BlockSync(ctx)
	defer unblock()
	rec, oci, err := s.resourcesUpdate(c, r)
	if err != nil {
		return err
	}
	// Asked before the container's lock is taken: the plugins' updates of
	// other containers are applied inside, and one of those may be
	// updating this one.
	res, err := s.opts.NRI.UpdateContainer(ctx, c.nriDescribe(), api.FromOCILinuxResources(oci, nil))
	if err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	// Onto what the cgroup holds now: a field the request leaves out keeps
	// its value (as when the monitor writes only the fields set), and a
	// swap limit equal to the memory limit (no swap, as set at create)
	// follows a new memory limit, which it would otherwise stay below.
	cur, err := c.currentResources()
	if err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	next, err := nri.MergeResources(cur, res, s.host.CgroupV2())
	if err != nil {
		return fmt.Errorf("%w: container %s: %w", ErrInvalid, rec.ID, err)
	}
	c.op.Lock()
	err = s.applyResources(ctx, c, next)
	c.op.Unlock()
	if err != nil {
		return err
	}
	s.opts.NRI.PostUpdateContainer(ctx, c.nriDescribe())
	return nil
}

// NRIContainers lists the containers NRI plugins are synchronised with:
// those that have not exited. Pods' infra containers are the pods'.
func (s *Service) NRIContainers() []*api.Container {
	s.mu.RLock()
	list := make([]*ctr, 0, len(s.ctrs))
	for _, c := range s.ctrs {
		list = append(list, c)
	}
	s.mu.RUnlock()
	var out []*api.Container
	for _, c := range list {
		rec := c.snapshot()
		if rec.Sandbox || c.isExited() || (rec.State != StateCreated && rec.State != StateRunning) {
			continue
		}
		out = append(out, c.nriDescribe())
	}
	return out
}

// criResources is the CRI view of OCI resources (what Status reports).
func criResources(r *specs.LinuxResources, oomScoreAdj int64) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{OomScoreAdj: oomScoreAdj}
	if r == nil {
		return out
	}
	if c := r.CPU; c != nil {
		if c.Shares != nil {
			out.CpuShares = int64(*c.Shares)
		}
		if c.Quota != nil {
			out.CpuQuota = *c.Quota
		}
		if c.Period != nil {
			out.CpuPeriod = int64(*c.Period)
		}
		out.CpusetCpus, out.CpusetMems = c.Cpus, c.Mems
	}
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			out.MemoryLimitInBytes = *m.Limit
		}
		if m.Swap != nil {
			out.MemorySwapLimitInBytes = *m.Swap
		}
	}
	for _, h := range r.HugepageLimits {
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
	}
	if len(r.Unified) > 0 {
		out.Unified = make(map[string]string, len(r.Unified))
		for k, v := range r.Unified {
			out.Unified[k] = v
		}
	}
	return out
}

// currentResources is what a running container's cgroup is set to: its
// spec's resources, with the CRI fields as UpdateContainerResources last
// set them.
func (c *ctr) currentResources() (*specs.LinuxResources, error) {
	c.mu.RLock()
	raw, cri := c.spec, c.resources
	c.mu.RUnlock()
	var sp specs.Spec
	if err := json.Unmarshal(raw, &sp); err != nil {
		return nil, fmt.Errorf("container spec: %w", err)
	}
	cur := &specs.LinuxResources{}
	if sp.Linux != nil && sp.Linux.Resources != nil {
		cur = sp.Linux.Resources
	}
	if cri != nil {
		if err := spec.Resources(cur, cri, true, "resources"); err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// applyResources sets a running container's cgroup to r (CPU, memory,
// hugepages, unified, and pids when set) and records the CRI view of it.
func (s *Service) applyResources(ctx context.Context, c *ctr, r *specs.LinuxResources) error {
	rec := c.snapshot()
	if c.isExited() {
		return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	if err := s.podProc(rec.PodID).Update(ctx, rec.ID, rec.Dir, r); err != nil {
		if monitor.IsCode(err, monitor.CodeNotRunning) {
			return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		return fmt.Errorf("container %s: update resources: %w", rec.ID, err)
	}
	c.mu.Lock()
	// oom_score_adj belongs to the process, set at start: keep the old one.
	next := criResources(r, c.resources.GetOomScoreAdj())
	b, err := proto.Marshal(next)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.resources = next
	c.rec.Resources = b
	rec = c.rec
	c.mu.Unlock()
	if err := s.records.Put(rec.ID, &rec); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	return nil
}

// NRIUpdate applies a plugin's update of a container's resources (only
// the fields the plugin sets change). It takes no NRI sync block: it runs
// inside Synchronize or inside a call that holds one.
func (s *Service) NRIUpdate(ctx context.Context, u *api.ContainerUpdate) error {
	c, err := s.lookupExact(u.GetContainerId())
	if err != nil {
		return err
	}
	c.op.Lock()
	defer c.op.Unlock()
	cur, err := c.currentResources()
	if err != nil {
		return fmt.Errorf("container %s: %w", u.GetContainerId(), err)
	}
	next, err := nri.MergeResources(cur, u.GetLinux().GetResources(), s.host.CgroupV2())
	if err != nil {
		return fmt.Errorf("%w: container %s: %w", ErrInvalid, u.GetContainerId(), err)
	}
	return s.applyResources(ctx, c, next)
}

// NRIEvict stops a container a plugin evicts, at once (SIGKILL), as
// containerd does.
func (s *Service) NRIEvict(ctx context.Context, e *api.ContainerEviction) error {
	c, err := s.lookupExact(e.GetContainerId())
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	s.log.Warn("container evicted by an NRI plugin", "container", e.GetContainerId(), "reason", e.GetReason())
	if err := s.stop(ctx, c, 0); err != nil {
		return err
	}
	s.nriStopped(ctx, c)
	return nil
}

// lookupExact finds a (non-infra) container by its full id, as plugins
// name them.
func (s *Service) lookupExact(id string) (*ctr, error) {
	s.mu.RLock()
	c, ok := s.ctrs[id]
	s.mu.RUnlock()
	if !ok || c.snapshot().Sandbox {
		return nil, fmt.Errorf("%w: container %s", ErrNotFound, id)
	}
	return c, nil
}
